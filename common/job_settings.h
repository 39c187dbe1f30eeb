#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

// The settings every part of a job agrees on — who this process is, where the coordinator is,
// the job token and the three timeouts — with their defaults written once. libdist
// (dist::Options), cohort-sidecar (its flags) and cohort-run (its flags) resolve them the same
// way: an explicit value, else the environment of the pod contract (common/env.h), else the
// default.
namespace cohort {

// From the first registration until every process must have registered.
inline constexpr absl::Duration kDefaultInitializationTimeout = absl::Minutes(5);
// A connected process whose agent sent no heartbeat for this long has failed.
inline constexpr absl::Duration kDefaultHeartbeatTimeout = absl::Seconds(10);
// From the first process reaching the shutdown barrier until every live one must have.
inline constexpr absl::Duration kDefaultShutdownTimeout = absl::Minutes(5);

struct JobTimeouts {
  absl::Duration initialization = kDefaultInitializationTimeout;
  absl::Duration heartbeat = kDefaultHeartbeatTimeout;
  absl::Duration shutdown = kDefaultShutdownTimeout;
};

// Values given explicitly (a flag, a dist::Options field). Unset ones come from the environment.
struct JobSettingsOverrides {
  std::optional<std::string> coordinator_address;
  std::optional<int> num_processes;
  std::optional<int> process_id;
  std::optional<absl::Duration> initialization_timeout;
  std::optional<absl::Duration> heartbeat_timeout;
  std::optional<absl::Duration> shutdown_timeout;
  std::optional<std::string> token;       // The token itself.
  std::optional<std::string> token_file;  // A file holding it (used when `token` is unset).
};

struct JobSettings {
  std::string coordinator_address;  // Empty when neither given nor in the environment.
  int num_processes = 1;
  int process_id = 0;
  // The gang's restart attempt (COHORT_RESTART_ATTEMPT: 0 for the first run, +1 per gang
  // restart); nullopt when the launcher does not say.
  std::optional<int> restart_attempt;
  // The process's index among its pod's processes and how many those are
  // (COHORT_LOCAL_PROCESS_ID, COHORT_PROCESSES_PER_POD; 0 and 1 when unset).
  int local_process_id = 0;
  int local_process_count = 1;
  JobTimeouts timeouts;
  std::string token;  // Empty: no authentication.
};

// The timeout flags the binaries share (--initialization-timeout, --heartbeat-timeout,
// --shutdown-timeout), as written on the command line; empty: not given.
struct TimeoutFlags {
  std::string initialization;
  std::string heartbeat;
  std::string shutdown;
};
// Parses the given ones into `given`. InvalidArgument naming the flag when one is malformed.
absl::Status ParseTimeoutFlags(const TimeoutFlags& flags, JobSettingsOverrides* given);

// The three timeouts alone, for launchers that pass them on (cohort-run). InvalidArgument naming
// the variable when one is malformed.
absl::StatusOr<JobTimeouts> ResolveJobTimeouts(const JobSettingsOverrides& given);

// Everything. InvalidArgument naming the setting, its variable and the fix when one is missing
// (process id, job size) or malformed, or the process id is out of range; the coordinator
// address may be missing (not every part needs it) but must have a port when present.
absl::StatusOr<JobSettings> ResolveJobSettings(const JobSettingsOverrides& given);

}  // namespace cohort
