#include "kube/rate_limiter.h"

#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

TEST(RateLimiter, BurstThenQps) {
  FakeClock clock;
  RateLimiter limiter(10, 3, &clock);  // 10 per second, bursts of 3.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Reserve(), absl::ZeroDuration()) << i;
  EXPECT_EQ(limiter.Reserve(), absl::Milliseconds(100));
  EXPECT_EQ(limiter.Reserve(), absl::Milliseconds(200));  // Queued behind the previous one.
  clock.Advance(absl::Milliseconds(200));
  EXPECT_EQ(limiter.Reserve(), absl::Milliseconds(100));
}

TEST(RateLimiter, RefillsUpToBurstOnly) {
  FakeClock clock;
  RateLimiter limiter(100, 2, &clock);
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(limiter.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(limiter.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(limiter.Reserve(), absl::Milliseconds(10));
}

TEST(RateLimiter, ZeroQpsDisables) {
  FakeClock clock;
  RateLimiter limiter(0, 1, &clock);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(limiter.Reserve(), absl::ZeroDuration());
}

}  // namespace
}  // namespace cohort::kube
