#pragma once

#include <cstdint>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cohort {

// Source of time for every timeout decision, and of the waits between retries, injected so that
// timeout logic is tested without sleeping. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Waits until `stop` is notified (returns true) or `timeout` has passed on this clock (false).
  virtual bool WaitFor(const absl::Notification& stop, absl::Duration timeout) = 0;

  // The process-wide real clock.
  static Clock* Real();
};

// A clock that moves only when told to; for unit tests. A WaitFor() returns once Advance() has
// moved the clock to its deadline (or its `stop` is notified), so a test drives a thread's
// timed waits by advancing: AwaitWaiters(n) first makes sure the thread is parked in one.
// With auto-advance on, a WaitFor() on the thread that turned it on instead moves the clock to
// its deadline at once, for code that waits on the test's own thread; other threads' waits
// (an object's background loop) still park until advanced, so that they cannot move the clock
// while the test measures what its own thread waited.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  bool WaitFor(const absl::Notification& stop, absl::Duration timeout) override;

  void Advance(absl::Duration d);
  // For waits on the calling thread only.
  void set_auto_advance(bool on) {
    absl::MutexLock lock(&mu_);
    auto_advance_ = on;
    auto_advance_thread_ = std::this_thread::get_id();
  }
  // Blocks (real time) until at least `n` threads are parked in WaitFor.
  void AwaitWaiters(int n) const;
  int waiters() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(waiters_.size());
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  bool auto_advance_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id auto_advance_thread_ ABSL_GUARDED_BY(mu_);
  // Parked waits by id, with their deadlines. Advance() removes the ones it wakes, so a test that
  // advances and then awaits a waiter sees the thread's next wait, not the one just ended.
  std::map<int64_t, absl::Time> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort
