// cohort-launch: starts the processes of one pod, as torchrun does on a node. The operator runs a
// trainer container's command through it when spec.processesPerPod is more than 1:
//
//   cohort-launch -- python train.py --lr 0.1
//
// It starts COHORT_PROCESSES_PER_POD copies of the command, local process l with its own rank's
// environment (COHORT_PROCESS_ID = the pod's first rank + l, COHORT_LOCAL_PROCESS_ID, RANK,
// LOCAL_RANK, JAX_PROCESS_ID, JAX_LOCAL_DEVICE_IDS when the pod has GPUs, and its own
// COHORT_AGENT_SOCKET: the pod's one sidecar serves every process on a socket of its own).
// Every output line is prefixed with the rank, so `kubectl logs` tells processes apart. SIGTERM
// and SIGINT are forwarded to every process (a preemption notice reaches all of them). When one
// process exits non-zero or is killed, the others get the fate-sharing window to exit by
// themselves (libdist tells them within a second) and are then killed; cohort-launch exits with
// the status of the process that caused it (128 + signal for a killed one; which one is
// common/exit_codes.h's RootCause), and with 0 only when every process exited 0. Local process l runs on the l-th share of the pod's CPUs
// (COHORT_CPU_BIND=none turns that off; launcher/cpu_binding.h). docs/operator.md has the rules.
//
//   cohort-launch --install /run/cohort/bin/cohort-launch
//
// copies cohort-launch itself there (the init container cohort-launch-install does this from the
// sidecar image, so the trainer's image needs nothing from Cohort). It is linked statically.

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/exit_codes.h"
#include "common/process/process_group.h"
#include "launcher/cpu_binding.h"

namespace cohort {
namespace {

constexpr char kName[] = "cohort-launch";
constexpr int kExitUsage = 2;
// How long the other processes get to exit by themselves after one failed.
constexpr absl::Duration kDefaultFateSharingWindow = absl::Seconds(5);

int Usage(const std::string& problem) {
  std::cerr << kName << ": " << problem << "\n"
            << "usage: " << kName << " [--grace-period 5s] -- PROGRAM [ARGS...]\n"
            << "       " << kName << " --install DESTINATION\n";
  return kExitUsage;
}

// Copies this executable to `destination` (atomically, mode 0755).
int Install(const std::string& destination) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dest(destination);
  if (dest.has_parent_path()) fs::create_directories(dest.parent_path(), ec);
  fs::path tmp = dest;
  tmp += ".tmp";
  fs::copy_file("/proc/self/exe", tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(tmp, fs::perms(0755), ec);
  if (!ec) fs::rename(tmp, dest, ec);
  if (ec) {
    std::cerr << kName << ": cannot install into " << destination << ": " << ec.message()
              << "; the directory must be writable (the operator mounts an emptyDir there)\n";
    return 1;
  }
  std::cout << kName << ": installed " << destination << "\n";
  return 0;
}

int Launch(const std::vector<std::string>& command, absl::Duration window) {
  absl::StatusOr<env::ProcessPlacement> pod = env::PodPlacementFromEnvironment();
  if (!pod.ok()) {
    std::cerr << kName << ": " << pod.status().message() << "\n";
    return kExitUsage;
  }
  const std::string socket_base = env::Get(env::kAgentSocket).value_or("");
  const bool gpus = env::Get(env::kJaxLocalDeviceIds).has_value();
  absl::StatusOr<CpuBind> bind = CpuBindFromEnvironment(kDefaultCpuBind);
  if (!bind.ok()) {
    std::cerr << kName << ": " << bind.status().message() << "\n";
    return kExitUsage;
  }
  const std::vector<int> cpus = AllowedCpus();

  ProcessGroup group(kName);
  bool started = true;
  for (int local = 0; local < pod->processes_per_pod && started; ++local) {
    env::ProcessPlacement p = *pod;
    p.local_index = local;
    std::map<std::string, std::string> vars;
    for (auto& [name, value] : env::ProcessVariables(p, gpus)) vars[name] = value;
    if (!socket_base.empty()) {
      vars[env::kAgentSocket] = env::AgentSocketPath(socket_base, local, p.processes_per_pod);
    }
    ProcessGroup::Child child;
    child.label = absl::StrCat("rank ", p.rank());
    child.rank = p.rank();
    child.pod = p.pod_index;
    Subprocess::Options options{command, vars};
    // The pod's CPUs (its cpuset), shared out among its processes.
    if (*bind == CpuBind::kCores) options.cpus = CpuShare(cpus, local, p.processes_per_pod);
    started = group.Start(std::move(child), options) != nullptr;
  }
  if (!started) group.KillAllAt(absl::Now());

  std::vector<const ProcessGroup::Child*> finished;
  ProcessGroup::Hooks hooks;
  hooks.on_exits = [&](std::vector<ProcessGroup::Child*>& exited) {
    for (ProcessGroup::Child* c : exited) {
      finished.push_back(c);
      if (ClassifyExit(c->Exit()) == ExitKind::kSucceeded) continue;
      ProcessGroup::Print(absl::StrCat(kName, ": ", c->label, " ",
                                       Subprocess::DescribeStatus(*c->process.status())));
      // The others are told by the job (libdist's fate sharing) and exit by themselves; any
      // still running after the window are killed.
      group.KillAllAt(absl::Now() + window);
    }
  };
  hooks.on_signal = [&](int signo) {
    // Kubernetes sends SIGTERM to the container's first process only: every process must see
    // it (each reports the preemption notice), as under torchrun.
    for (ProcessGroup::Child& c : group.children()) {
      if (c.process.running()) c.process.Signal(signo);
    }
  };
  group.Run(hooks);

  const ProcessGroup::Child* cause = RootCauseChild(finished);
  if (!started) {
    std::cerr << kName << ": could not start every process; stopped the others\n";
    return cause != nullptr ? Subprocess::ExitCodeOf(*cause->process.status()) : 1;
  }
  if (cause == nullptr) return 0;
  int code = Subprocess::ExitCodeOf(*cause->process.status());
  ProcessGroup::Print(absl::StrCat(kName, ": exiting with ", cause->label, "'s status (",
                                   Subprocess::DescribeStatus(*cause->process.status()), ")"));
  return code;
}

int Run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::Duration window = kDefaultFateSharingWindow;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (args[i] == "--install") {
      if (i + 1 >= args.size()) return Usage("--install needs a destination path");
      return Install(args[i + 1]);
    }
    if (args[i] == "--grace-period") {
      absl::StatusOr<absl::Duration> d =
          i + 1 < args.size() ? env::ParseDuration(args[i + 1])
                              : absl::InvalidArgumentError("needs a duration, e.g. 5s");
      if (!d.ok()) return Usage(absl::StrCat("--grace-period: ", d.status().message()));
      window = *d;
      ++i;
      continue;
    }
    if (args[i] == "-h" || args[i] == "--help") {
      Usage("starts COHORT_PROCESSES_PER_POD copies of PROGRAM, one per rank of this pod");
      return 0;
    }
    break;  // The program itself, without "--".
  }
  std::vector<std::string> command(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (command.empty()) return Usage("no program given");
  return Launch(command, window);
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) {
  int code = cohort::Run(argc, argv);
  std::fflush(nullptr);
  return code;
}
