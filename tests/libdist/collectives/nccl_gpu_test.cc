// The NCCL backend on a real GPU with the real libnccl.so.2 (ctest label `gpu`): a 1-rank
// communicator (this machine's NCCL refuses two ranks on one GPU), every op, the error and abort
// paths. Without a GPU each test is skipped, saying why (LoadNccl's reason).

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/communicator_impl.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "tests/coordination/client/fake_job_client.h"

namespace dist::internal {
namespace {

using cohort::coordination::testing::FakeJob;

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<const NcclApi*> api = LoadNccl();
    if (!api.ok()) GTEST_SKIP() << api.status().message();
    api_ = *api;
    RankNames names;
    names.processes = {0};
    auto b = NcclBackend::Create(api_, 0, names, 0, Store(&job_.client(0)),
                                 absl::Now() + absl::Seconds(60));
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
  }

  void* Device(const std::vector<float>& host) {
    void* p = nullptr;
    EXPECT_EQ(api_->Malloc(&p, host.size() * 4 + 4), kCudaSuccess);
    EXPECT_EQ(api_->Memcpy(p, host.data(), host.size() * 4, 4), kCudaSuccess);
    buffers_.push_back(p);
    return p;
  }
  std::vector<float> Host(const void* device, size_t n) {
    std::vector<float> out(n);
    EXPECT_EQ(api_->Memcpy(out.data(), device, n * 4, 4), kCudaSuccess);
    return out;
  }
  void TearDown() override {
    backend_.reset();
    for (void* p : buffers_) api_->Free(p);
  }
  CollectiveCall Call(CollectiveKind kind, const void* send, void* recv, size_t count) {
    CollectiveCall c;
    c.sig = OpSignature{++seq_,
                        kind,
                        DataType::kFloat32,
                        ReduceOp::kSum,
                        kind == CollectiveKind::kBroadcast ? 0 : -1,
                        count};
    c.send = send;
    c.recv = recv;
    c.deadline = absl::Now() + absl::Seconds(30);
    return c;
  }

  FakeJob job_{1};
  const NcclApi* api_ = nullptr;
  std::unique_ptr<NcclBackend> backend_;
  std::vector<void*> buffers_;
  uint64_t seq_ = 0;
};

TEST_F(NcclGpuTest, OneRank_EveryOpCopiesItsInput) {
  const size_t n = (1 << 20) + 3;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000);
  void* in = Device(x);
  void* out = Device(std::vector<float>(n, -1));
  EXPECT_TRUE(NcclBackend::IsDevicePointer(api_, in));
  EXPECT_FALSE(NcclBackend::IsDevicePointer(api_, x.data()));
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
        CollectiveKind::kBroadcast, CollectiveKind::kAllToAll}) {
    ASSERT_TRUE(backend_->Run(Call(kind, in, out, n)).ok()) << CollectiveKindName(kind);
    EXPECT_EQ(Host(out, n), x) << CollectiveKindName(kind);
  }
  EXPECT_TRUE(backend_->Run(Call(CollectiveKind::kBarrier, nullptr, nullptr, 0)).ok());
}

TEST_F(NcclGpuTest, InvalidArgument_CommunicatorStaysUsable) {
  void* buf = Device(std::vector<float>(16, 1));
  CollectiveCall bad = Call(CollectiveKind::kBroadcast, buf, buf, 16);
  bad.sig.root = 5;  // Not a rank.
  EXPECT_TRUE(absl::IsInvalidArgument(backend_->Run(bad)));
  EXPECT_TRUE(backend_->Run(Call(CollectiveKind::kAllReduce, buf, buf, 16)).ok());
}

TEST_F(NcclGpuTest, Abort_LaterCallsReturnAbortedAndDestructionIsBounded) {
  void* buf = Device(std::vector<float>(16, 1));
  backend_->Abort();
  EXPECT_TRUE(absl::IsAborted(backend_->Run(Call(CollectiveKind::kAllReduce, buf, buf, 16))));
  const absl::Time start = absl::Now();
  backend_.reset();
  EXPECT_LT(absl::Now() - start, NcclBackend::kAbortBound + absl::Seconds(1));
}

// The asynchronous calls through a 1-rank communicator on the real device.
class NcclGpuAsyncTest : public NcclGpuTest {
 protected:
  void SetUp() override {
    NcclGpuTest::SetUp();
    if (IsSkipped()) return;
    backend_.reset();
    ResolvedCommunicatorOptions o;
    o.backend = Backend::kNccl;
    o.init_timeout = absl::Seconds(60);
    o.cuda_device = 0;
    JobHandle h;
    h.client = std::shared_ptr<cohort::coordination::JobClient>(
        &job_.client(0), [](cohort::coordination::JobClient*) {});
    h.heartbeat_timeout = absl::Seconds(10);
    auto c = CommunicatorImpl::Build(h, o, "world", Store(&job_.client(0)).WithPrefix("c"),
                                     "world#0", {0});
    ASSERT_TRUE(c.ok()) << c.status();
    comm_ = std::move(*c);
  }
  void TearDown() override {
    comm_.reset();
    NcclGpuTest::TearDown();
  }
  std::unique_ptr<CommunicatorImpl> comm_;
};

TEST_F(NcclGpuAsyncTest, AllReduceAsyncOf1GiB_ReturnsBeforeTheDeviceFinishes) {
  const size_t n = size_t{1} << 28;  // 1 GiB of float32.
  void* buf = nullptr;
  ASSERT_EQ(api_->Malloc(&buf, n * 4), kCudaSuccess);
  buffers_.push_back(buf);
  const absl::Time start = absl::Now();
  auto w = comm_->Submit(CollectiveKind::kAllReduce, buf, buf, n, DataType::kFloat32,
                         ReduceOp::kSum, -1, {});
  const absl::Duration enqueue = absl::Now() - start;
  ASSERT_TRUE(w.ok()) << w.status();
  Work work = WorkAccess::Wrap(std::move(*w));
  const bool done_at_once = work.Test();
  ASSERT_TRUE(work.Wait().ok());
  const absl::Duration total = absl::Now() - start;
  EXPECT_FALSE(done_at_once) << "enqueue " << enqueue << ", total " << total;
  EXPECT_LT(enqueue, total);
  EXPECT_TRUE(work.Test());
}

// An all-reduce on stream A, StreamWait(B), then an all-reduce on B reading A's result: B's
// result is right only if B waited for A on the device.
TEST_F(NcclGpuAsyncTest, StreamWait_OrdersLaterWorkOnAnotherStream) {
  const size_t n = size_t{1} << 24;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 977);
  void* a = Device(x);
  void* b = Device(std::vector<float>(n, -1));
  CudaStream sa = nullptr, sb = nullptr;
  ASSERT_EQ(api_->StreamCreate(&sa), kCudaSuccess);
  ASSERT_EQ(api_->StreamCreate(&sb), kCudaSuccess);
  CallOptions on_a, on_b;
  on_a.cuda_stream = sa;
  on_b.cuda_stream = sb;
  auto first = comm_->Submit(CollectiveKind::kAllGather, a, b, n, DataType::kFloat32,
                             ReduceOp::kSum, -1, on_a);
  ASSERT_TRUE(first.ok());
  Work w1 = WorkAccess::Wrap(std::move(*first));
  ASSERT_TRUE(w1.StreamWait(sb).ok());
  void* c = Device(std::vector<float>(n, -2));
  auto second = comm_->Submit(CollectiveKind::kAllReduce, b, c, n, DataType::kFloat32,
                              ReduceOp::kSum, -1, on_b);
  ASSERT_TRUE(second.ok());
  Work w2 = WorkAccess::Wrap(std::move(*second));
  ASSERT_TRUE(w2.Wait().ok());
  EXPECT_EQ(Host(c, n), x);
  ASSERT_TRUE(w1.Wait().ok());
  api_->StreamDestroy(sa);
  api_->StreamDestroy(sb);
}

}  // namespace
}  // namespace dist::internal
