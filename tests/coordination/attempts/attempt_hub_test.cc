// Rank 0's attempt hub and its callers (a pod's sidecar, the operator) over real gRPC on a
// loopback port.

#include "coordination/attempts/attempt_hub.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "coordination/attempts/attempt_client.h"
#include "coordination/attempts/attempt_layout_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

constexpr char kToken[] = "job-token";
constexpr absl::Duration kWait = absl::Seconds(10);

// What a stream delivered, waited on without sleeping.
template <typename Msg>
class Received {
 public:
  void Add(const Msg& m) {
    absl::MutexLock lock(&mu_);
    all_.push_back(m);
    cv_.SignalAll();
  }
  // The first message delivered that satisfies `pred` (within kWait).
  std::optional<Msg> WaitFor(std::function<bool(const Msg&)> pred) {
    const absl::Time deadline = absl::Now() + kWait;
    absl::MutexLock lock(&mu_);
    while (true) {
      for (const Msg& m : all_) {
        if (pred(m)) return m;
      }
      if (cv_.WaitWithDeadline(&mu_, deadline)) return std::nullopt;
    }
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Msg> all_ ABSL_GUARDED_BY(mu_);
};

class AttemptHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AttemptHubServer>> s =
        AttemptHubServer::Start("127.0.0.1:0", 2, kToken);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    address_ = absl::StrCat("127.0.0.1:", server_->port());
  }
  std::unique_ptr<AttemptHubServer> server_;
  std::string address_;
};

TEST_F(AttemptHubTest, FollowersHearEveryAttemptAndTheObserverEveryEnd) {
  Received<attemptspb::AttemptOrder> pod1;
  AttemptFollower follower(address_, kToken, 1,
                           [&](const attemptspb::AttemptOrder& o) { pod1.Add(o); });
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); }, nullptr);

  // At once: the pods' first attempt, and the observer sees the follower.
  ASSERT_TRUE(pod1.WaitFor([](const auto& o) { return o.attempt() == 2; }));
  ASSERT_TRUE(
      op.WaitFor([](const auto& s) { return s.attempt() == 2 && s.pods_following() == 1; }));

  attemptspb::AttemptEnd end;
  end.set_pod_index(1);
  end.set_attempt(2);
  end.set_exit_code(137);
  end.set_reason("OOMKilled");
  ASSERT_TRUE(follower.ReportEnd(end).ok());
  std::optional<attemptspb::AttemptState> ended =
      op.WaitFor([](const auto& s) { return s.ends_size() == 1; });
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->ends(0).exit_code(), 137);
  EXPECT_EQ(ended->ends(0).reason(), "OOMKilled");

  ASSERT_TRUE(observer.Start(3).ok());
  EXPECT_TRUE(pod1.WaitFor([](const auto& o) { return o.attempt() == 3; }));
  std::optional<attemptspb::AttemptState> next =
      op.WaitFor([](const auto& s) { return s.attempt() == 3; });
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->ends_size(), 0) << "the ends of attempt 2 are not attempt 3's";
  EXPECT_GT(next->started_unix_ms(), 0);

  // A late end of attempt 2 is dropped.
  ASSERT_TRUE(follower.ReportEnd(end).ok());
  EXPECT_EQ(server_->hub().State().ends_size(), 0);
}

TEST_F(AttemptHubTest, OnlyTheNextAttemptStarts_ARepeatedOrderIsKept) {
  std::vector<int32_t> before;
  server_->hub().set_before_start(
      [&](const attemptspb::AttemptOrder& o) { before.push_back(o.attempt()); });
  std::vector<int32_t> local;
  server_->hub().FollowLocally(
      [&](const attemptspb::AttemptOrder& o) { local.push_back(o.attempt()); });
  EXPECT_TRUE(server_->hub().Start(3).ok());
  EXPECT_TRUE(server_->hub().Start(3).ok());  // Repeated: nothing new.
  absl::Status skip = server_->hub().Start(5);
  EXPECT_EQ(skip.code(), absl::StatusCode::kFailedPrecondition) << skip;
  EXPECT_NE(skip.message().find("the next one is 4"), std::string::npos) << skip;
  EXPECT_EQ(server_->hub().Start(2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(before, std::vector<int32_t>({3}));  // The attempt's service before anyone hears.
  EXPECT_EQ(local, std::vector<int32_t>({2, 3}));
}

// An elastic job's resize (common/attempt_layout.h): the attempt's layout reaches the service's
// hook before anyone hears, every follower (rank 0's in process, the others over gRPC) with the
// order, the operator in the state; a layout that cannot be run is refused, starting nothing.
TEST_F(AttemptHubTest, AnAttemptsLayout_HeardByEveryFollowerAndTheOperator_ABadOneRefused) {
  std::optional<AttemptLayout> before;
  server_->hub().set_before_start(
      [&](const attemptspb::AttemptOrder& o) { before = LayoutFromProto(o.layout()); });
  std::optional<AttemptLayout> local;
  server_->hub().FollowLocally(
      [&](const attemptspb::AttemptOrder& o) { local = LayoutFromProto(o.layout()); });
  Received<attemptspb::AttemptOrder> pod3;
  AttemptFollower follower(address_, kToken, 3,
                           [&](const attemptspb::AttemptOrder& o) { pod3.Add(o); });
  ASSERT_TRUE(pod3.WaitFor([](const auto& o) { return o.attempt() == 2; }).has_value());
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); },
      [](const absl::Status&) {});

  const AttemptLayout shrunk = LayoutWithout(8, 2, {1}, 4);  // Without pods 2 and 3.
  AttemptLayout bad = shrunk;
  bad.absent = {0};
  absl::Status refused = observer.Start(3, {}, bad);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("absent pod index 0"));
  EXPECT_EQ(server_->hub().State().attempt(), 2) << "nothing started";

  ASSERT_TRUE(observer.Start(3, {}, shrunk).ok());
  EXPECT_EQ(before, shrunk);
  EXPECT_EQ(local, shrunk);
  std::optional<attemptspb::AttemptOrder> heard =
      pod3.WaitFor([](const auto& o) { return o.attempt() == 3; });
  ASSERT_TRUE(heard.has_value());
  EXPECT_EQ(LayoutFromProto(heard->layout()), shrunk) << "pod 3 learns it runs nothing";
  std::optional<attemptspb::AttemptState> state =
      op.WaitFor([](const auto& s) { return s.attempt() == 3; });
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(LayoutFromProto(state->layout()), shrunk);

  // The next attempt without a layout is the job's whole again.
  ASSERT_TRUE(observer.Start(4).ok());
  heard = pod3.WaitFor([](const auto& o) { return o.attempt() == 4; });
  ASSERT_TRUE(heard.has_value());
  EXPECT_FALSE(heard->has_layout());
}

// A resize drains the running attempt: rank 0's sidecar hears it once; another attempt's drain
// is refused.
TEST_F(AttemptHubTest, DrainTheRunningAttempt_RankZeroHearsOnce_AnotherAttemptRefused) {
  std::vector<int32_t> drained;
  server_->hub().set_on_drain(
      [&](int32_t attempt, const std::string&) { drained.push_back(attempt); });
  AttemptObserver observer(
      address_, kToken, [](const attemptspb::AttemptState&) {}, [](const absl::Status&) {});
  absl::Status wrong = observer.Drain(3, "grow");
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition) << wrong;
  EXPECT_THAT(std::string(wrong.message()), ::testing::HasSubstr("run attempt 2"));
  ASSERT_TRUE(observer.Drain(2, "grow to 4 replica groups").ok());
  ASSERT_TRUE(observer.Drain(2, "grow to 4 replica groups").ok());
  EXPECT_EQ(drained, std::vector<int32_t>{2});
  ASSERT_TRUE(observer.Start(3).ok());
  ASSERT_TRUE(observer.Drain(3, "shrink").ok());
  EXPECT_EQ(drained, (std::vector<int32_t>{2, 3}));
}

// Spares (FollowAttemptsRequest.spare): a spare follows holding no slot; an attempt gives it the
// slot of a pod that is gone, it hears that attempt with its pod index and is that pod from then
// on, while the pod that held the index is let go.
TEST_F(AttemptHubTest, ASpareTakesASlot_HearsTheAttemptWithItsIndex_AndIsThatPodFromThenOn) {
  Received<attemptspb::AttemptOrder> pod1, spare;
  auto old_pod1 = std::make_unique<AttemptFollower>(
      address_, kToken, 1, [&](const attemptspb::AttemptOrder& o) { pod1.Add(o); }, "job-1");
  std::unique_ptr<AttemptFollower> follower = AttemptFollower::Spare(
      address_, kToken, "job-spare0", [&](const attemptspb::AttemptOrder& o) { spare.Add(o); });
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); }, nullptr);
  ASSERT_TRUE(op.WaitFor([](const auto& s) {
    return s.spares_size() == 1 && s.spares(0) == "job-spare0" && s.pods_following() == 1;
  })) << "the spare is listed apart, not as a pod that follows";
  std::optional<attemptspb::AttemptOrder> waiting =
      spare.WaitFor([](const auto& o) { return o.attempt() == 2; });
  ASSERT_TRUE(waiting.has_value());
  EXPECT_FALSE(waiting->has_pod_index()) << "a spare runs nothing until it holds a slot";

  attemptspb::SpareAssignment take;
  take.set_pod_index(1);
  take.set_spare("job-spare0");
  ASSERT_TRUE(observer.Start(3, {take}).ok());
  std::optional<attemptspb::AttemptOrder> taken =
      spare.WaitFor([](const auto& o) { return o.attempt() == 3; });
  ASSERT_TRUE(taken.has_value());
  ASSERT_TRUE(taken->has_pod_index());
  EXPECT_EQ(taken->pod_index(), 1);
  std::optional<attemptspb::AttemptState> after = op.WaitFor([](const auto& s) {
    return s.attempt() == 3 && s.spares_size() == 0 && s.pods_following() == 1;
  });
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->following(0), 1);
  // The pod that held index 1 is let go, and cannot follow with it while the spare holds it.
  auto follow_as_pod1 = [&](const std::string& name) {
    auto stub = attemptspb::AttemptControl::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    AddToken(&ctx, kToken);
    attemptspb::FollowAttemptsRequest req;
    req.set_pod_index(1);
    req.set_pod_name(name);
    auto reader = stub->FollowAttempts(&ctx, req);
    attemptspb::AttemptOrder order;
    EXPECT_FALSE(reader->Read(&order)) << "ordered: " << order.ShortDebugString();
    return reader->Finish();
  };
  for (const std::string name : {"job-1", "job-1-r3"}) {
    const grpc::Status refused = follow_as_pod1(name);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << name;
    EXPECT_NE(
        refused.error_message().find(name == "job-1" ? "pod job-1 no longer holds pod index 1"
                                                     : "pod index 1 is held by spare job-spare0"),
        std::string::npos)
        << refused.error_message();
  }

  // The spare follows as pod 1 from now on: the next attempt reaches it as pod 1's, with no
  // index (it holds it already), and its going leaves index 1 unfollowed.
  old_pod1.reset();
  ASSERT_TRUE(observer.Start(4).ok());
  std::optional<attemptspb::AttemptOrder> next =
      spare.WaitFor([](const auto& o) { return o.attempt() == 4; });
  ASSERT_TRUE(next.has_value());
  EXPECT_FALSE(next->has_pod_index());
  follower.reset();
  EXPECT_TRUE(
      op.WaitFor([](const auto& s) { return s.attempt() == 4 && s.pods_following() == 0; }));
  // The spare gone, the pod it displaced still may not follow with index 1 (its node may come
  // back), but a pod of its own (a replacement) may; and the spare then no longer holds it.
  const grpc::Status displaced = follow_as_pod1("job-1");
  EXPECT_NE(displaced.error_message().find("pod job-1 no longer holds pod index 1"),
            std::string::npos)
      << displaced.error_message();
  Received<attemptspb::AttemptOrder> replacement;
  AttemptFollower pod1_again(
      address_, kToken, 1, [&](const attemptspb::AttemptOrder& o) { replacement.Add(o); },
      "job-1-r4");
  EXPECT_TRUE(replacement.WaitFor([](const auto& o) { return o.attempt() == 4; }));
}

TEST_F(AttemptHubTest, AnAssignmentThatCannotBeCarriedOut_StartsNothingAndSaysWhy) {
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); }, nullptr);
  std::unique_ptr<AttemptFollower> a = AttemptFollower::Spare(address_, kToken, "spare-a", nullptr);
  std::unique_ptr<AttemptFollower> b = AttemptFollower::Spare(address_, kToken, "spare-b", nullptr);
  ASSERT_TRUE(op.WaitFor([](const auto& s) { return s.spares_size() == 2; }));
  auto assign = [](int32_t pod, const std::string& spare) {
    attemptspb::SpareAssignment x;
    x.set_pod_index(pod);
    x.set_spare(spare);
    return x;
  };
  const struct {
    std::vector<attemptspb::SpareAssignment> assignments;
    std::string why;
  } cases[] = {
      {{assign(0, "spare-a")}, "rank 0's pod hosts the coordination service"},
      {{assign(-1, "spare-a")}, "there is no such pod"},
      {{assign(1, "spare-c")}, "spare 'spare-c' does not follow"},
      {{assign(1, "spare-a"), assign(1, "spare-b")}, "pod index 1 is given twice"},
      {{assign(1, "spare-a"), assign(2, "spare-a")}, "spare 'spare-a' is given two slots"},
  };
  for (const auto& c : cases) {
    absl::Status s = observer.Start(3, c.assignments);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s;
  }
  EXPECT_EQ(server_->hub().State().attempt(), 2) << "nothing started";
  EXPECT_EQ(server_->hub().State().spares_size(), 2) << "no spare took a slot";
}

TEST_F(AttemptHubTest, AWrongTokenIsRefused) {
  AttemptObserver observer(address_, "wrong", nullptr, nullptr);
  absl::Status s = observer.Start(3, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(server_->hub().State().attempt(), 2);
}

// A hang: the hub names it to the observer, asks every pod for evidence (the follower over the
// wire, rank 0's sidecar in process), waits for both, and forgets it when the next attempt starts.
TEST_F(AttemptHubTest, AHangIsPublished_EveryPodAskedForEvidence_ClearedByTheNextAttempt) {
  AttemptHub& hub = server_->hub();
  std::vector<std::pair<uint64_t, int32_t>> asked_locally;
  hub.set_hang_detection(*ParseHangTimeout("60"), "/run/cohort/dumps",
                         [&](uint64_t id, int32_t attempt) {
                           asked_locally.push_back({id, attempt});
                         });
  hub.FollowLocally([](const attemptspb::AttemptOrder&) {});
  Received<attemptspb::AttemptOrder> pod1;
  AttemptFollower follower(address_, kToken, 1,
                           [&](const attemptspb::AttemptOrder& o) { pod1.Add(o); });
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); }, nullptr);
  ASSERT_TRUE(op.WaitFor([](const auto& s) { return s.pods_following() == 2; }));

  auto report = [](int32_t pod, int64_t since_ms, bool waiting, uint64_t dumped) {
    attemptspb::ReportHealthRequest r;
    r.set_pod_index(pod);
    r.set_attempt(2);
    r.set_dumped_id(dumped);
    attemptspb::RankHealth& h = *r.add_ranks();
    h.set_rank(pod);
    h.set_steps(20);
    h.set_median_step_ms(1000);
    h.set_progress_age_ms(since_ms);
    h.set_waiting(waiting);
    h.set_op(waiting ? "all_reduce" : "");
    h.set_where(waiting ? "t.py:35 in <module>: loss.backward()"
                        : "t.py:40 in <module>: time.sleep(1e9)");
    return r;
  };
  const absl::Time now = absl::Now();
  hub.RecordHealth(report(0, 30'000, true, 0), now);
  ASSERT_TRUE(follower.ReportHealth(report(1, 30'000, false, 0)).ok());
  hub.CheckHang(now);
  EXPECT_FALSE(hub.State().has_hang()) << "30 s of a 60 s timeout";
  hub.RecordHealth(report(0, 61'000, true, 0), now);
  ASSERT_TRUE(follower.ReportHealth(report(1, 61'000, false, 0)).ok());
  hub.CheckHang(now);

  std::optional<attemptspb::AttemptState> hung =
      op.WaitFor([](const auto& s) { return s.has_hang(); });
  ASSERT_TRUE(hung.has_value());
  const uint64_t id = hung->hang().id();
  ASSERT_EQ(hung->hang().outliers_size(), 1);
  EXPECT_EQ(hung->hang().outliers(0).rank(), 1);
  EXPECT_EQ(hung->hang().groups(0).where(), "all_reduce at t.py:35");
  EXPECT_EQ(hung->hang().dumps_dir(), "/run/cohort/dumps/attempt-2");
  EXPECT_EQ(hung->hang().pods_total(), 2);
  EXPECT_FALSE(hung->hang().dumps_complete());
  EXPECT_TRUE(pod1.WaitFor([&](const auto& o) { return o.dump_id() == id && o.attempt() == 2; }));
  EXPECT_EQ(asked_locally, (std::vector<std::pair<uint64_t, int32_t>>{{id, 2}}));

  // The evidence: complete once both pods collected it.
  hub.RecordHealth(report(0, 62'000, true, id), now);
  EXPECT_FALSE(hub.State().hang().dumps_complete());
  ASSERT_TRUE(follower.ReportHealth(report(1, 62'000, false, id)).ok());
  EXPECT_TRUE(op.WaitFor([](const auto& s) { return s.has_hang() && s.hang().dumps_complete(); }));
  hub.CheckHang(now);
  EXPECT_EQ(hub.State().hang().id(), id) << "the same hang, not a new one";

  ASSERT_TRUE(hub.Start(3).ok());
  EXPECT_FALSE(hub.State().has_hang());
  hub.CheckHang(now);
  EXPECT_FALSE(hub.State().has_hang()) << "what was heard of attempt 2 is not attempt 3's";
}

TEST_F(AttemptHubTest, APodThatNeverCollects_TheEvidenceIsCompleteAfterThePatience) {
  AttemptHub& hub = server_->hub();
  hub.set_hang_detection(*ParseHangTimeout("60"), "/d", nullptr);
  Received<attemptspb::AttemptOrder> pod1;
  AttemptFollower follower(address_, kToken, 1,
                           [&](const attemptspb::AttemptOrder& o) { pod1.Add(o); });
  Received<attemptspb::AttemptState> op;
  AttemptObserver observer(
      address_, kToken, [&](const attemptspb::AttemptState& s) { op.Add(s); }, nullptr);
  ASSERT_TRUE(op.WaitFor([](const auto& s) { return s.pods_following() == 1; }));
  attemptspb::ReportHealthRequest r;
  r.set_pod_index(1);
  r.set_attempt(2);
  attemptspb::RankHealth& h = *r.add_ranks();
  h.set_rank(1);
  h.set_progress_age_ms(120'000);
  const absl::Time now = absl::Now();
  hub.RecordHealth(r, now);
  hub.CheckHang(now);
  ASSERT_TRUE(hub.State().has_hang());
  hub.CheckHang(now + AttemptLedger::kDumpPatience - absl::Seconds(1));
  EXPECT_FALSE(hub.State().hang().dumps_complete());
  hub.CheckHang(now + AttemptLedger::kDumpPatience);
  EXPECT_TRUE(hub.State().hang().dumps_complete());
  // Its rank moves again: the hang clears.
  h.set_progress_age_ms(0);
  hub.RecordHealth(r, now + AttemptLedger::kDumpPatience);
  hub.CheckHang(now + AttemptLedger::kDumpPatience);
  EXPECT_FALSE(hub.State().has_hang());
}

TEST(AttemptControlAddress, TheCoordinatorPortPlusThree) {
  EXPECT_EQ(*AttemptControlAddress("demo-0.demo.ns.svc:8476"), "demo-0.demo.ns.svc:8479");
  EXPECT_FALSE(AttemptControlAddress("no-port").ok());
}

}  // namespace
}  // namespace cohort::coordination
