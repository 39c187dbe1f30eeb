// The NCCL backend's own logic (rendezvous, nonblocking init against Cohort's deadline, polling,
// error and abort paths, clean shutdown) against a fake NCCL function table, on a CPU.

#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"

namespace dist::internal {
namespace {

using ::testing::HasSubstr;

// What the fake NCCL does; reset by each test.
struct FakeNccl {
  bool init_completes = true;
  NcclResult init_error = kNcclSuccess;  // Reported by the async error once init "finishes".
  std::atomic<NcclResult> async_error{kNcclSuccess};
  std::atomic<bool> stream_done{true};
  std::atomic<int> aborts{0}, finalizes{0}, destroys{0};
  NcclUniqueId issued{};
  int last_type = -1, last_op = -1, last_root = -1;
  size_t last_count = 0;
  std::string last_call;
  int sends = 0, recvs = 0;
};
FakeNccl* fake = nullptr;
int fake_comm_storage;

NcclComm FakeComm() { return reinterpret_cast<NcclComm>(&fake_comm_storage); }

NcclApi FakeApi() {
  NcclApi api{};
  api.version = 22809;
  api.GetVersion = [](int* v) { *v = 22809; return kNcclSuccess; };
  api.GetUniqueId = [](NcclUniqueId* id) {
    std::memset(id->internal, 0x5a, sizeof(id->internal));
    fake->issued = *id;
    return kNcclSuccess;
  };
  api.CommInitRankNonBlocking = [](NcclComm* comm, int, NcclUniqueId, int) {
    *comm = FakeComm();
    if (!fake->init_completes) fake->async_error = kNcclInProgress;
    else fake->async_error = fake->init_error;
    return kNcclInProgress;
  };
  api.CommGetAsyncError = [](NcclComm, NcclResult* e) {
    *e = fake->async_error.load();
    return kNcclSuccess;
  };
  api.CommFinalize = [](NcclComm) { ++fake->finalizes; return kNcclSuccess; };
  api.CommDestroy = [](NcclComm) { ++fake->destroys; return kNcclSuccess; };
  api.CommAbort = [](NcclComm) { ++fake->aborts; return kNcclSuccess; };
  api.GetErrorString = [](NcclResult r) {
    return r == kNcclRemoteError ? "remote process exited or there was a network error"
                                 : "some NCCL error";
  };
  api.GetLastError = [](NcclComm) { return "peer 1 vanished"; };
  api.AllReduce = [](const void*, void*, size_t count, int type, int op, NcclComm, CudaStream) {
    fake->last_call = "all_reduce";
    fake->last_count = count;
    fake->last_type = type;
    fake->last_op = op;
    return kNcclSuccess;
  };
  api.AllGather = [](const void*, void*, size_t count, int type, NcclComm, CudaStream) {
    fake->last_call = "all_gather";
    fake->last_count = count;
    fake->last_type = type;
    return kNcclSuccess;
  };
  api.ReduceScatter = [](const void*, void*, size_t count, int type, int op, NcclComm,
                         CudaStream) {
    fake->last_call = "reduce_scatter";
    fake->last_count = count;
    fake->last_type = type;
    fake->last_op = op;
    return kNcclSuccess;
  };
  api.Broadcast = [](const void*, void*, size_t count, int type, int root, NcclComm, CudaStream) {
    fake->last_call = "broadcast";
    fake->last_count = count;
    fake->last_type = type;
    fake->last_root = root;
    return kNcclSuccess;
  };
  api.Send = [](const void*, size_t, int, int, NcclComm, CudaStream) { ++fake->sends; return kNcclSuccess; };
  api.Recv = [](void*, size_t, int, int, NcclComm, CudaStream) { ++fake->recvs; return kNcclSuccess; };
  api.GroupStart = [] { return kNcclSuccess; };
  api.GroupEnd = [] { return kNcclSuccess; };
  api.GetDeviceCount = [](int* n) { *n = 1; return kCudaSuccess; };
  api.GetDevice = [](int* d) { *d = 0; return kCudaSuccess; };
  api.SetDevice = [](int) { return kCudaSuccess; };
  api.StreamCreate = [](CudaStream* s) { *s = reinterpret_cast<CudaStream>(0x1); return kCudaSuccess; };
  api.StreamDestroy = [](CudaStream) { return kCudaSuccess; };
  api.StreamQuery = [](CudaStream) { return fake->stream_done.load() ? kCudaSuccess : kCudaErrorNotReady; };
  api.PointerGetAttributes = [](CudaPointerAttributes* a, const void*) { a->type = 2; return kCudaSuccess; };
  api.CudaGetErrorString = [](CudaError) { return "cuda error"; };
  api.Malloc = [](void** p, size_t) { *p = &fake_comm_storage; return kCudaSuccess; };
  api.Free = [](void*) { return kCudaSuccess; };
  api.Memcpy = [](void*, const void*, size_t, int) { return kCudaSuccess; };
  return api;
}

RankNames Names(int p) {
  RankNames n;
  for (int r = 0; r < p; ++r) n.processes.push_back(r);
  return n;
}

class NcclBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { fake = &state_; }
  void TearDown() override { fake = nullptr; }

  // A rendezvous where the id is kept here and `missing` ranks never mark themselves joined.
  NcclBackend::Rendezvous Rdv(std::vector<int> missing = {}) {
    NcclBackend::Rendezvous r;
    r.publish_id = [this](const NcclUniqueId& id) { published_ = id; ++publishes_; return absl::OkStatus(); };
    r.fetch_id = [this](absl::Time) -> absl::StatusOr<NcclUniqueId> { ++fetches_; return published_; };
    r.mark_joined = [this] { ++joins_; };
    r.missing_ranks = [missing] { return missing; };
    return r;
  }

  absl::StatusOr<std::unique_ptr<NcclBackend>> Make(int rank, int size, absl::Duration timeout,
                                                    std::vector<int> missing = {}) {
    return NcclBackend::Create(&api_, rank, Names(size), -1, Rdv(std::move(missing)),
                               absl::Now() + timeout);
  }

  CollectiveCall Call(CollectiveKind kind, size_t count, DataType type = DataType::kFloat32,
                      ReduceOp op = ReduceOp::kSum, absl::Duration timeout = absl::Seconds(5)) {
    CollectiveCall c;
    c.sig = OpSignature{1, kind, type, op, kind == CollectiveKind::kBroadcast ? 1 : -1, count};
    c.send = c.recv = &fake_comm_storage;
    c.deadline = absl::Now() + timeout;
    return c;
  }

  FakeNccl state_;
  NcclApi api_ = FakeApi();
  NcclUniqueId published_{};
  int publishes_ = 0, fetches_ = 0, joins_ = 0;
};

TEST_F(NcclBackendTest, Create_RankZeroPublishesTheIdOthersFetchIt) {
  auto zero = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(publishes_, 1);
  EXPECT_EQ(std::memcmp(published_.internal, state_.issued.internal, 128), 0);
  auto one = Make(1, 2, absl::Seconds(5));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(fetches_, 1);
  EXPECT_EQ(joins_, 2);
}

TEST_F(NcclBackendTest, Run_MapsOpsAndTypesToNccl) {
  auto b = Make(0, 2, absl::Seconds(5));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kAllReduce, 10, DataType::kBFloat16, ReduceOp::kAvg)).ok());
  EXPECT_EQ(state_.last_call, "all_reduce");
  EXPECT_EQ(state_.last_type, 9);  // ncclBfloat16
  EXPECT_EQ(state_.last_op, 4);    // ncclAvg
  ASSERT_TRUE((*b)->Run(Call(CollectiveKind::kReduceScatter, 3, DataType::kInt64, ReduceOp::kMin)).ok());
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
  auto b = Make(0, 4, absl::Milliseconds(200), {2, 3});
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
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    state_.async_error = kNcclRemoteError;
  });
  absl::Status s = (*b)->Run(Call(CollectiveKind::kAllReduce, 100));
  t.join();
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
  api_.GetDeviceCount = [](int* n) { *n = 4; return kCudaSuccess; };
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 0), 0);
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 3), 3);
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 5), 1);
  api_.GetDeviceCount = [](int* n) { *n = 0; return kCudaSuccess; };
  EXPECT_EQ(NcclBackend::DefaultDevice(&api_, 5), 0);
}

TEST(NcclApiTest, LibraryAbsent_UnavailableSaysWhatToDo) {
  absl::StatusOr<NcclApi> api = LoadNcclFrom("libnccl-does-not-exist.so.2", "libcudart.so");
  ASSERT_TRUE(absl::IsUnavailable(api.status())) << api.status();
  EXPECT_THAT(api.status().message(), HasSubstr("cannot load libnccl-does-not-exist.so.2"));
  EXPECT_THAT(api.status().message(), HasSubstr("COHORT_COLLECTIVES=host"));
}

}  // namespace
}  // namespace dist::internal
