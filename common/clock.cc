#include "common/clock.h"

#include <algorithm>
#include <iterator>

namespace cohort {
namespace {
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool WaitFor(const absl::Notification& stop, absl::Duration timeout) override {
    return stop.WaitForNotificationWithTimeout(timeout);
  }
};

// How often a parked FakeClock waiter looks at its `stop` notification, which cannot wake it.
constexpr absl::Duration kStopPollInterval = absl::Milliseconds(5);
}  // namespace

Clock* Clock::Real() {
  static RealClock* clock = new RealClock();
  return clock;
}

bool FakeClock::WaitFor(const absl::Notification& stop, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (stop.HasBeenNotified()) return true;
  absl::Time deadline = now_ + timeout;
  if ((auto_advance_ && std::this_thread::get_id() == auto_advance_thread_) || deadline <= now_) {
    now_ = std::max(now_, deadline);
    return false;
  }
  const int64_t id = ++next_waiter_;
  waiters_[id] = deadline;
  auto woken = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !waiters_.contains(id); };
  while (!mu_.AwaitWithTimeout(absl::Condition(&woken), kStopPollInterval)) {
    if (stop.HasBeenNotified()) {
      waiters_.erase(id);
      return true;
    }
  }
  return stop.HasBeenNotified();
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    it = it->second <= now_ ? waiters_.erase(it) : std::next(it);
  }
}

void FakeClock::AwaitWaiters(int n) const {
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(waiters_.size()) >= n;
  };
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&enough));
}

}  // namespace cohort
