#pragma once

// The OpenAPI v3 documents the local API server publishes, built from the kinds it serves:
// the index (GET /openapi/v3) and one document per group-version (GET /openapi/v3/api/v1,
// /openapi/v3/apis/<group>/<version>). kubectl reads them to learn that a kind takes server-side
// field validation (the fieldValidation parameter of its operations) and, for `kubectl explain`,
// to find a kind's schema by its x-kubernetes-group-version-kind. A custom resource's schema is its
// CRD's openAPIV3Schema with apiVersion, kind and metadata (a reference to ObjectMeta) filled in,
// as apiextensions-apiserver publishes it; built-in kinds have their paths but no schema.
// Pure functions: thread-safe.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "localcluster/apiserver/object_store.h"

namespace cohort::local {

// {"paths": {"apis/cohort.dev/v1alpha1": {"serverRelativeURL":
// "/openapi/v3/apis/cohort.dev/v1alpha1"}, ...}}
nlohmann::json OpenApiV3Index(const std::vector<ResourceType>& types);

// The document of `group_version_path` ("api/v1" or "apis/<group>/<version>"); nullopt when no
// kind is served there.
std::optional<nlohmann::json> OpenApiV3Document(const std::string& group_version_path,
                                                const std::vector<ResourceType>& types);

// The components/schemas name of a custom resource's kind: "dev.cohort.v1alpha1.DistributedJob"
// (the group's DNS labels reversed, then the version and the kind).
std::string OpenApiSchemaName(const ResourceType& type);

}  // namespace cohort::local
