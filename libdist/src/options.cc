#include "libdist/src/options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"

namespace dist::internal {
namespace env = ::cohort::env;

absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options) {
  cohort::JobSettingsOverrides given;
  given.coordinator_address = options.coordinator_address;
  given.num_processes = options.num_processes;
  given.process_id = options.process_id;
  given.initialization_timeout = options.initialization_timeout;
  given.heartbeat_timeout = options.heartbeat_timeout;
  given.shutdown_timeout = options.shutdown_timeout;
  given.token = options.token;
  absl::StatusOr<cohort::JobSettings> job = cohort::ResolveJobSettings(given);
  if (!job.ok()) return job.status();

  ResolvedOptions r;
  r.job = *std::move(job);
  r.agent_socket = options.agent_socket.value_or(env::Get(env::kAgentSocket).value_or(""));
  Mode mode = options.mode;
  if (mode == Mode::kAuto) {
    std::string from_env = absl::AsciiStrToLower(env::Get(env::kMode).value_or(""));
    if (from_env == "agent") {
      mode = Mode::kAgent;
    } else if (from_env == "standalone") {
      mode = Mode::kStandalone;
    } else if (!from_env.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("COHORT_MODE='", from_env, "' is not a mode; use 'agent' or 'standalone'"));
    } else {
      mode = r.agent_socket.empty() ? Mode::kStandalone : Mode::kAgent;
    }
  }
  r.mode = mode;
  if (mode == Mode::kAgent && r.agent_socket.empty()) {
    return absl::InvalidArgumentError(
        "agent mode needs the sidecar's socket: set COHORT_AGENT_SOCKET or Options::agent_socket");
  }
  if (mode == Mode::kStandalone && r.job.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator_address is not set: pass Options::coordinator_address or set "
        "COHORT_COORDINATOR_ADDRESS to host:port of process 0");
  }
  return r;
}

}  // namespace dist::internal
