#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dist/distributed.h"

namespace dist::internal {

// Options with every field decided: explicit value, else environment, else default.
struct ResolvedOptions {
  Mode mode = Mode::kStandalone;  // Never kAuto.
  std::string coordinator_address;
  int num_processes = 1;
  int process_id = 0;
  absl::Duration initialization_timeout;
  absl::Duration heartbeat_timeout;
  absl::Duration shutdown_timeout;
  std::string agent_socket;
  std::string token;
};

// InvalidArgument naming the setting (and its variable) that is missing or malformed.
absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options);

}  // namespace dist::internal
