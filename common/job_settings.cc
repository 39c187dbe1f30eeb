#include "common/job_settings.h"

#include <cstdint>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/token.h"

namespace cohort {
namespace {

absl::StatusOr<absl::Duration> DurationSetting(const std::optional<absl::Duration>& given,
                                               const char* variable, absl::Duration fallback) {
  if (given) return *given;
  absl::StatusOr<std::optional<absl::Duration>> from_env = env::GetDuration(variable);
  if (!from_env.ok()) return from_env.status();
  return from_env->value_or(fallback);
}

// `what` names the setting in the message, e.g. "the process id".
absl::StatusOr<int> RequiredInt(const std::optional<int>& given, const char* variable,
                                const char* what) {
  if (given) return *given;
  absl::StatusOr<std::optional<int64_t>> from_env = env::GetInt(variable);
  if (!from_env.ok()) return from_env.status();
  if (!from_env->has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not set: set ", variable,
                     " (cohort-run and cohort-operator set it for you) or "
                     "pass it explicitly"));
  }
  return static_cast<int>(**from_env);
}

}  // namespace

absl::Status ParseTimeoutFlags(const TimeoutFlags& flags, JobSettingsOverrides* given) {
  for (auto [flag, out, name] :
       {std::tuple{&flags.initialization, &given->initialization_timeout,
                   "--initialization-timeout"},
        std::tuple{&flags.heartbeat, &given->heartbeat_timeout, "--heartbeat-timeout"},
        std::tuple{&flags.shutdown, &given->shutdown_timeout, "--shutdown-timeout"}}) {
    if (flag->empty()) continue;
    absl::StatusOr<absl::Duration> d = env::ParseDuration(*flag);
    if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", d.status().message()));
    *out = *d;
  }
  return absl::OkStatus();
}

absl::StatusOr<JobTimeouts> ResolveJobTimeouts(const JobSettingsOverrides& given) {
  JobTimeouts t;
  for (auto [out, value, variable, fallback] :
       {std::tuple{&t.initialization, &given.initialization_timeout, env::kInitializationTimeout,
                   kDefaultInitializationTimeout},
        std::tuple{&t.heartbeat, &given.heartbeat_timeout, env::kHeartbeatTimeout,
                   kDefaultHeartbeatTimeout},
        std::tuple{&t.shutdown, &given.shutdown_timeout, env::kShutdownTimeout,
                   kDefaultShutdownTimeout}}) {
    absl::StatusOr<absl::Duration> d = DurationSetting(*value, variable, fallback);
    if (!d.ok()) return d.status();
    *out = *d;
  }
  if (t.heartbeat <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("the heartbeat timeout must be positive (",
                                                   env::kHeartbeatTimeout, "); e.g. 10s"));
  }
  return t;
}

absl::StatusOr<JobSettings> ResolveJobSettings(const JobSettingsOverrides& given) {
  JobSettings s;
  absl::StatusOr<int> num = RequiredInt(given.num_processes, env::kNumProcesses, "the job size");
  if (!num.ok()) return num.status();
  absl::StatusOr<int> id = RequiredInt(given.process_id, env::kProcessId, "the process id");
  if (!id.ok()) return id.status();
  if (*num < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job size is ", *num, " (", env::kNumProcesses, "); a job has at least 1 process"));
  }
  if (*id < 0 || *id >= *num) {
    return absl::InvalidArgumentError(
        absl::StrCat("process id ", *id, " is out of range for a job of ", *num,
                     " processes; ids run 0..", *num - 1, " (check ", env::kProcessId, ")"));
  }
  s.num_processes = *num;
  s.process_id = *id;

  s.coordinator_address =
      given.coordinator_address.value_or(env::Get(env::kCoordinatorAddress).value_or(""));
  if (!s.coordinator_address.empty()) {
    if (absl::StatusOr<int> port = env::CoordinatorPort(s.coordinator_address); !port.ok()) {
      return port.status();
    }
  }

  absl::StatusOr<std::optional<int64_t>> attempt = env::GetInt(env::kRestartAttempt);
  if (!attempt.ok()) return attempt.status();
  if (attempt->has_value()) {
    if (**attempt < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          env::kRestartAttempt, "=", **attempt, " is negative; restart attempts count from 0"));
    }
    s.restart_attempt = static_cast<int>(**attempt);
  }

  absl::StatusOr<std::optional<int64_t>> local = env::GetInt(env::kLocalProcessId);
  if (!local.ok()) return local.status();
  absl::StatusOr<std::optional<int64_t>> local_count = env::GetInt(env::kProcessesPerPod);
  if (!local_count.ok()) return local_count.status();
  s.local_process_id = static_cast<int>(local->value_or(0));
  s.local_process_count = static_cast<int>(local_count->value_or(1));
  if (s.local_process_count < 1 || s.local_process_id < 0 ||
      s.local_process_id >= s.local_process_count) {
    return absl::InvalidArgumentError(
        absl::StrCat(env::kLocalProcessId, "=", s.local_process_id, " is not an index below ",
                     env::kProcessesPerPod, "=", s.local_process_count,
                     "; the launcher (cohort-launch, cohort-run) sets both, unset them otherwise"));
  }

  absl::StatusOr<JobTimeouts> timeouts = ResolveJobTimeouts(given);
  if (!timeouts.ok()) return timeouts.status();
  s.timeouts = *timeouts;

  if (given.token) {
    s.token = *given.token;
  } else {
    absl::StatusOr<std::string> token = LoadToken(given.token_file.value_or(""));
    if (!token.ok()) return token.status();
    s.token = *token;
  }
  return s;
}

}  // namespace cohort
