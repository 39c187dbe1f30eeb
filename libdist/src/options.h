#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/job_settings.h"
#include "dist/distributed.h"

namespace dist::internal {

// dist::Options with every field decided: explicit value, else environment, else default.
struct ResolvedOptions {
  Mode mode = Mode::kStandalone;  // Never kAuto.
  cohort::JobSettings job;
  std::string agent_socket;  // Agent mode.
};

// InvalidArgument naming the setting (and its variable) that is missing or malformed.
absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options);

}  // namespace dist::internal
