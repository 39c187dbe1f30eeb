#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "libdist/src/collectives/collective_op.h"

namespace dist::internal {

// The last N collectives of this process, every communicator together, for the post-mortem of a
// hang or a failure: what each rank was doing, and since when. Dumped to stderr when a
// collective fails and on SIGUSR2 (like PyTorch's flight recorder, without a tool to read it:
// the dump is text). N: COHORT_FLIGHT_RECORDER_ENTRIES, default 2000; 0 turns it off.
// Thread-safe.
class FlightRecorder {
 public:
  struct Entry {
    uint64_t id = 0;  // Order of recording, across communicators.
    std::string comm;
    OpSignature sig;
    absl::Time started;
    absl::Time ended;    // InfinitePast while pending, and for calls that succeeded.
    std::string result;  // "pending", "ok" or the error.
  };

  // The process's recorder; the first call also installs the SIGUSR2 dump.
  static FlightRecorder& Get();
  explicit FlightRecorder(size_t capacity) : capacity_(capacity) {}

  uint64_t Start(const std::string& comm, const OpSignature& sig, absl::Time started);
  // A call that succeeded (its end time is not taken: a clock read per call is not free).
  void End(uint64_t id);
  void End(uint64_t id, std::string error, absl::Time ended);
  // Oldest first.
  std::vector<Entry> Last(size_t n) const;
  // One line per entry, oldest first, headed by a line naming the process.
  std::string Dump(size_t n = SIZE_MAX) const;

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::vector<Entry> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace dist::internal
