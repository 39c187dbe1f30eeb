#pragma once

#include <algorithm>

#include "absl/random/random.h"
#include "absl/time/time.h"

namespace cohort {

// The `attempt`-th (1-based) of a doubling sequence of waits: initial, 2 initial, 4 initial, ...,
// never above `cap`. For retries that must be predictable (the operator's restart backoff, the
// reconcile retry); Backoff below adds jitter on top of it.
inline absl::Duration DoublingDelay(absl::Duration initial, absl::Duration cap, int attempt) {
  absl::Duration d = initial;
  for (int i = 1; i < attempt && d < cap; ++i) d *= 2;
  return std::min(d, cap);
}

// Exponential backoff with jitter: attempt k waits U(c/2, c] with c = min(cap, initial * 2^k).
// Jitter spreads 1,000 agents reconnecting at once instead of letting them retry in lock step;
// the lower half is cut off so that no retry comes right after a failure.
// Not thread-safe; one per retry loop.
class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration cap) : initial_(initial), cap_(cap) {}

  absl::Duration Next() {
    absl::Duration ceiling = DoublingDelay(initial_, cap_, ++attempt_);
    return absl::Nanoseconds(absl::Uniform<int64_t>(gen_, absl::ToInt64Nanoseconds(ceiling) / 2,
                                                    absl::ToInt64Nanoseconds(ceiling) + 1));
  }
  int attempts() const { return attempt_; }
  // Starts again from `initial` (after a success).
  void Reset() { attempt_ = 0; }

 private:
  absl::Duration initial_;
  absl::Duration cap_;
  int attempt_ = 0;
  absl::BitGen gen_;
};

}  // namespace cohort
