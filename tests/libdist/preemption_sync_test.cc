// libdist's preemption protocol over FakeJobClients of one in-memory job.

#include "libdist/src/preemption_sync.h"

#include <future>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordination/client/fake_job_client.h"

namespace dist::internal {
namespace {

using cohort::coordination::testing::FakeJob;
using ::testing::HasSubstr;

TEST(PreemptionSync, NoNotice_NeverReachesASyncPoint) {
  FakeJob job(2);
  PreemptionSync sync(&job.client(0), 0);
  for (int64_t step = 0; step < 10; ++step) EXPECT_FALSE(*sync.ReachedSyncPoint(step));
  EXPECT_FALSE(sync.notice_received());
}

// Processes at steps 5 and 7 when the notice arrives agree on step 8: one past the largest, and
// each returns true there exactly once.
TEST(PreemptionSync, Notice_EveryProcessStopsAtOnePastTheLargestStep) {
  FakeJob job(2);
  PreemptionSync p0(&job.client(0), 0), p1(&job.client(1), 1);
  ASSERT_FALSE(*p0.ReachedSyncPoint(5));
  ASSERT_FALSE(*p1.ReachedSyncPoint(7));
  p0.OnNotice();
  p1.OnNotice();
  EXPECT_TRUE(p0.notice_received());
  std::vector<int64_t> true_at;
  for (int64_t step = 6; step <= 12; ++step) {
    if (*p0.ReachedSyncPoint(step)) true_at.push_back(step);
  }
  EXPECT_EQ(true_at, std::vector<int64_t>({8}));
  EXPECT_FALSE(*p1.ReachedSyncPoint(7)) << "a step before the sync point";
  EXPECT_TRUE(*p1.ReachedSyncPoint(8));
  EXPECT_FALSE(*p1.ReachedSyncPoint(9));
}

// The protocol waits in a barrier for the other processes; meanwhile the program's poll of
// PreemptionNoticeReceived() answers at once, and its next step waits for the sync point.
TEST(PreemptionSync, WhileTheProtocolWaits_NoticeAnswersAtOnceAndTheStepWaits) {
  FakeJob job(2);
  job.client(0).HoldBarriers();
  PreemptionSync p0(&job.client(0), 0), p1(&job.client(1), 1);
  ASSERT_FALSE(*p0.ReachedSyncPoint(3));
  p0.OnNotice();
  job.client(0).AwaitHeldBarriers(1);  // p0's protocol now waits in its barrier.
  EXPECT_TRUE(p0.notice_received());
  std::future<absl::StatusOr<bool>> next_step =
      std::async(std::launch::async, [&] { return p0.ReachedSyncPoint(4); });
  p1.OnNotice();
  job.client(0).ReleaseBarriers();
  EXPECT_TRUE(*next_step.get()) << "3 and -1 were the steps: the sync point is 4";
}

TEST(PreemptionSync, PeerFailsDuringTheProtocol_EveryLaterStepReportsTheError) {
  FakeJob job(2);
  PreemptionSync p0(&job.client(0), 0);
  p0.OnNotice();  // Process 1 never joins the barrier: it fails instead.
  ASSERT_TRUE(
      job.service()
          .ReportError(1, 1001, cohort::coordination::FailureCause::kReportedError, "out of memory")
          .ok());
  absl::StatusOr<bool> reached = p0.ReachedSyncPoint(0);
  EXPECT_EQ(reached.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(reached.status().message(), HasSubstr("preemption sync protocol failed"));
  EXPECT_THAT(reached.status().message(), HasSubstr("out of memory"));
}

}  // namespace
}  // namespace dist::internal
