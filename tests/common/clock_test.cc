#include "common/clock.h"

#include <future>
#include <thread>

#include "gtest/gtest.h"

namespace cohort {
namespace {

TEST(FakeClock, WaitFor_ReturnsWhenAdvancedToTheDeadline) {
  FakeClock clock;
  absl::Notification stop;
  std::future<bool> waited =
      std::async(std::launch::async, [&] { return clock.WaitFor(stop, absl::Seconds(10)); });
  clock.AwaitWaiters(1);
  clock.Advance(absl::Seconds(9));
  EXPECT_EQ(clock.waiters(), 1) << "9 of 10 s: still waiting";
  clock.Advance(absl::Seconds(1));
  EXPECT_FALSE(waited.get()) << "timed out, not stopped";
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClock, WaitFor_StopEndsTheWaitWithoutMovingTime) {
  FakeClock clock;
  absl::Time start = clock.Now();
  absl::Notification stop;
  std::future<bool> waited =
      std::async(std::launch::async, [&] { return clock.WaitFor(stop, absl::Hours(1)); });
  clock.AwaitWaiters(1);
  stop.Notify();
  EXPECT_TRUE(waited.get());
  EXPECT_EQ(clock.Now(), start);
  EXPECT_TRUE(clock.WaitFor(stop, absl::Hours(1))) << "already notified: returns at once";
}

TEST(FakeClock, AutoAdvance_WaitMovesTheClockAtOnce) {
  FakeClock clock;
  clock.set_auto_advance(true);
  absl::Time start = clock.Now();
  absl::Notification stop;
  EXPECT_FALSE(clock.WaitFor(stop, absl::Seconds(3)));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(3));
}

// Another thread's loop (a heartbeat) must not move the clock while the test measures its own
// thread's waits: it parks as without auto-advance.
TEST(FakeClock, AutoAdvance_OnlyForTheThreadThatTurnedItOn) {
  FakeClock clock;
  clock.set_auto_advance(true);
  const absl::Time start = clock.Now();
  absl::Notification stop;
  std::thread other([&] { clock.WaitFor(stop, absl::Seconds(5)); });
  clock.AwaitWaiters(1);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_FALSE(clock.WaitFor(stop, absl::Seconds(1)));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(1));
  clock.Advance(absl::Seconds(4));
  other.join();
  EXPECT_EQ(clock.Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace cohort
