#pragma once

// The scale subresource of a custom resource whose CRD declares one (subresources.scale): an
// autoscaling/v1 Scale read from and written to the fields the CRD names, as Kubernetes serves it
// for `kubectl scale` and the HorizontalPodAutoscaler. ApiServer::ServeScale answers GET, PUT and
// PATCH of <resource>/<name>/scale with these.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "localcluster/apiserver/object_store.h"

namespace cohort::local {

// A CRD version's subresources.scale, or nullopt when it declares none. InvalidArgument when a
// path is not a dotted path from the object's root (".spec.replicas").
absl::StatusOr<std::optional<ScaleSubresource>> ScaleSubresourceOf(const nlohmann::json& version);

// The Scale of `object`: its name, namespace, uid, resourceVersion and creationTimestamp;
// spec.replicas from the spec path, status.replicas from the status path (0 while absent) and
// status.selector from the selector path (when the CRD names one and it is set).
nlohmann::json ScaleOf(const ScaleSubresource& scale, const nlohmann::json& object);

// The merge patch onto the object that a written Scale asks for: its spec.replicas at the spec
// path, and its metadata.resourceVersion (when set) as the write's precondition. InvalidArgument
// naming the field when spec.replicas is missing, not an integer or negative.
absl::StatusOr<nlohmann::json> ObjectPatchFor(const ScaleSubresource& scale,
                                              const nlohmann::json& written);

}  // namespace cohort::local
