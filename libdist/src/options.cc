#include "libdist/src/options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/token.h"

namespace dist::internal {
namespace env = ::cohort::env;

namespace {

absl::StatusOr<int> IntSetting(const std::optional<int>& value, const char* name,
                               const char* field) {
  if (value) return *value;
  absl::StatusOr<std::optional<int64_t>> from_env = env::GetInt(name);
  if (!from_env.ok()) return from_env.status();
  if (!from_env->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is not set: pass Options::", field, " or set ", name,
        " (cohort-run and cohort-operator set it for you)"));
  }
  return static_cast<int>(**from_env);
}

absl::StatusOr<absl::Duration> DurationSetting(const std::optional<absl::Duration>& value,
                                               const char* name, absl::Duration fallback) {
  if (value) return *value;
  absl::StatusOr<std::optional<absl::Duration>> from_env = env::GetDuration(name);
  if (!from_env.ok()) return from_env.status();
  return from_env->value_or(fallback);
}

}  // namespace

absl::StatusOr<ResolvedOptions> ResolveOptions(const Options& options) {
  ResolvedOptions r;
  absl::StatusOr<int> num = IntSetting(options.num_processes, env::kNumProcesses, "num_processes");
  if (!num.ok()) return num.status();
  absl::StatusOr<int> id = IntSetting(options.process_id, env::kProcessId, "process_id");
  if (!id.ok()) return id.status();
  if (*num < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_processes is ", *num, "; a job has at least 1 process"));
  }
  if (*id < 0 || *id >= *num) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process_id ", *id, " is out of range for a job of ", *num,
        " processes; ids run 0..", *num - 1, " (check COHORT_PROCESS_ID)"));
  }
  r.num_processes = *num;
  r.process_id = *id;

  for (auto [field, value, name, fallback] :
       {std::tuple{&r.initialization_timeout, &options.initialization_timeout,
                   env::kInitializationTimeout, absl::Minutes(5)},
        std::tuple{&r.heartbeat_timeout, &options.heartbeat_timeout, env::kHeartbeatTimeout,
                   absl::Seconds(10)},
        std::tuple{&r.shutdown_timeout, &options.shutdown_timeout, env::kShutdownTimeout,
                   absl::Minutes(5)}}) {
    absl::StatusOr<absl::Duration> d = DurationSetting(*value, name, fallback);
    if (!d.ok()) return d.status();
    *field = *d;
  }

  r.agent_socket = options.agent_socket.value_or(env::Get(env::kAgentSocket).value_or(""));
  r.coordinator_address =
      options.coordinator_address.value_or(env::Get(env::kCoordinatorAddress).value_or(""));

  Mode mode = options.mode;
  if (mode == Mode::kAuto) {
    std::string from_env = absl::AsciiStrToLower(env::Get(env::kMode).value_or(""));
    if (from_env == "agent") {
      mode = Mode::kAgent;
    } else if (from_env == "standalone") {
      mode = Mode::kStandalone;
    } else if (!from_env.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "COHORT_MODE='", from_env, "' is not a mode; use 'agent' or 'standalone'"));
    } else {
      mode = r.agent_socket.empty() ? Mode::kStandalone : Mode::kAgent;
    }
  }
  r.mode = mode;
  if (mode == Mode::kAgent && r.agent_socket.empty()) {
    return absl::InvalidArgumentError(
        "agent mode needs the sidecar's socket: set COHORT_AGENT_SOCKET or Options::agent_socket");
  }
  if (mode == Mode::kStandalone && r.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator_address is not set: pass Options::coordinator_address or set "
        "COHORT_COORDINATOR_ADDRESS to host:port of process 0");
  }

  if (options.token) {
    r.token = *options.token;
  } else {
    absl::StatusOr<std::string> token = cohort::LoadToken();
    if (!token.ok()) return token.status();
    r.token = *token;
  }
  return r;
}

}  // namespace dist::internal
