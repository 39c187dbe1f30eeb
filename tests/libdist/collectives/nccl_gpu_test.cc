// The NCCL backend on a real GPU with the real libnccl.so.2 (ctest label `gpu`): a 1-rank
// communicator (this machine's NCCL refuses two ranks on one GPU), every op, the error and abort
// paths. Without a GPU each test is skipped, saying why (LoadNccl's reason).

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/collectives/nccl_backend.h"

namespace dist::internal {
namespace {

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<const NcclApi*> api = LoadNccl();
    if (!api.ok()) GTEST_SKIP() << api.status().message();
    api_ = *api;
    NcclBackend::Rendezvous rdv;
    rdv.publish_id = [](const NcclUniqueId&) { return absl::OkStatus(); };
    rdv.fetch_id = [](absl::Time) -> absl::StatusOr<NcclUniqueId> {
      return absl::InternalError("a 1-rank communicator never fetches");
    };
    rdv.mark_joined = [] {};
    rdv.missing_ranks = [] { return std::vector<int>(); };
    RankNames names;
    names.processes = {0};
    auto b = NcclBackend::Create(api_, 0, names, 0, rdv, absl::Now() + absl::Seconds(60));
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
    c.sig = OpSignature{++seq_, kind, DataType::kFloat32, ReduceOp::kSum,
                        kind == CollectiveKind::kBroadcast ? 0 : -1, count};
    c.send = send;
    c.recv = recv;
    c.deadline = absl::Now() + absl::Seconds(30);
    return c;
  }

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
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                              CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast,
                              CollectiveKind::kAllToAll}) {
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

}  // namespace
}  // namespace dist::internal
