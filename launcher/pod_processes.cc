#include "launcher/pod_processes.h"

#include <signal.h>

#include <deque>
#include <fstream>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "launcher/cpu_binding.h"
#include "launcher/python_probe_install.h"

namespace cohort {
namespace {

// Lines of a process's output kept as the termination message of an attempt it ended.
constexpr size_t kTailLines = 8;

// The OOM killer's count in this container's cgroup (cgroup v2); -1 when it cannot be read.
int64_t OomKills() {
  std::ifstream in("/sys/fs/cgroup/memory.events");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return -1;
}

// The variables local process `local` of `pod` gets on top of the pod's own.
std::map<std::string, std::string> ProcessEnvironment(const env::ProcessPlacement& pod, int local,
                                                      std::optional<int32_t> attempt,
                                                      bool one_process) {
  env::ProcessPlacement p = pod;
  p.local_index = local;
  std::map<std::string, std::string> vars;
  // --one-process: the command (torchrun) starts the pod's processes and gives them their ranks;
  // a pod that holds another pod's slot (a spare) tells it which node it now is.
  if (one_process &&
      env::Get(env::kProcessId) != absl::StrCat(pod.pod_index * pod.processes_per_pod)) {
    vars[env::kTorchrunNodeRank] = absl::StrCat(pod.pod_index);
  }
  if (!one_process) {
    const std::string socket_base = env::Get(env::kAgentSocket).value_or("");
    for (auto& [name, value] :
         env::ProcessVariables(p, env::Get(env::kJaxLocalDeviceIds).has_value()))
      vars[name] = value;
    if (!socket_base.empty())
      vars[env::kAgentSocket] = env::AgentSocketPath(socket_base, local, p.processes_per_pod);
    for (auto& [name, value] : ProbeVariables(socket_base, p.rank())) vars[name] = value;
  }
  if (attempt) vars[env::kRestartAttempt] = absl::StrCat(*attempt);
  return vars;
}

// Starts every local process of `pod` (those started go to `mine`); false when one could not be
// started.
bool StartProcesses(ProcessGroup& group, const PodCommand& run, const env::ProcessPlacement& pod,
                    std::optional<int32_t> attempt, std::vector<ProcessGroup::Child*>& mine) {
  const CpuBind bind = CpuBindFromEnvironment(kDefaultCpuBind).value_or(CpuBind::kNone);
  const std::vector<int> cpus = AllowedCpus();
  const int processes = run.one_process ? 1 : pod.processes_per_pod;
  for (int local = 0; local < processes; ++local) {
    ProcessGroup::Child child;
    child.rank = pod.pod_index * pod.processes_per_pod + local;
    child.label = absl::StrCat("rank ", child.rank);
    child.pod = pod.pod_index;
    Subprocess::Options options{run.command,
                                ProcessEnvironment(pod, local, attempt, run.one_process)};
    // The pod's CPUs (its cpuset), shared out among its processes.
    if (bind == CpuBind::kCores && !run.one_process)
      options.cpus = CpuShare(cpus, local, pod.processes_per_pod);
    ProcessGroup::Child* c = group.Start(std::move(child), options);
    if (c == nullptr) return false;
    mine.push_back(c);
  }
  return true;
}

}  // namespace

AttemptOutcome RunPodProcesses(ProcessGroup& group, const PodCommand& run,
                               const env::ProcessPlacement& pod, std::optional<int32_t> attempt,
                               const std::function<std::optional<int32_t>()>& ordered) {
  const int64_t oom_before = OomKills();
  group.ClearKillDeadline();
  AttemptOutcome out;
  std::vector<ProcessGroup::Child*> mine;
  const bool started = StartProcesses(group, run, pod, attempt, mine);
  if (!started) group.KillAllAt(absl::Now());

  std::vector<const ProcessGroup::Child*> finished;
  // The last lines of each process: the root cause's are its termination message.
  std::map<const ProcessGroup::Child*, std::deque<std::string>> tails;
  ProcessGroup::Hooks hooks;
  hooks.on_line = [&](ProcessGroup::Child& c, std::string line) {
    std::deque<std::string>& tail = tails[&c];
    tail.push_back(line);
    if (tail.size() > kTailLines) tail.pop_front();
    ProcessGroup::Print(absl::StrCat("[", c.label, "] ", line));
  };
  hooks.on_exits = [&](std::vector<ProcessGroup::Child*>& exited) {
    for (ProcessGroup::Child* c : exited) {
      finished.push_back(c);
      if (ClassifyExit(c->Exit()) == ExitKind::kSucceeded) continue;
      ProcessGroup::Print(absl::StrCat(
          kLauncherName, ": ", c->label, " ", Subprocess::DescribeStatus(*c->process.status()),
          c->EndedByTheNotice() ? ": the preemption notice ended it before its "
                                  "program could take it; a preemption (exit code 76)"
                                : ""));
      // The others are told by the job (libdist's fate sharing) and exit by themselves; any
      // still running after the window are killed.
      group.KillAllAt(absl::Now() + run.window);
    }
  };
  if (ordered) {
    hooks.on_tick = [&] {
      if (out.superseded || !(out.superseded = ordered())) return;
      ProcessGroup::Print(absl::StrCat(kLauncherName, ": restart attempt ", *out.superseded,
                                       " was ordered while attempt ", attempt.value_or(0),
                                       " still runs here: stopping its processes"));
      group.KillAllAt(absl::Now());
    };
  }
  hooks.on_signal = [&](int signo) {
    // Kubernetes sends SIGTERM to the container's first process only: every process must see
    // it (each reports the preemption notice), as under torchrun.
    out.signalled = true;
    for (ProcessGroup::Child* c : mine) {
      if (!c->process.running()) continue;
      c->noticed |= signo == SIGTERM;
      c->process.Signal(signo);
    }
  };
  group.Run(hooks);

  const ProcessGroup::Child* cause = RootCauseChild(finished);
  if (!started) {
    std::cerr << kLauncherName << ": could not start every process; stopped the others\n";
    out.exit_code = cause != nullptr ? Subprocess::ExitCodeOf(cause->Status()) : 1;
    return out;
  }
  if (cause == nullptr) {
    out.reason = "Completed";
    return out;
  }
  out.exit_code = Subprocess::ExitCodeOf(cause->Status());
  if (out.exit_code == 128 + SIGKILL && oom_before >= 0 && OomKills() > oom_before)
    out.reason = "OOMKilled";
  out.message = absl::StrJoin(tails[cause], "\n");
  out.cause =
      absl::StrCat(cause->label, "'s status (", Subprocess::DescribeStatus(cause->Status()), ")");
  return out;
}

}  // namespace cohort
