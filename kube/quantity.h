#pragma once

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace cohort::kube {

// A Kubernetes resource quantity ("64Mi", "1.5Gi", "100M", "1e9", "250m", "4096") in its base
// unit (bytes for memory), rounded up to a whole unit as Kubernetes rounds a memory limit.
// Suffixes: Ki Mi Gi Ti Pi Ei (powers of 1024), n u m k M G T P E (powers of 1000), or an
// exponent (e3, E-2). nullopt for anything else: a negative value, an unknown suffix, a value
// beyond int64.
std::optional<int64_t> ParseQuantity(absl::string_view text);

}  // namespace cohort::kube
