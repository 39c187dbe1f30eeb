#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordination/client/job_client.h"

namespace dist::internal {

// Agrees on one checkpoint step after a preemption notice, the same on every process:
//
//   notice (any process) --> every process freezes its step (the last one passed to
//   ReachedSyncPoint) and, on its own "dist-preempt" thread, writes it to
//   cohort/preemption/step/<rank>, waits in barrier cohort/preemption/sync and reads every
//   step; sync point = max + 1.
//
// ReachedSyncPoint(step) records the step and returns true exactly once, at the sync point; it
// waits while the protocol runs, so no process moves past its frozen step + 1 before the sync
// point is known. Because the sync point exceeds every frozen step, every process reaches it.
// notice_received() never waits. Thread-safe.
class PreemptionSync {
 public:
  PreemptionSync(cohort::coordination::JobClient* client, int process_id);
  // Waits for the protocol thread (bounded by kProtocolTimeout and the calls' own timeouts).
  ~PreemptionSync();
  PreemptionSync(const PreemptionSync&) = delete;
  PreemptionSync& operator=(const PreemptionSync&) = delete;

  // A notice reached this process (job event). Starts the protocol once.
  void OnNotice();
  bool notice_received() const { return notice_.load(); }
  // Errors: the protocol's (a barrier timeout naming the missing ranks, Aborted when the job
  // failed meanwhile).
  absl::StatusOr<bool> ReachedSyncPoint(int64_t step);

  static constexpr absl::Duration kProtocolTimeout = absl::Minutes(3);

 private:
  void RunProtocol(int64_t frozen_step);

  cohort::coordination::JobClient* const client_;
  const int process_id_;
  std::atomic<bool> notice_{false};
  mutable absl::Mutex mu_;
  int64_t current_step_ ABSL_GUARDED_BY(mu_) = -1;
  bool protocol_running_ ABSL_GUARDED_BY(mu_) = false;
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
