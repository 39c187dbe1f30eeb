#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace cohort::local {

// What Kubernetes' API server checks of a pod write that the local one enforces too (a
// subset): scheduling gates (spec.schedulingGates) can only be removed once the pod exists, and
// a pod is never bound (spec.nodeName) while it has any. `current` is the stored pod an update
// replaces, null for a create; status writes are not checked. InvalidArgument with Kubernetes'
// words otherwise.
absl::Status ValidatePodWrite(const nlohmann::json& pod, const nlohmann::json* current);

}  // namespace cohort::local
