#pragma once

#include <algorithm>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace cohort::kube {

// The client-side limit on API requests (--kube-api-qps, --kube-api-burst): a token bucket of
// `burst` tokens refilled at `qps` per second, like client-go's. A qps of 0 or less disables it.
// Thread-safe.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst, Clock* clock)
      : qps_(qps),
        burst_(std::max(burst, 1)),
        clock_(clock),
        tokens_(std::max(burst, 1)),
        last_(clock->Now()) {}

  // Takes a token and returns how long the caller must wait before sending (zero when one was
  // available). Callers that reserve while the bucket is empty queue up behind each other.
  absl::Duration Reserve() {
    if (qps_ <= 0) return absl::ZeroDuration();
    absl::MutexLock lock(&mu_);
    absl::Time now = clock_->Now();
    tokens_ = std::min<double>(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
    tokens_ -= 1;
    if (tokens_ >= 0) return absl::ZeroDuration();
    return absl::Seconds(-tokens_ / qps_);
  }

  // Reserve() and sleep for it.
  void Wait() {
    absl::Duration d = Reserve();
    if (d > absl::ZeroDuration()) absl::SleepFor(d);
  }

 private:
  const double qps_;
  const int burst_;
  Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::kube
