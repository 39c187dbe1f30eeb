#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace cohort {

// Kubernetes timestamps (metav1.Time): RFC 3339 in UTC, whole seconds.
std::string FormatRfc3339(absl::Time t);
// metav1.MicroTime (a Lease's renewTime): RFC 3339 in UTC with microseconds.
std::string FormatRfc3339Micro(absl::Time t);
// Any RFC 3339 time; nullopt for an empty or malformed string.
std::optional<absl::Time> ParseRfc3339(const std::string& rfc3339);

}  // namespace cohort
