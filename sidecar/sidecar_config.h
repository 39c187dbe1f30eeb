#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/job_settings.h"
#include "common/timeout_flags.h"

// cohort-sidecar's settings: its flags as given (main.cc declares them) and what it runs with,
// resolved against the COHORT_* environment the operator (or cohort-run) sets.
namespace cohort::sidecar {

// A number flag not given: it comes from the environment.
inline constexpr int kUnset = -1;

// The flags as written on the command line. Unset ones fall back to the COHORT_* environment
// the operator (or cohort-run) sets (ResolveConfig).
struct SidecarFlags {
  int rank = kUnset;               // From COHORT_PROCESS_ID.
  int num_processes = kUnset;      // From COHORT_NUM_PROCESSES.
  int processes_per_pod = kUnset;  // From COHORT_PROCESSES_PER_POD (default 1).
  std::string coordinator_address;
  std::string coordinator_bind_address = "0.0.0.0";
  std::string agent_socket;
  std::string token_file;
  std::string http_address = "0.0.0.0";
  int http_port = 9400;
  std::string http_port_file;
  TimeoutFlags timeouts;
  size_t per_rank_metrics_limit = 4096;
  bool preempt_before_attach = false;
  int jax_port = kUnset;  // From JAX_COORDINATOR_ADDRESS.
  bool no_jax_port = false;
  std::string jax_heartbeat_timeout;
  std::string launch_socket;  // From COHORT_LAUNCH_SOCKET; set: restart in place.
};

// What the sidecar runs with: the job's settings and the ranks it serves, resolved.
struct SidecarConfig {
  JobSettings settings;
  int processes_per_pod = 1;  // The ranks served: settings.process_id onwards.
  std::string agent_socket;   // The first rank's; env::AgentSocketPath names the others'.
  // cohort-launch's socket (COHORT_LAUNCH_SOCKET, spec.restartStrategy: InPlace): the sidecar
  // follows the job's attempts (rank 0 hosts their hub) and restarts in place. Empty: it does not.
  std::string launch_socket;
  SidecarFlags flags;  // The rest as given (JAX's port is resolved on rank 0 only).
  // A spare pod's sidecar (COHORT_SPARE set, no rank: env::IsSparePod()): the spare's name. It
  // holds no rank (settings.process_id is -1) until an attempt gives it a slot (sidecar/spare.h).
  std::string spare;

  // The pod's index in the job (-1 for a spare holding no slot).
  int pod_index() const { return spare.empty() ? settings.process_id / processes_per_pod : -1; }
};

// Resolves `flags` against the environment and checks them. InvalidArgument naming the setting,
// its variable and the fix when one is missing, malformed or out of range. Warns (in the log)
// when no job token is configured. A spare pod's (no --rank, env::IsSparePod()) needs no rank and
// no agent socket, but the launch socket (it restarts in place only).
absl::StatusOr<SidecarConfig> ResolveConfig(SidecarFlags flags);

// This pod's name: COHORT_POD_NAME, else the hostname (a pod's hostname is its name).
std::string PodName();

}  // namespace cohort::sidecar
