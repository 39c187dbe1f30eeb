#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace cohort::local {

// The media type client-go's typed clients write built-in kinds in (Helm's release records among
// them: Secrets created and updated by its storage driver).
inline constexpr char kKubeProtobufMediaType[] = "application/vnd.kubernetes.protobuf";

// A request body in Kubernetes' protobuf encoding ("k8s\0", then a runtime.Unknown holding the
// kind and the object's bytes), as the JSON object the API server stores. The kinds read are the
// ones typed clients write to this server: Secret, ConfigMap, Namespace and
// SelfSubjectAccessReview (`kubectl auth can-i`), with the ObjectMeta
// fields a client sets (name, generateName, namespace, resourceVersion, labels, annotations,
// finalizers). InvalidArgument for a malformed body; Unimplemented, naming the kind, for any other
// kind (send it as JSON).
absl::StatusOr<nlohmann::json> DecodeKubeProtobuf(const std::string& body);

}  // namespace cohort::local
