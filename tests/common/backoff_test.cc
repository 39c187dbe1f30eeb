#include "common/backoff.h"

#include <climits>

#include "gtest/gtest.h"

namespace cohort {
namespace {

// The kubelet's crash-loop back-off and the ReplicaSet controller's (10 s doubling to 5 min), and
// the operator's restart backoff, are this sequence.
TEST(DoublingDelay, DoublesFromTheFirstAttemptUpToTheCap) {
  const absl::Duration initial = absl::Seconds(10), cap = absl::Minutes(5);
  const absl::Duration want[] = {absl::Seconds(10), absl::Seconds(20),  absl::Seconds(40),
                                 absl::Seconds(80), absl::Seconds(160), absl::Minutes(5),
                                 absl::Minutes(5)};
  for (int attempt = 1; attempt <= 7; ++attempt) {
    EXPECT_EQ(DoublingDelay(initial, cap, attempt), want[attempt - 1]) << "attempt " << attempt;
  }
  // An attempt of 0 or less waits the initial delay; a huge one stops at the cap without
  // overflowing.
  EXPECT_EQ(DoublingDelay(initial, cap, 0), initial);
  EXPECT_EQ(DoublingDelay(initial, cap, INT_MAX), cap);
  // An initial delay above the cap is the cap.
  EXPECT_EQ(DoublingDelay(absl::Minutes(10), cap, 1), cap);
}

TEST(Backoff, EachWaitInTheUpperHalfOfItsDoublingStep_ResetStartsOver) {
  Backoff backoff(absl::Milliseconds(100), absl::Seconds(1));
  for (int attempt = 1; attempt <= 8; ++attempt) {
    const absl::Duration ceiling =
        DoublingDelay(absl::Milliseconds(100), absl::Seconds(1), attempt);
    const absl::Duration wait = backoff.Next();
    EXPECT_GE(wait, ceiling / 2) << "attempt " << attempt;
    EXPECT_LE(wait, ceiling) << "attempt " << attempt;
  }
  EXPECT_EQ(backoff.attempts(), 8);
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_LE(backoff.Next(), absl::Milliseconds(100));
}

}  // namespace
}  // namespace cohort
