#include "sidecar/spare.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"
#include "common/log.h"
#include "common/metrics_http_server.h"
#include "common/token.h"
#include "coordination/attempts/attempt_client.h"
#include "sidecar/launch_channel.h"

extern char** environ;

namespace cohort::sidecar {
namespace {

// The environment of this process with `set` replacing or adding variables.
std::vector<std::string> EnvironmentWith(
    const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : set) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [name, value] : set) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

}  // namespace

bool IsSpare(const SidecarFlags& flags) {
  return flags.rank == kUnset && env::Get(env::kSpare).has_value() &&
         !env::Get(env::kProcessId).has_value();
}

int RunSpare(const SidecarFlags& flags, const std::vector<std::string>& argv, sigset_t signals) {
  const std::string name = *env::Get(env::kSpare);
  const std::string coordinator = !flags.coordinator_address.empty()
                                      ? flags.coordinator_address
                                      : env::Get(env::kCoordinatorAddress).value_or("");
  absl::StatusOr<std::string> hub = coordination::AttemptControlAddress(coordinator);
  absl::StatusOr<std::string> token = LoadToken(flags.token_file);
  absl::StatusOr<std::optional<int64_t>> per_pod = env::GetInt(env::kProcessesPerPod);
  const std::string launch_socket = !flags.launch_socket.empty()
                                        ? flags.launch_socket
                                        : env::Get(env::kLaunchSocket).value_or("");
  std::string error;
  if (!hub.ok())
    error = absl::StrCat("the coordinator address (COHORT_COORDINATOR_ADDRESS): ",
                         hub.status().message());
  if (!token.ok()) error = std::string(token.status().message());
  if (!per_pod.ok()) error = std::string(per_pod.status().message());
  if (launch_socket.empty()) {
    error =
        "a spare pod restarts in place only: COHORT_LAUNCH_SOCKET (or --launch-socket) is not set";
  }
  if (!error.empty()) {
    LogError("spare ", name, ": ", error);
    return 2;
  }
  // As the sidecar it becomes reads it (ResolveProcessesPerPod): the flag first.
  const int processes_per_pod = flags.processes_per_pod != kUnset
                                    ? flags.processes_per_pod
                                    : static_cast<int>(per_pod->value_or(1));
  if (processes_per_pod < 1) {
    LogError("spare ", name, ": the processes per pod must be at least 1, not ", processes_per_pod);
    return 2;
  }

  // cohort-launch waits on its socket: no attempt is ordered until the pod holds a slot.
  absl::StatusOr<std::unique_ptr<LaunchChannel>> launch =
      LaunchChannel::Serve(launch_socket, std::nullopt, [](const launch::AttemptEnded&) {});
  if (!launch.ok()) {
    LogError("spare ", name, ": ", launch.status().message());
    return 2;
  }
  absl::Mutex mu;
  bool following = false;
  std::optional<std::pair<int32_t, int32_t>> slot;  // (pod index, attempt) once given.
  auto follower = coordination::AttemptFollower::Spare(
      *hub, *token, name, [&](const coordination::attemptspb::AttemptOrder& order) {
        absl::MutexLock lock(&mu);
        following = true;
        if (order.has_pod_index() && !slot)
          slot = std::make_pair(order.pod_index(), order.attempt());
      });
  auto registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry, "sidecar");
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      flags.http_address, flags.http_port, {registry}, [&]() -> std::string {
        absl::MutexLock lock(&mu);
        return following ? "" : "the spare does not follow the job's attempt hub yet";
      });
  if (!http.ok()) {
    LogError("spare ", name, ": ", http.status().message());
    return 2;
  }
  LogInfo("spare ", name, ": holding no rank; following the attempt hub at ", *hub,
          ", metrics on port ", (*http)->port());

  // Waits for a slot or a signal. The signals are blocked in every thread: one of its own takes
  // them (detached: the process exits or re-executes itself, either way it goes).
  int stop_signal = 0;
  std::thread([&mu, &stop_signal, signals] {
    pthread_setname_np(pthread_self(), "signals");
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    absl::MutexLock lock(&mu);
    stop_signal = sig;
  }).detach();
  std::optional<std::pair<int32_t, int32_t>> given;
  {
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return slot.has_value() || stop_signal != 0;
    };
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    if (stop_signal != 0) {
      LogInfo("spare ", name, ": ", strsignal(stop_signal), ": exiting, no rank held");
      return 0;
    }
    given = slot;
  }
  const auto [pod_index, attempt] = *given;
  const int first_rank = pod_index * processes_per_pod;
  LogInfo("spare ", name, ": takes pod index ", pod_index, " (ranks ", first_rank, "-",
          first_rank + processes_per_pod - 1, ") in restart attempt ", attempt,
          "; restarting as that pod's sidecar");
  // What the new image must not find taken: the HTTP port, the launch socket (cohort-launch
  // reconnects), the hub stream.
  follower.reset();
  http->reset();
  launch->reset();
  std::vector<std::string> env = EnvironmentWith(
      {{env::kProcessId, absl::StrCat(first_rank)}, {env::kRestartAttempt, absl::StrCat(attempt)}});
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  execve("/proc/self/exe", args.data(), envp.data());
  LogError("spare ", name, ": cannot restart as pod ", pod_index,
           "'s sidecar: ", std::strerror(errno));
  return 1;
}

}  // namespace cohort::sidecar
