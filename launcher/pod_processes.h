#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/env.h"
#include "common/process/process_group.h"

// One attempt of a pod's processes under cohort-launch (cohort_launch.cc says what cohort-launch
// is): each local process started with its rank's environment, its output prefixed with its
// rank, the preemption notice forwarded to all, and fate sharing (after one failed, the others
// get a window to exit by themselves, then are killed).
namespace cohort {

inline constexpr char kLauncherName[] = "cohort-launch";

// What an attempt runs.
struct PodCommand {
  std::vector<std::string> command;
  // How long the other processes get to exit by themselves after one failed.
  absl::Duration window = absl::Seconds(5);
  // --one-process: the command runs once with the pod's environment as it is (torchrun starts
  // the pod's processes itself).
  bool one_process = false;
};

// How one attempt's processes ended.
struct AttemptOutcome {
  int exit_code = 0;
  bool signalled = false;  // SIGTERM or SIGINT reached cohort-launch: the pod is going.
  std::string reason = "Error";
  std::string message;  // The root-cause process's last output lines.
  std::string cause;    // "rank 3's status (killed by signal 9 (Killed))"; empty on success.
  // A later attempt was ordered while this one ran: it was stopped.
  std::optional<int32_t> superseded;
};

// Starts the pod's processes (`pod`: its place in the job) as restart attempt `attempt` (nullopt:
// not restarting in place) and watches them until every one is gone. `ordered` (restarting in
// place) says whether the sidecar ordered a later attempt meanwhile: the job went on without
// these processes (the operator waited for them to end, and they did not), so they are killed at
// once.
AttemptOutcome RunPodProcesses(ProcessGroup& group, const PodCommand& run,
                               const env::ProcessPlacement& pod, std::optional<int32_t> attempt,
                               const std::function<std::optional<int32_t>()>& ordered = nullptr);

}  // namespace cohort
