#include "sidecar/sidecar_config.h"

#include <unistd.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/log.h"

namespace cohort::sidecar {
namespace {

// The ranks served, checked against the job size.
absl::StatusOr<int> ResolveProcessesPerPod(const SidecarFlags& flags, int rank, int num) {
  int per_pod = flags.processes_per_pod;
  if (per_pod == kUnset) {
    absl::StatusOr<std::optional<int64_t>> v = env::GetInt(env::kProcessesPerPod);
    if (!v.ok()) return v.status();
    per_pod = static_cast<int>(v->value_or(1));
  }
  if (per_pod < 1 || rank % per_pod != 0 || rank + per_pod > num) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this sidecar would serve ranks ", rank, " to ", rank + per_pod - 1,
        " (COHORT_PROCESS_ID=", rank, ", COHORT_PROCESSES_PER_POD=", per_pod, ") of a job of ", num,
        " (COHORT_NUM_PROCESSES): the first rank must be a multiple of the processes per pod, "
        "and every rank below the job size"));
  }
  return per_pod;
}

absl::StatusOr<std::string> ResolveAgentSocket(const SidecarFlags& flags) {
  std::string socket = flags.agent_socket;
  if (socket.empty()) socket = env::Get(env::kAgentSocket).value_or("");
  if (socket.empty()) {
    return absl::InvalidArgumentError(
        "agent socket unknown: set COHORT_AGENT_SOCKET or --agent-socket to a path in a "
        "directory shared with the trainer");
  }
  if (socket.size() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent socket path '", socket,
                     "' is too long for a Unix socket (limit ~100 bytes); use a shorter path"));
  }
  return socket;
}

}  // namespace

std::string PodName() {
  if (std::optional<std::string> name = env::Get(env::kPodName)) return *name;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

absl::StatusOr<SidecarConfig> ResolveConfig(SidecarFlags flags) {
  // Unset flags come from the environment contract, then the defaults.
  JobSettingsOverrides given;
  const bool spare = flags.rank == kUnset && env::IsSparePod();
  if (flags.rank != kUnset) given.process_id = flags.rank;
  if (spare) given.process_id = 0;  // It holds no rank: checked as the first pod's, then -1.
  if (flags.num_processes != kUnset) given.num_processes = flags.num_processes;
  if (!flags.coordinator_address.empty()) given.coordinator_address = flags.coordinator_address;
  if (!flags.token_file.empty()) given.token_file = flags.token_file;
  if (absl::Status s = ParseTimeoutFlags(flags.timeouts, &given); !s.ok()) return s;
  absl::StatusOr<JobSettings> settings = ResolveJobSettings(given);
  if (!settings.ok()) return settings.status();
  if (settings->coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator address unknown: set COHORT_COORDINATOR_ADDRESS or --coordinator-address "
        "(host:port of rank 0)");
  }
  absl::StatusOr<int> per_pod =
      ResolveProcessesPerPod(flags, settings->process_id, settings->num_processes);
  if (!per_pod.ok()) return per_pod.status();
  // A spare serves no agent until it is a pod's sidecar.
  absl::StatusOr<std::string> socket = spare ? std::string() : ResolveAgentSocket(flags);
  if (!socket.ok()) return socket.status();
  std::string launch_socket = !flags.launch_socket.empty()
                                  ? flags.launch_socket
                                  : env::Get(env::kLaunchSocket).value_or("");
  if (spare && launch_socket.empty()) {
    return absl::InvalidArgumentError(
        "a spare pod (COHORT_SPARE) restarts in place only: COHORT_LAUNCH_SOCKET (or "
        "--launch-socket) is not set; the operator sets it for spec.restartStrategy: InPlace");
  }
  if (settings->token.empty()) {
    LogWarning(
        "no job token configured (COHORT_TOKEN/COHORT_TOKEN_FILE): RPCs are not "
        "authenticated");
  }
  SidecarConfig config;
  config.settings = *std::move(settings);
  config.processes_per_pod = *per_pod;
  config.agent_socket = *std::move(socket);
  config.launch_socket = std::move(launch_socket);
  if (spare) {
    config.spare = *env::Get(env::kSpare);
    config.settings.process_id = -1;
  }
  config.flags = std::move(flags);
  return config;
}

}  // namespace cohort::sidecar
