#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/env.h"
#include "common/process/launch_protocol.h"
#include "common/process/process_group.h"
#include "launcher/pod_processes.h"

// Restarting in place (spec.restartStrategy: InPlace; COHORT_LAUNCH_SOCKET set): cohort-launch's
// loop over the attempts its pod's sidecar orders on the launch socket
// (common/process/launch_protocol.h), as torchelastic's agent loops over its workers' state. The
// rest of the flow: the operator decides (operator/reconciler/in_place_policy.h), rank 0's attempt
// hub passes the order to every pod's sidecar (coordination/attempts/attempt_hub.h), the sidecar
// passes it here (sidecar/launch_channel.h).
//
//   kAwaitingOrder  --order n-->                          kRunning (attempt n)
//                   --order n, idle-->                     kAwaitingOrder (for a later attempt)
//                   --SIGTERM/SIGINT, or the socket closed-->  kDone
//   kRunning        --a later order meanwhile-->          kRunning (its processes stopped)
//                   --all exited 0, or SIGTERM/SIGINT-->  kDone
//                   --a process failed, all gone-->       kReportingEnd
//   kReportingEnd   --the end told to the sidecar-->      kAwaitingOrder (for a later attempt)
//                   --the sidecar gone-->                 kDone
//
// Every attempt waits for its order, the first too: a pod's sidecar gives it at once, unless the
// pod replaces one alone while the others still end the last attempt. A spare pod holds no slot:
// it waits for an order that gives it a pod index, and its sidecar then re-executes itself as that
// pod, so the socket closes once and is connected again. An elastic job's attempt may place the
// pod elsewhere among fewer pods (its processes' ranks and world size follow the order, not the
// pod's environment), or run without it (idle: nothing runs until a later order).
namespace cohort {

// The pod's sidecar's launch socket (COHORT_LAUNCH_SOCKET), connected; -1 when none is set or it
// cannot be reached within `patience` (said on stderr).
int ConnectLaunchSocket(absl::Duration patience);

class AttemptLoop {
 public:
  enum class State { kAwaitingOrder, kRunning, kReportingEnd, kDone };

  struct Options {
    PodCommand run;
    bool spare = false;  // A spare pod: no slot until an order gives it one.
    // COHORT_SHM_DIR: emptied of what an attempt wrote there before the next one starts.
    std::string shm_dir;
    // Connects the launch socket again once it closed (a spare's sidecar re-executed itself);
    // -1 when it cannot.
    std::function<int()> reconnect;
  };

  // `fd`: the connected launch socket, owned from now on. `pod`: the pod's place in the job
  // (pod index -1 for a spare). `first_attempt`: COHORT_RESTART_ATTEMPT of the pod.
  AttemptLoop(ProcessGroup& group, env::ProcessPlacement pod, int32_t first_attempt, int fd,
              Options options);
  ~AttemptLoop();
  AttemptLoop(const AttemptLoop&) = delete;
  AttemptLoop& operator=(const AttemptLoop&) = delete;

  // Runs attempts as they are ordered until the pod is done (kDone); cohort-launch's exit code:
  // 0 when an attempt's every process exited 0; the attempt's status after SIGTERM or SIGINT, or
  // once the sidecar is gone; 1 (128 + SIGTERM after a signal) when no attempt was ever ordered.
  int Run();

  // The latest order among `lines` for an attempt of at least `least` (its shape is ordered()
  // until the next). One that gives this pod another pod index moves its ranks there, for that
  // attempt and the ones after it; an index outside the job is ignored, saying so; an order
  // without an index is ignored while the pod holds no slot.
  std::optional<int32_t> NextOrder(const std::vector<std::string>& lines, int32_t least);
  // Waits for an order of at least `least`; nullopt after a signal or once the sidecar is gone.
  // `waiting` is printed once when none came within 200 ms.
  std::optional<int32_t> AwaitOrder(int32_t least, const std::string& waiting);
  // The socket closed under a spare: its sidecar is back as the slot's within moments (or the pod
  // is gone: false).
  bool Reconnect();
  // Runs the current attempt's processes until they are gone, or stopped by a later order.
  AttemptOutcome RunOne();
  // Tells the sidecar how the current attempt ended (its message ends with a summary line);
  // false when the sidecar is gone.
  bool ReportEnd(const AttemptOutcome& out);

  // An attempt's shape, as its order gave it: where an elastic job's attempt places the pod
  // (nullopt: as the pod's environment says), or that it runs without the pod.
  struct Shape {
    std::optional<launch::Placement> placement;
    bool idle = false;
  };

  State state() const { return state_; }
  // The pod's slot in the job (its pod index; -1 for a spare holding none).
  const env::ProcessPlacement& pod() const { return pod_; }
  // Where the current attempt's processes run: the slot, or the order's placement.
  env::ProcessPlacement placement() const;
  const Shape& shape() const { return shape_; }
  const Shape& ordered() const { return ordered_; }
  int32_t attempt() const { return attempt_; }
  bool signalled() const { return signalled_; }

 private:
  // A later attempt ordered while the current one runs (read without waiting).
  std::optional<int32_t> OrderedMeanwhile();
  // Empties shm_dir of what the attempt left.
  void CleanShm();

  ProcessGroup& group_;
  env::ProcessPlacement pod_;
  int32_t attempt_;
  Shape shape_;    // attempt_'s.
  Shape ordered_;  // Of the order NextOrder returned last.
  int fd_;
  LineReader from_sidecar_;
  const Options options_;
  const std::set<std::string> shm_before_;  // What shm_dir held before the first attempt.
  State state_ = State::kAwaitingOrder;
  bool ran_ = false;  // An attempt ran (the next order is for a later one).
  bool signalled_ = false;
  bool sidecar_gone_ = false;
};

}  // namespace cohort
