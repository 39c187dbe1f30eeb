#include "common/clock.h"

#include <future>

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

}  // namespace
}  // namespace cohort
