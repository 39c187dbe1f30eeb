// The NCCL backend's own logic (rendezvous through the store, nonblocking init against Cohort's
// deadline, events, polling, error and abort paths, capture, clean shutdown) against a fake NCCL
// function table, on a CPU.

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "tests/coordination/client/fake_job_client.h"
#include "tests/libdist/collectives/fake_nccl.h"

namespace dist::internal {
namespace {

using cohort::coordination::testing::FakeJob;
using testing::FakeDeviceBuffer;
using testing::FakeNccl;

using ::testing::HasSubstr;

RankNames Names(int p) {
  RankNames n;
  for (int r = 0; r < p; ++r) n.processes.push_back(r);
  return n;
}

class NcclBackendTest : public ::testing::Test {
 protected:
  // Rank `rank` of `size`; `joined` ranks (other than this one) already marked themselves
  // joined in the store.
  absl::StatusOr<std::unique_ptr<NcclBackend>> Make(int rank, int size, absl::Duration timeout,
                                                    std::vector<int> joined = {}) {
    Store store(&job_.client(rank));
    for (int r : joined) store.Set(absl::StrCat("nccl/joined/", r), "1").IgnoreError();
    return NcclBackend::Create(&api_, rank, Names(size), -1, store, absl::Now() + timeout);
  }

  CollectiveCall Call(CollectiveKind kind, size_t count, DataType type = DataType::kFloat32,
                      ReduceOp op = ReduceOp::kSum, absl::Duration timeout = absl::Seconds(5)) {
    CollectiveCall c;
    c.sig = OpSignature{1, kind, type, op, kind == CollectiveKind::kBroadcast ? 1 : -1, count};
    c.send = c.recv = FakeDeviceBuffer();
    c.deadline = absl::Now() + timeout;
    return c;
  }

  FakeJob job_{4};
  FakeNccl state_;
  NcclApi api_ = state_.Api();
};

TEST_F(NcclBackendTest, Create_RankZeroPublishesTheIdThroughTheStoreOthersFetchIt) {
  auto zero = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(zero.ok()) << zero.status();
  Store store(&job_.client(1));
  absl::StatusOr<std::string> id = store.TryGet("nccl/id");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, std::string(state_.issued.internal, sizeof(state_.issued.internal)));
  auto one = Make(1, 2, absl::Seconds(5));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(store.TryGet("nccl/joined/0").ok());
  EXPECT_TRUE(store.TryGet("nccl/joined/1").ok());
}

TEST_F(NcclBackendTest, Run_MapsOpsAndTypesToNccl) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(
      (*b)->Run(Call(CollectiveKind::kAllReduce, 10, DataType::kBFloat16, ReduceOp::kAvg)).ok());
  EXPECT_EQ(state_.last_call, "all_reduce");
  EXPECT_EQ(state_.last_type, 9);  // ncclBfloat16
  EXPECT_EQ(state_.last_op, 4);    // ncclAvg
  ASSERT_TRUE(
      (*b)->Run(Call(CollectiveKind::kReduceScatter, 3, DataType::kInt64, ReduceOp::kMin)).ok());
  EXPECT_EQ(state_.last_type, 4);  // ncclInt64
  EXPECT_EQ(state_.last_op, 3);    // ncclMin
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kBroadcast, 7, DataType::kFloat16)).ok());
  EXPECT_EQ(state_.last_type, 6);
  EXPECT_EQ(state_.last_root, 1);
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kAllToAll, 5)).ok());
  EXPECT_EQ(state_.sends, 2);  // Grouped send/recv with every rank.
  EXPECT_EQ(state_.recvs, 2);
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kBarrier, 0)).ok());
  EXPECT_EQ(state_.last_call, "all_reduce");
  EXPECT_EQ(state_.last_count, 1u);
}

TEST_F(NcclBackendTest, InitNeverCompletes_DeadlineNamesMissingRanksAndAborts) {
  state_.init_completes = false;
  const absl::Time start = absl::Now();
  auto b = Make(0, 4, absl::Milliseconds(200), /*joined=*/{1});
  ASSERT_TRUE(absl::IsDeadlineExceeded(b.status())) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("processes 2 and 3 never joined"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(state_.aborts, 1);
}

TEST_F(NcclBackendTest, InitFailsAsynchronously_ErrorNamesNcclsReason) {
  state_.init_error = kNcclRemoteError;
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(absl::IsInternal(b.status())) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("remote process exited"));
  EXPECT_THAT(b.status().message(), HasSubstr("peer 1 vanished"));
  EXPECT_EQ(state_.aborts, 1);
}

TEST_F(NcclBackendTest, AsyncErrorDuringCall_ReturnsItAbortsAndRefusesLaterCalls) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.stream_done = false;
  state_.raise_on_query = 3;  // While the call is in flight: two looks found it running.
  absl::Status s = (*b)->Run(Call(CollectiveKind::kAllReduce, 100));
  EXPECT_GE(state_.event_queries.load(), 3);
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("remote process exited"));
  EXPECT_EQ(state_.aborts, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition((*b)->Run(Call(CollectiveKind::kAllReduce, 1))));
  b->reset();
  EXPECT_EQ(state_.aborts, 1);  // Not twice.
  EXPECT_EQ(state_.finalizes, 0);
}

TEST_F(NcclBackendTest, CallThatNeverCompletes_DeadlineExceededAndAborted) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.stream_done = false;
  absl::Status s = (*b)->Run(Call(CollectiveKind::kAllGather, 100, DataType::kFloat32,
                                  ReduceOp::kSum, absl::Milliseconds(100)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("all_gather #1"));
  EXPECT_EQ(state_.aborts, 1);
}

TEST_F(NcclBackendTest, AbortFromAnotherThread_PendingCallReturnsAbortedAtOnce) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.stream_done = false;
  absl::Notification returned;
  absl::Status s;
  std::thread t([&] {
    s = (*b)->Run(Call(CollectiveKind::kAllReduce, 100, DataType::kFloat32, ReduceOp::kSum,
                       absl::Seconds(60)));
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  (*b)->Abort();
  EXPECT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(1)));
  t.join();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_EQ(state_.aborts, 1);
}

TEST_F(NcclBackendTest, HealthyDestruction_FinalizesAndDestroysWithoutAbort) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  b->reset();
  EXPECT_EQ(state_.finalizes, 1);
  EXPECT_EQ(state_.destroys, 1);
  EXPECT_EQ(state_.aborts, 0);
}

TEST_F(NcclBackendTest, DefaultDevice_LocalIndexModuloTheVisibleDevices) {
  api_.GetDeviceCount = [](int* n) {
    *n = 4;
    return kCudaSuccess;
  };
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 0), 0);
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 3), 3);
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 5), 1);
  api_.GetDeviceCount = [](int* n) {
    *n = 0;
    return kCudaSuccess;
  };
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 5), 0);
}

TEST_F(NcclBackendTest, Enqueue_ReturnsWhileTheDeviceRunsQueryFlipsWhenItFinishes) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.stream_done = false;
  absl::StatusOr<CudaEvent> e1 = (*b)->Enqueue(Call(CollectiveKind::kAllReduce, 8));
  absl::StatusOr<CudaEvent> e2 = (*b)->Enqueue(Call(CollectiveKind::kAllGather, 8));
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_NE(*e1, *e2);
  EXPECT_EQ(state_.collectives, 2);
  EXPECT_FALSE(*(*b)->Query(*e1));
  state_.CompleteEvent(1);
  EXPECT_TRUE(*(*b)->Query(*e1));
  EXPECT_FALSE(*(*b)->Query(*e2));
  EXPECT_TRUE((*b)->StreamWait(reinterpret_cast<CudaStream>(0x2), *e2).ok());
  EXPECT_EQ(state_.stream_waits, 1);
  (*b)->ReleaseEvent(*e1);
  // A released event is used again before a new one is made.
  absl::StatusOr<CudaEvent> e3 = (*b)->Enqueue(Call(CollectiveKind::kAllReduce, 8));
  EXPECT_EQ(*e3, *e1);
}

// A nonblocking communicator may return ncclInProgress from the collective itself: the event
// must be recorded only once NCCL finished launching, or it fires before the kernels.
TEST_F(NcclBackendTest, LaunchInProgress_EventRecordedOnlyAfterNcclLeavesInProgress) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.launch_in_progress = true;
  absl::StatusOr<CudaEvent> event;
  std::thread caller([&] { event = (*b)->Enqueue(Call(CollectiveKind::kAllReduce, 8)); });
  ASSERT_TRUE(state_.launched.WaitForNotificationWithTimeout(absl::Seconds(10)));
  state_.async_error = kNcclSuccess;  // NCCL finished launching.
  caller.join();
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_FALSE(state_.event_recorded_while_launching.load());
}

TEST_F(NcclBackendTest, CapturingStream_FailedPreconditionAndNothingEnqueued) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  state_.capturing = true;
  absl::Status s = (*b)->Run(Call(CollectiveKind::kAllReduce, 8));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("not supported yet"));
  EXPECT_EQ(state_.collectives, 0);
  EXPECT_EQ(state_.event_queries, 0);
  EXPECT_EQ(state_.stream_queries, 0);
  state_.capturing = false;
  EXPECT_TRUE((*b)->Run(Call(CollectiveKind::kAllReduce, 8)).ok());  // Still usable.
}

TEST_F(NcclBackendTest, Destruction_DestroysEveryEventItMade) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kAllReduce, 8)).ok());
  state_.stream_done = false;
  ASSERT_TRUE((*b)->Enqueue(Call(CollectiveKind::kAllReduce, 8)).ok());
  ASSERT_TRUE((*b)->Enqueue(Call(CollectiveKind::kAllReduce, 8)).ok());
  b->reset();
  absl::MutexLock lock(&state_.mu);
  EXPECT_EQ(state_.events_created, 2);
  EXPECT_EQ(state_.events_destroyed, 2);
}

TEST(NcclApiTest, LibraryAbsent_UnavailableSaysWhatToDo) {
  absl::StatusOr<NcclApi> api = LoadNcclFrom("libnccl-does-not-exist.so.2", "libcudart.so");
  ASSERT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(), HasSubstr("cannot load libnccl-does-not-exist.so.2"));
  EXPECT_THAT(api.status().message(), HasSubstr("COHORT_COLLECTIVES=host"));
}

}  // namespace
}  // namespace dist::internal
