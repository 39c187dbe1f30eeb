#include "common/rfc3339.h"

namespace cohort {

std::string FormatRfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string FormatRfc3339Micro(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

std::optional<absl::Time> ParseRfc3339(const std::string& rfc3339) {
  absl::Time t;
  std::string err;
  if (rfc3339.empty() || !absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err))
    return std::nullopt;
  return t;
}

}  // namespace cohort
