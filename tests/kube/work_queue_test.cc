#include "kube/work_queue.h"

#include <thread>

#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

TEST(WorkQueue, DeduplicatesWaitingKeys) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("ns/a");
  q.Add("ns/b");
  q.Add("ns/a");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(q.TryGet(), "ns/a");
  EXPECT_EQ(q.TryGet(), "ns/b");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueue, KeyAddedWhileProcessing_QueuedOnceAfterDone) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.Add("ns/a");
  ASSERT_EQ(q.TryGet(), "ns/a");
  q.Add("ns/a");
  q.Add("ns/a");
  EXPECT_EQ(q.TryGet(), std::nullopt);  // Never handed out twice at once.
  q.Done("ns/a");
  EXPECT_EQ(q.TryGet(), "ns/a");
  q.Done("ns/a");
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueue, AddAfter_DueAtTheEarliestDelay) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("ns/a", absl::Seconds(10));
  q.AddAfter("ns/a", absl::Seconds(3));
  q.AddAfter("ns/a", absl::Seconds(30));
  EXPECT_EQ(q.TryGet(), std::nullopt);
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(q.TryGet(), "ns/a");
  q.Done("ns/a");
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(q.TryGet(), std::nullopt);  // The later delays were folded into the first.
}

TEST(WorkQueue, AddSupersedesPendingDelay) {
  FakeClock clock;
  WorkQueue q(&clock);
  q.AddAfter("ns/a", absl::Seconds(10));
  q.Add("ns/a");
  EXPECT_EQ(q.TryGet(), "ns/a");
  q.Done("ns/a");
  clock.Advance(absl::Seconds(10));
  EXPECT_EQ(q.TryGet(), std::nullopt);
}

TEST(WorkQueue, GetBlocksUntilAddOrShutDown) {
  WorkQueue q(Clock::Real());
  std::thread producer([&] { q.Add("ns/late"); });
  EXPECT_EQ(q.Get(), "ns/late");
  producer.join();
  std::thread stopper([&] { q.ShutDown(); });
  EXPECT_EQ(q.Get(), std::nullopt);
  stopper.join();
}

}  // namespace
}  // namespace cohort::kube
