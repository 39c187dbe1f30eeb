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
// common/exit_codes.h's RootCause), and with 0 only when every process exited 0. Local process l
// runs on the l-th share of the pod's CPUs (COHORT_CPU_BIND=none turns that off;
// launcher/cpu_binding.h). docs/operator.md has the rules. One attempt's processes:
// launcher/pod_processes.h.
//
// Restarting in place (spec.restartStrategy: InPlace; COHORT_LAUNCH_SOCKET set), a failed
// attempt does not end cohort-launch: once every process of it is gone it empties COHORT_SHM_DIR
// of the attempt's files, tells the pod's sidecar how the attempt ended
// (common/process/launch_protocol.h) and waits for the sidecar to say which attempt to run next,
// whose processes get COHORT_RESTART_ATTEMPT = that attempt. It still exits 0 when every process
// exited 0, and with the attempt's status after SIGTERM or SIGINT or when the sidecar is gone. The
// loop and its states: launcher/attempt_loop.h.
//
// With --one-process it runs the command once with the pod's environment as it is (torchrun, which
// starts the pod's processes itself, under spec.restartStrategy: InPlace).
//
//   cohort-launch --install /run/cohort/bin/cohort-launch
//
// copies cohort-launch itself there (the init container cohort-launch-install does this from the
// sidecar image, so the trainer's image needs nothing from Cohort), and beside it, in python/,
// the Python start-up hook of hang detection (launcher/python_probe; docs/faults.md, "Hung
// ranks"): each process then gets that directory first on its PYTHONPATH and a probe directory
// of its own (COHORT_PROBE_DIR), unless COHORT_PYTHON_PROBE=0 or COHORT_HANG_TIMEOUT=0
// (launcher/python_probe_install.h). It is linked statically.
//
// This file holds the flags and the choice between one attempt and the loop.

#include <signal.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/process/process_group.h"
#include "launcher/attempt_loop.h"
#include "launcher/cpu_binding.h"
#include "launcher/pod_processes.h"
#include "launcher/python_probe_install.h"

namespace cohort {
namespace {

constexpr int kExitUsage = 2;

int Usage(const std::string& problem) {
  std::cerr << kLauncherName << ": " << problem << "\n"
            << "usage: " << kLauncherName
            << " [--grace-period 5s] [--one-process] -- PROGRAM [ARGS...]\n"
            << "       " << kLauncherName << " --install DESTINATION\n";
  return kExitUsage;
}

// This pod's place in the job. A spare pod (COHORT_SPARE, no COHORT_PROCESS_ID) has none yet:
// pod index -1 until its sidecar orders an attempt as some pod.
absl::StatusOr<env::ProcessPlacement> PodPlacement(bool spare) {
  if (!spare) return env::PodPlacementFromEnvironment();
  env::ProcessPlacement p;
  p.pod_index = -1;
  absl::StatusOr<std::optional<int64_t>> world = env::GetInt(env::kNumProcesses);
  absl::StatusOr<std::optional<int64_t>> per_pod = env::GetInt(env::kProcessesPerPod);
  if (!world.ok()) return world.status();
  if (!per_pod.ok()) return per_pod.status();
  p.processes_per_pod = static_cast<int>(per_pod->value_or(1));
  if (!world->has_value() || p.processes_per_pod < 1 || **world % p.processes_per_pod != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a spare pod needs COHORT_NUM_PROCESSES, a multiple of "
                     "COHORT_PROCESSES_PER_POD; the operator sets both"));
  }
  p.num_pods = static_cast<int>(**world / p.processes_per_pod);
  if (!env::Get(env::kLaunchSocket)) {
    return absl::InvalidArgumentError(
        "a spare pod runs only what its sidecar orders, on the launch socket: COHORT_LAUNCH_SOCKET "
        "is not set");
  }
  return p;
}

int Launch(const PodCommand& run) {
  const bool spare = env::IsSparePod();
  absl::StatusOr<env::ProcessPlacement> pod = PodPlacement(spare);
  absl::StatusOr<CpuBind> bind = CpuBindFromEnvironment(kDefaultCpuBind);
  absl::StatusOr<std::optional<int64_t>> first = env::GetInt(env::kRestartAttempt);
  for (const absl::Status& s : {pod.status(), bind.status(), first.status()}) {
    if (s.ok()) continue;
    std::cerr << kLauncherName << ": " << s.message() << "\n";
    return kExitUsage;
  }
  ProcessGroup group(kLauncherName);
  const int launch_fd = ConnectLaunchSocket(absl::Seconds(10));
  if (launch_fd < 0 && spare) return 1;  // It said why.
  if (launch_fd < 0) {
    AttemptOutcome out = RunPodProcesses(group, run, *pod, std::nullopt);
    if (!out.cause.empty())
      ProcessGroup::Print(absl::StrCat(kLauncherName, ": exiting with ", out.cause));
    return out.exit_code;
  }
  AttemptLoop::Options options;
  options.run = run;
  options.spare = spare;
  options.shm_dir = env::Get(env::kShmDir).value_or("");
  options.reconnect = [] { return ConnectLaunchSocket(absl::Seconds(10)); };
  AttemptLoop loop(group, *pod, static_cast<int32_t>(first->value_or(0)), launch_fd,
                   std::move(options));
  return loop.Run();
}

int Run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  PodCommand run;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (args[i] == "--install") {
      if (i + 1 >= args.size()) return Usage("--install needs a destination path");
      if (absl::Status s = InstallLauncher(args[i + 1]); !s.ok()) {
        std::cerr << kLauncherName << ": " << s.message() << "\n";
        return 1;
      }
      std::cout << kLauncherName << ": installed " << args[i + 1] << "\n";
      return 0;
    }
    if (args[i] == "--grace-period") {
      absl::StatusOr<absl::Duration> d =
          i + 1 < args.size() ? env::ParseDuration(args[i + 1])
                              : absl::InvalidArgumentError("needs a duration, e.g. 5s");
      if (!d.ok()) return Usage(absl::StrCat("--grace-period: ", d.status().message()));
      run.window = *d;
      ++i;
      continue;
    }
    if (args[i] == "--one-process") {
      run.one_process = true;
      continue;
    }
    if (args[i] == "-h" || args[i] == "--help") {
      Usage("starts COHORT_PROCESSES_PER_POD copies of PROGRAM, one per rank of this pod");
      return 0;
    }
    break;  // The program itself, without "--".
  }
  run.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (run.command.empty()) return Usage("no program given");
  return Launch(run);
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) {
  int code = cohort::Run(argc, argv);
  std::fflush(nullptr);
  return code;
}
