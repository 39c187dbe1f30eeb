#pragma once

#include <cstdint>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sidecar/agent/control_plane.h"

namespace dist::internal {

// Agrees on one checkpoint step after a preemption notice, the same on every process:
//
//   notice (any process) --> every process, on its own "dist-preempt" thread and holding the
//   step lock (so its step cannot move on): writes its current step to
//   cohort/preemption/step/<rank>, waits in barrier cohort/preemption/sync, reads every step;
//   sync point = max + 1.
//
// ReachedSyncPoint(step) records the step and returns true exactly once, at the sync point.
// Because every process's step is frozen while the protocol runs and the sync point exceeds
// all of them, every process reaches it. Thread-safe.
class PreemptionSync {
 public:
  PreemptionSync(cohort::agent::ControlPlane* control, int process_id);
  ~PreemptionSync();
  PreemptionSync(const PreemptionSync&) = delete;
  PreemptionSync& operator=(const PreemptionSync&) = delete;

  // A notice reached this process (job event). Starts the protocol once.
  void OnNotice();
  bool notice_received() const;
  absl::StatusOr<bool> ReachedSyncPoint(int64_t step);

  static constexpr absl::Duration kProtocolTimeout = absl::Minutes(3);

 private:
  void RunProtocol();

  cohort::agent::ControlPlane* const control_;
  const int process_id_;
  mutable absl::Mutex mu_;
  int64_t current_step_ ABSL_GUARDED_BY(mu_) = -1;
  bool notice_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int64_t> sync_point_ ABSL_GUARDED_BY(mu_);
  bool reached_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status protocol_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Installs a SIGTERM handler (async-signal-safe: it only writes a byte to a pipe) and a thread
// that turns each signal into `on_signal()`. Restores the previous handler on destruction.
class SigtermWatcher {
 public:
  explicit SigtermWatcher(std::function<void()> on_signal);
  ~SigtermWatcher();
  SigtermWatcher(const SigtermWatcher&) = delete;
  SigtermWatcher& operator=(const SigtermWatcher&) = delete;

 private:
  std::function<void()> on_signal_;
  std::thread thread_;
};

}  // namespace dist::internal
