#pragma once

// The first half of the collective watchdog: every communicator numbers its calls, and one
// background thread reports each communicator's progress (last call entered and completed, the
// oldest one in flight and for how long) to the agent, which carries it on its heartbeats, so the
// coordination service always holds the cross-rank picture that timeout_diagnosis.h reads.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordination/core/types.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/current_job.h"

namespace dist::internal {

// What a call must agree on across ranks (not its sequence number), as one number.
uint64_t SignatureHash(const OpSignature& sig);

// Reports the progress of this process's communicators every kInterval (and at once on
// PushNow()). One thread, running while any communicator exists. Thread-safe.
class ProgressReporter {
 public:
  static constexpr absl::Duration kInterval = absl::Milliseconds(500);
  // At most this many communicators ride on a heartbeat (those with a call in flight first).
  static constexpr size_t kMaxReported = 8;
  using Snapshot = std::function<cohort::coordination::CollectiveProgress()>;

  static ProgressReporter& Get();
  uint64_t Add(JobHandle job, Snapshot snapshot);
  void Remove(uint64_t id);
  // Reports now, and returns once the report was handed to the agent (bounded).
  void PushNow();

 private:
  void Loop(uint64_t generation);
  std::vector<cohort::coordination::CollectiveProgress> Collect();

  absl::Mutex mu_;
  std::vector<std::pair<uint64_t, Snapshot>> sources_ ABSL_GUARDED_BY(mu_);
  std::optional<JobHandle> job_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Bumped to stop the running thread (and when one starts): a thread runs while it matches.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool kick_ ABSL_GUARDED_BY(mu_) = false;  // Report now (a new communicator).
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dist::internal
