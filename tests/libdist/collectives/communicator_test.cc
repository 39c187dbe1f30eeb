// The communicator as one unit: creation over the store (ranks as threads over one in-memory
// job, gloo's test shape), the backend plan, Split, and the asynchronous calls on both backends
// (the host backend for real over shared memory and TCP, NCCL against the fake table).

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/backend_plan.h"
#include "libdist/src/collectives/communicator_impl.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "libdist/src/collectives/nccl_watch.h"
#include "libdist/src/collectives/progress_reporter.h"
#include "tests/coordination/client/fake_job_client.h"
#include "tests/libdist/collectives/fake_nccl.h"

namespace dist::internal {
namespace {

using cohort::coordination::testing::FakeJob;
using testing::FakeDeviceBuffer;
using testing::FakeNccl;
using ::testing::HasSubstr;

// ---- The plan: one row per branch ---------------------------------------------------------

PeerInfo Peer(std::string locality, std::string transport = "auto", std::string backend = "auto",
              std::string nccl = "no GPU") {
  PeerInfo p;
  p.locality = locality;
  p.transport = transport;
  p.shm = "seg-" + locality;
  p.tcp = "127.0.0.1:1";
  p.backend = backend;
  p.nccl = nccl;
  return p;
}

RankNames Names(int n) {
  RankNames names;
  for (int r = 0; r < n; ++r) names.processes.push_back(r);
  return names;
}

TEST(PlanBackends, OneHost_SharedMemoryBetweenEveryRank) {
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a"), Peer("a"), Peer("a")}, 1, "world", Names(3));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->host, BackendPlan::Host::kShm);
  EXPECT_FALSE(plan->nccl);
  EXPECT_EQ(plan->local, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(plan->transport, "shared memory");
}

TEST(PlanBackends, OneRank_SharedMemoryWithItselfEvenUnderTcp) {
  absl::StatusOr<BackendPlan> plan = PlanBackends({Peer("a", "tcp")}, 0, "world", Names(1));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->host, BackendPlan::Host::kSelf);
}

TEST(PlanBackends, TcpAskedFor_TcpAlsoOnOneHost) {
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a", "tcp"), Peer("a", "tcp")}, 0, "world", Names(2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->host, BackendPlan::Host::kTcp);
  EXPECT_EQ(plan->transport, "TCP");
}

TEST(PlanBackends, ShmForcedWithARemoteRank_UnavailableNamingIt) {
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a", "shm"), Peer("a", "shm"), Peer("b", "shm")}, 0, "world", Names(3));
  ASSERT_TRUE(absl::IsUnavailable(plan.status())) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("process 2 cannot share memory"));
  EXPECT_THAT(plan.status().message(), HasSubstr("use auto or tcp"));
}

TEST(PlanBackends, UniformHosts_HybridWithThisHostAndThisRail) {
  // Hosts a, b with two ranks each, interleaved: a = {0, 2}, b = {1, 3}.
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a"), Peer("b"), Peer("a"), Peer("b")}, 3, "world", Names(4));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->host, BackendPlan::Host::kHybrid);
  EXPECT_EQ(plan->local, std::vector<int>({1, 3}));
  EXPECT_EQ(plan->rail, std::vector<int>({2, 3}));  // Local index 1 on host a, then on b.
  EXPECT_EQ(plan->num_hosts, 2);
  EXPECT_THAT(plan->transport, HasSubstr("each of 2 hosts (2 ranks each)"));
}

TEST(PlanBackends, NonUniformHosts_FlatTcp) {
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a"), Peer("a"), Peer("b")}, 0, "world", Names(3));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->host, BackendPlan::Host::kTcp);
}

TEST(PlanBackends, NcclAskedForAndMissingOnOneRank_UnavailableNamingItAndWhy) {
  absl::StatusOr<BackendPlan> plan = PlanBackends(
      {Peer("a", "auto", "nccl", ""), Peer("b", "auto", "nccl", "libnccl.so.2 not found")}, 0,
      "world", Names(2));
  ASSERT_TRUE(absl::IsUnavailable(plan.status())) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("process 1 cannot run NCCL"));
  EXPECT_THAT(plan.status().message(), HasSubstr("libnccl.so.2 not found"));
}

TEST(PlanBackends, AutoWithNcclEverywhere_NcclAndTheHostBackend) {
  absl::StatusOr<BackendPlan> plan = PlanBackends(
      {Peer("a", "auto", "auto", ""), Peer("a", "auto", "auto", "")}, 0, "world", Names(2));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->nccl);
  EXPECT_EQ(plan->host, BackendPlan::Host::kShm);
}

TEST(PlanBackends, RanksAskedForDifferentBackends_InvalidArgumentNamingBoth) {
  absl::StatusOr<BackendPlan> plan =
      PlanBackends({Peer("a", "auto", "host"), Peer("a", "tcp", "host")}, 0, "grads", Names(2));
  ASSERT_TRUE(absl::IsInvalidArgument(plan.status())) << plan.status();
  EXPECT_THAT(plan.status().message(), HasSubstr("communicator 'grads'"));
  EXPECT_THAT(plan.status().message(), HasSubstr("process 1 for COHORT_COLLECTIVES=host"));
}

// ---- Communicators of N ranks, one thread each, over one FakeJob ----------------------------

JobHandle Handle(FakeJob& job, int process, int num_processes) {
  JobHandle h;
  // The FakeJob owns its clients: the handle only borrows one.
  h.client = std::shared_ptr<cohort::coordination::JobClient>(
      &job.client(process), [](cohort::coordination::JobClient*) {});
  h.process_id = process;
  h.num_processes = num_processes;
  h.initialization_timeout = absl::Seconds(30);
  h.heartbeat_timeout = absl::Seconds(2);
  return h;
}

ResolvedCommunicatorOptions Options(HostTransport transport = HostTransport::kAuto) {
  ResolvedCommunicatorOptions o;
  o.backend = Backend::kHost;
  o.host_transport = transport;
  o.timeout = absl::Seconds(60);
  o.init_timeout = absl::Seconds(30);
  return o;
}

// Builds one communicator per rank, each on its own thread, as processes would.
std::vector<std::unique_ptr<CommunicatorImpl>> BuildAll(FakeJob& job, int n,
                                                        ResolvedCommunicatorOptions options,
                                                        const std::string& id = "world#0") {
  std::vector<std::unique_ptr<CommunicatorImpl>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> processes(n);
      std::iota(processes.begin(), processes.end(), 0);
      auto c = CommunicatorImpl::Build(Handle(job, r, n), options, "world",
                                       Store(&job.client(r)).WithPrefix("collectives/" + id), id,
                                       processes);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs fn(rank) on every rank at once.
void OnEveryRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

struct OpCase {
  CollectiveKind kind;
  size_t count;       // The call's count argument.
  size_t send_elems;  // Elements in send, per rank.
  size_t recv_elems;  // Elements in recv, per rank.
};

std::vector<OpCase> Cases(int n) {
  const size_t c = 1000;
  return {{CollectiveKind::kAllReduce, c, c, c},         {CollectiveKind::kAllGather, c, c, c * n},
          {CollectiveKind::kReduceScatter, c, c * n, c}, {CollectiveKind::kBroadcast, c, c, c},
          {CollectiveKind::kAllToAll, c, c * n, c * n},  {CollectiveKind::kBarrier, 0, 0, 0}};
}

std::vector<float> RandomFloats(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

class CommunicatorTest : public ::testing::TestWithParam<HostTransport> {};

// Every op, asynchronous, all in flight at once, then waited for: the same bits as the blocking
// calls (the same backend, in the same order, on a worker thread).
TEST_P(CommunicatorTest, HostAsync_EveryOpAllInFlight_BitwiseEqualToBlocking) {
  constexpr int kRanks = 3;
  FakeJob job(kRanks);
  auto comms = BuildAll(job, kRanks, Options(GetParam()));
  OnEveryRank(kRanks, [&](int r) {
    CommunicatorImpl& c = *comms[r];
    std::vector<std::vector<float>> blocking_out, async_out, inputs;
    for (const OpCase& op : Cases(kRanks)) {
      inputs.push_back(RandomFloats(op.send_elems, 17 * r + static_cast<int>(op.kind)));
      blocking_out.emplace_back(op.recv_elems, 0.0f);
      async_out.emplace_back(op.recv_elems, 0.0f);
    }
    int i = 0;
    for (const OpCase& op : Cases(kRanks)) {
      ASSERT_TRUE(c.Run(op.kind, inputs[i].data(), blocking_out[i].data(), op.count,
                        DataType::kFloat32, ReduceOp::kSum, 1, {})
                      .ok());
      ++i;
    }
    std::vector<Work> works;
    i = 0;
    for (const OpCase& op : Cases(kRanks)) {
      absl::StatusOr<std::shared_ptr<WorkState>> w =
          c.Submit(op.kind, inputs[i].data(), async_out[i].data(), op.count, DataType::kFloat32,
                   ReduceOp::kSum, 1, {});
      ASSERT_TRUE(w.ok()) << w.status();
      works.push_back(WorkAccess::Wrap(std::move(*w)));
      ++i;
    }
    for (Work& w : works) EXPECT_TRUE(w.Wait().ok());
    for (Work& w : works) EXPECT_TRUE(w.Test());
    for (size_t k = 0; k < works.size(); ++k) {
      EXPECT_EQ(works[k].sequence(), Cases(kRanks).size() + k + 1);
      ASSERT_EQ(blocking_out[k].size(), async_out[k].size());
      EXPECT_EQ(std::memcmp(blocking_out[k].data(), async_out[k].data(),
                            blocking_out[k].size() * sizeof(float)),
                0)
          << "op " << k << " on rank " << r;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorTest,
                         ::testing::Values(HostTransport::kShm, HostTransport::kTcp),
                         [](const auto& info) { return HostTransportName(info.param); });

TEST(Communicator, TransportChoice_DescribeNamesWhatThePlanPicked) {
  FakeJob job(2);
  auto shm = BuildAll(job, 2, Options(HostTransport::kAuto), "a#0");
  EXPECT_EQ(shm[0]->Describe(), "world: 2 ranks, host backend over shared memory");
  auto tcp = BuildAll(job, 2, Options(HostTransport::kTcp), "b#0");
  EXPECT_EQ(tcp[1]->Describe(), "world: 2 ranks, host backend over TCP");
}

TEST(Communicator, Split_ByColorOrderedByKey) {
  constexpr int kRanks = 4;
  FakeJob job(kRanks);
  auto comms = BuildAll(job, kRanks, Options());
  std::vector<std::unique_ptr<CommunicatorImpl>> children(kRanks);
  OnEveryRank(kRanks, [&](int r) {
    // Colors 0 (ranks 0, 2) and 1 (ranks 1, 3); rank 3 sits out; keys reverse the order.
    auto child = comms[r]->Split(r == 3 ? -1 : r % 2, -r);
    ASSERT_TRUE(child.ok()) << child.status();
    children[r] = std::move(*child);
  });
  EXPECT_EQ(children[3], nullptr);
  ASSERT_NE(children[0], nullptr);
  EXPECT_EQ(children[0]->processes(), std::vector<int>({2, 0}));
  EXPECT_EQ(children[0]->rank(), 1);
  EXPECT_EQ(children[1]->processes(), std::vector<int>({1}));
  EXPECT_THAT(children[2]->Describe(), HasSubstr("world.0: 2 ranks"));
  std::vector<int32_t> sums(kRanks);
  OnEveryRank(3, [&](int r) {
    int32_t v = r + 1;
    ASSERT_TRUE(children[r]
                    ->Run(CollectiveKind::kAllReduce, &v, &sums[r], 1, DataType::kInt32,
                          ReduceOp::kSum, -1, {})
                    .ok());
  });
  EXPECT_EQ(sums[0], 4);  // Processes 0 and 2: 1 + 3.
  EXPECT_EQ(sums[2], 4);
  EXPECT_EQ(sums[1], 2);
}

// Rank 1 never calls: rank 0's three calls wait in order; Abort() ends every one with Aborted at
// once, the queued ones too.
TEST(Communicator, HostAsync_AbortWithThreeInFlight_AllAbortedWithinASecond) {
  FakeJob job(2);
  auto comms = BuildAll(job, 2, Options());
  std::vector<float> a(1000), b(1000), c(1000);
  std::vector<Work> works;
  for (std::vector<float>* v : {&a, &b, &c}) {
    auto w = comms[0]->Submit(CollectiveKind::kAllReduce, v->data(), v->data(), v->size(),
                              DataType::kFloat32, ReduceOp::kSum, -1, {});
    ASSERT_TRUE(w.ok());
    works.push_back(WorkAccess::Wrap(std::move(*w)));
  }
  EXPECT_FALSE(works[0].Test());
  absl::Status timed_out = works[2].Wait(absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(timed_out)) << timed_out;
  EXPECT_THAT(timed_out.message(),
              HasSubstr("all_reduce #3 (float32 sum, 1000 elements) is still in flight"));
  const absl::Time start = absl::Now();
  comms[0]->Abort(absl::AbortedError("the job failed: process 1 was killed by signal 9"));
  for (Work& w : works) {
    absl::Status s = w.Wait();
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("process 1 was killed"));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_THAT(works[1].Wait().message(), HasSubstr("all_reduce #2"));
  // Later calls: the communicator is broken.
  float x = 0;
  EXPECT_TRUE(absl::IsFailedPrecondition(comms[0]->Run(
      CollectiveKind::kAllReduce, &x, &x, 1, DataType::kFloat32, ReduceOp::kSum, -1, {})));
}

TEST(Communicator, HostAsync_DestroyedWithWorkInFlight_ReturnsAndTheWorkIsAborted) {
  FakeJob job(2);
  auto comms = BuildAll(job, 2, Options());
  std::vector<float> a(1000);
  auto w = comms[0]->Submit(CollectiveKind::kAllReduce, a.data(), a.data(), a.size(),
                            DataType::kFloat32, ReduceOp::kSum, -1, {});
  ASSERT_TRUE(w.ok());
  Work work = WorkAccess::Wrap(std::move(*w));
  const absl::Time start = absl::Now();
  comms[0].reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  absl::Status s = work.Wait();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("destroyed with this call in flight"));
}

// ---- NCCL, asynchronous, against the fake table ---------------------------------------------

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ResolvedCommunicatorOptions o;
    o.backend = Backend::kNccl;
    o.timeout = absl::Seconds(60);
    o.init_timeout = absl::Seconds(10);
    o.nccl_api = &api_;
    o.cuda_device = 0;
    comm_ = std::move(BuildAll(job_, 1, o)[0]);
    ASSERT_NE(comm_, nullptr);
    ASSERT_EQ(comm_->backend(), Backend::kNccl);
    fake_.stream_done = false;
  }

  Work AllReduce(const CallOptions& options = {}) {
    auto w = comm_->Submit(CollectiveKind::kAllReduce, FakeDeviceBuffer(), FakeDeviceBuffer(), 256,
                           DataType::kFloat32, ReduceOp::kSum, -1, options);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? WorkAccess::Wrap(std::move(*w)) : Work();
  }

  // The communicator's progress as the service last heard it.
  cohort::coordination::CollectiveProgress Reported() {
    ProgressReporter::Get().PushNow();
    auto table = Store(&job_.client(0)).JobProgress();
    EXPECT_TRUE(table.ok());
    for (const auto& t : *table) {
      for (const auto& c : t.communicators) {
        if (c.communicator == "world#0") return c;
      }
    }
    ADD_FAILURE() << "no progress reported";
    return {};
  }

  FakeJob job_{1};
  FakeNccl fake_;
  NcclApi api_ = fake_.Api();
  std::unique_ptr<CommunicatorImpl> comm_;
};

TEST_F(NcclCommunicatorTest, Async_ReturnsWhileTheStreamIsBusy_TestFlipsWhenTheEventFires) {
  Work w = AllReduce();
  EXPECT_EQ(fake_.collectives, 1);
  EXPECT_FALSE(w.Test());
  EXPECT_FALSE(w.Test());
  fake_.CompleteEvent(1);
  EXPECT_TRUE(w.Test());
  EXPECT_TRUE(w.Wait().ok());
}

// The watch thread looks at calls in flight in the relaxed capture mode: another thread may be
// capturing a graph in global mode, where an event query would fail and break that capture.
TEST_F(NcclCommunicatorTest, Async_TheWatchThreadQueriesInRelaxedCaptureMode) {
  Work w = AllReduce();
  ASSERT_TRUE(fake_.relaxed_capture_mode.WaitForNotificationWithTimeout(absl::Seconds(10)));
  fake_.CompleteEvent(1);
  EXPECT_TRUE(w.Wait().ok());
}

TEST_F(NcclCommunicatorTest, Async_TwoInFlight_ProgressReportsTheOlderThenTheNewer) {
  Work first = AllReduce();
  Work second = AllReduce();
  auto p = Reported();
  EXPECT_EQ(p.last_started, 2u);
  EXPECT_EQ(p.last_completed, 0u);
  EXPECT_THAT(p.pending, HasSubstr("all_reduce #1"));
  fake_.CompleteEvent(1);
  ASSERT_TRUE(first.Wait().ok());
  p = Reported();
  EXPECT_EQ(p.last_completed, 1u);
  EXPECT_THAT(p.pending, HasSubstr("all_reduce #2"));
  fake_.CompleteEvent(2);
  ASSERT_TRUE(second.Wait().ok());
  p = Reported();
  EXPECT_EQ(p.last_completed, 2u);
  EXPECT_EQ(p.pending, "");
}

// No one waits: the watch thread sees NCCL's error, the communicator is aborted once, and the
// next look at the Work gives the error; later calls are refused.
TEST_F(NcclCommunicatorTest, Async_ErrorWithNoWaiter_WorkFailsInternalOneAbortLaterRefused) {
  fake_.raise_on_query = 2;
  Work w = AllReduce();
  // The watch thread, not a waiter, finds it and aborts the communicator.
  ASSERT_TRUE(fake_.aborted.WaitForNotificationWithTimeout(absl::Seconds(10)));
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("remote process exited"));
  EXPECT_EQ(fake_.aborts, 1);
  auto later = comm_->Submit(CollectiveKind::kAllReduce, FakeDeviceBuffer(), FakeDeviceBuffer(), 1,
                             DataType::kFloat32, ReduceOp::kSum, -1, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(later.status())) << later.status();
  // With the first failure's own words, not "failed before".
  EXPECT_THAT(later.status().message(), HasSubstr("remote process exited"));
  comm_.reset();
  EXPECT_EQ(fake_.aborts, 1);
}

TEST_F(NcclCommunicatorTest, Async_DeadlineWithNoWaiter_FailsTheJobWithTheWatchdogsSentence) {
  CallOptions options;
  options.timeout = absl::Milliseconds(50);
  Work w = AllReduce(options);
  ASSERT_TRUE(job_.service().WaitUntilJobEnded(absl::Now() + absl::Seconds(20)));
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("all_reduce #1 (float32 sum, 256 elements) timed out"));
  EXPECT_EQ(fake_.aborts, 1);
}

TEST_F(NcclCommunicatorTest, Async_AbortWithThreeInFlight_AllAbortedWithinASecond) {
  std::vector<Work> works = {AllReduce(), AllReduce(), AllReduce()};
  const absl::Time start = absl::Now();
  comm_->Abort(absl::AbortedError("the job failed: process 3 was killed by signal 9"));
  for (Work& w : works) {
    absl::Status s = w.Wait();
    EXPECT_TRUE(absl::IsAborted(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("process 3 was killed"));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(fake_.aborts, 1);
}

TEST_F(NcclCommunicatorTest, Async_CapturingStream_RefusedBeforeAnythingIsEnqueued) {
  fake_.capturing = true;
  auto w = comm_->Submit(CollectiveKind::kAllReduce, FakeDeviceBuffer(), FakeDeviceBuffer(), 8,
                         DataType::kFloat32, ReduceOp::kSum, -1, {});
  EXPECT_TRUE(absl::IsFailedPrecondition(w.status())) << w.status();
  EXPECT_THAT(w.status().message(), HasSubstr("capturing Cohort's collectives is not supported"));
  EXPECT_EQ(fake_.collectives, 0);
  EXPECT_EQ(fake_.event_queries, 0);
  fake_.capturing = false;
  fake_.stream_done = true;
  EXPECT_TRUE(AllReduce().Wait().ok());  // Still usable.
}

TEST_F(NcclCommunicatorTest, StreamWait_OrdersTheStreamOnTheDeviceWithoutWaiting) {
  Work w = AllReduce();
  EXPECT_TRUE(w.StreamWait(reinterpret_cast<void*>(0x7)).ok());
  EXPECT_EQ(fake_.stream_waits, 1);
  EXPECT_FALSE(w.Test());
  fake_.CompleteEvent(1);
  ASSERT_TRUE(w.Wait().ok());
  EXPECT_TRUE(w.StreamWait(reinterpret_cast<void*>(0x7)).ok());  // Done: nothing to wait for.
  EXPECT_EQ(fake_.stream_waits, 1);
}

TEST_F(NcclCommunicatorTest, DestroyedWithWorkInFlight_ReturnsAndTheWorkIsAborted) {
  Work w = AllReduce();
  const absl::Time start = absl::Now();
  comm_.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  absl::Status s = w.Wait();
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_FALSE(w.StreamWait(reinterpret_cast<void*>(0x7)).ok());
}

TEST_F(NcclCommunicatorTest, Blocking_IsAsyncThenWait) {
  fake_.stream_done = true;
  EXPECT_TRUE(comm_
                  ->Run(CollectiveKind::kAllGather, FakeDeviceBuffer(), FakeDeviceBuffer(), 4,
                        DataType::kFloat32, ReduceOp::kSum, -1, {})
                  .ok());
  EXPECT_EQ(fake_.last_call, "all_gather");
  EXPECT_EQ(fake_.event_queries.load() > 0, true);
}

}  // namespace
}  // namespace dist::internal
