#include "common/env.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cohort::env {

std::optional<std::string> Get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const char* name) {
  std::optional<std::string> value = Get(name);
  if (!value) return std::optional<int64_t>();
  int64_t parsed;
  if (!absl::SimpleAtoi(*value, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "='", *value,
                     "' is not an integer; set it to a whole number or unset it"));
  }
  return std::optional<int64_t>(parsed);
}

absl::StatusOr<int> CoordinatorPort(absl::string_view address) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coordinator address '", address,
        "' has no valid port; write it as host:port, e.g. myjob-0.myjob.default.svc:8476"));
  }
  return port;
}

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  absl::Duration d;
  double seconds;
  absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (absl::SimpleAtod(trimmed, &seconds)) {
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(trimmed, &d)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not a duration; write it like 30s, 250ms, 5m or a number of seconds"));
  }
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("duration '", text, "' is negative"));
  }
  return d;
}

absl::StatusOr<std::optional<absl::Duration>> GetDuration(const char* name) {
  std::optional<std::string> value = Get(name);
  if (!value) return std::optional<absl::Duration>();
  absl::StatusOr<absl::Duration> d = ParseDuration(*value);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, ": ", d.status().message()));
  }
  return std::optional<absl::Duration>(*d);
}

}  // namespace cohort::env
