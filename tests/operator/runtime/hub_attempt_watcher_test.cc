// HubAttemptWatcher against a real attempt hub on a real gRPC port: the operator's view of a job's
// hub, and the orders it passes on.
#include "operator/runtime/hub_attempt_watcher.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordination/attempts/attempt_hub.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::op {
namespace {

namespace attemptspb = coordination::attemptspb;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kKey[] = "ml/train";
constexpr char kToken[] = "job-token";

std::unique_ptr<coordination::AttemptHubServer> StartHub(int32_t first_attempt) {
  absl::StatusOr<std::unique_ptr<coordination::AttemptHubServer>> server =
      coordination::AttemptHubServer::Start("127.0.0.1:0", first_attempt, kToken);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string Address(const coordination::AttemptHubServer& server) {
  return absl::StrCat("127.0.0.1:", server.port());
}

class HubAttemptWatcherTest : public ::testing::Test {
 protected:
  // Waits (on the watcher's change notifications, up to 20 s) until the job's view satisfies
  // `done`; the last view either way.
  std::optional<AttemptView> AwaitView(const std::function<bool(const AttemptView&)>& done) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      std::optional<AttemptView> v = watcher_.View(kKey);
      return v.has_value() && done(*v);
    };
    for (absl::Time deadline = absl::Now() + absl::Seconds(20);
         !ready() && absl::Now() < deadline;) {
      changed_.WaitWithDeadline(&mu_, deadline);
    }
    return watcher_.View(kKey);
  }
  int changes() {
    absl::MutexLock lock(&mu_);
    return changes_;
  }

  absl::Mutex mu_;
  absl::CondVar changed_;
  int changes_ ABSL_GUARDED_BY(mu_) = 0;
  HubAttemptWatcher watcher_{[this](const std::string& key) {
    EXPECT_EQ(key, kKey);
    absl::MutexLock lock(&mu_);
    ++changes_;
    changed_.SignalAll();
  }};
};

TEST_F(HubAttemptWatcherTest, WatchedJob_ViewFollowsTheHub_StartOrdersTheNextAttempt) {
  std::unique_ptr<coordination::AttemptHubServer> hub = StartHub(3);
  ASSERT_NE(hub, nullptr);
  EXPECT_FALSE(watcher_.View(kKey).has_value()) << "not watched yet";
  watcher_.Watch(kKey, Address(*hub), kToken);
  std::optional<AttemptView> v = AwaitView([](const AttemptView& v) { return v.heard; });
  ASSERT_TRUE(v.has_value() && v->heard);
  EXPECT_TRUE(v->connected);
  EXPECT_EQ(v->attempt, 3);
  EXPECT_EQ(v->hub_incarnation, hub->hub().incarnation());

  ASSERT_TRUE(watcher_.Start(kKey, 4, {}, std::nullopt).ok());
  EXPECT_EQ(hub->hub().State().attempt(), 4) << "the order reached the hub";
  v = AwaitView([](const AttemptView& v) { return v.attempt == 4; });
  EXPECT_EQ(v->attempt, 4);

  attemptspb::AttemptEnd end;
  end.set_pod_index(2);
  end.set_attempt(4);
  end.set_exit_code(137);
  end.set_reason("OOMKilled");
  end.set_message("rank 9 ran out of memory");
  end.set_finished_unix_ms(1'800'000'000'000);
  hub->hub().ReportEnd(end);
  v = AwaitView([](const AttemptView& v) { return v.ends.contains(2); });
  ASSERT_TRUE(v->ends.contains(2));
  EXPECT_EQ(v->ends.at(2).exit_code, 137);
  EXPECT_EQ(v->ends.at(2).reason, "OOMKilled");
  EXPECT_EQ(v->ends.at(2).message, "rank 9 ran out of memory");
  EXPECT_EQ(v->ends.at(2).finished_at, absl::FromUnixMillis(1'800'000'000'000));
}

TEST_F(HubAttemptWatcherTest, Start_RefusedForAJobNotWatchedAndForAnAttemptOutOfTurn) {
  absl::Status s = watcher_.Start(kKey, 1, {}, std::nullopt);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("no stream to job ml/train's attempt hub"));

  std::unique_ptr<coordination::AttemptHubServer> hub = StartHub(0);
  ASSERT_NE(hub, nullptr);
  watcher_.Watch(kKey, Address(*hub), kToken);
  ASSERT_TRUE(AwaitView([](const AttemptView& v) { return v.heard; })->heard);
  s = watcher_.Start(kKey, 5, {}, std::nullopt);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("the next one is 1, not 5"));
  s = watcher_.Start(kKey, 1, {{2, "train-spare0"}}, std::nullopt);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("spare 'train-spare0' does not follow"));
  EXPECT_EQ(hub->hub().State().attempt(), 0) << "nothing was started";
}

TEST_F(HubAttemptWatcherTest, HubGone_ViewKeepsWhatItSaidAndSaysDisconnected) {
  std::unique_ptr<coordination::AttemptHubServer> hub = StartHub(2);
  ASSERT_NE(hub, nullptr);
  watcher_.Watch(kKey, Address(*hub), kToken);
  ASSERT_TRUE(AwaitView([](const AttemptView& v) { return v.connected; })->connected);
  hub.reset();  // Rank 0's pod went.
  std::optional<AttemptView> v = AwaitView([](const AttemptView& v) { return !v.connected; });
  EXPECT_FALSE(v->connected);
  EXPECT_TRUE(v->heard);
  EXPECT_EQ(v->attempt, 2);
}

TEST_F(HubAttemptWatcherTest, NewAddress_ReplacesTheStream_CloseKeepsTheView_ForgetDropsIt) {
  std::unique_ptr<coordination::AttemptHubServer> first = StartHub(0);
  std::unique_ptr<coordination::AttemptHubServer> second = StartHub(7);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  watcher_.Watch(kKey, Address(*first), kToken);
  ASSERT_EQ(AwaitView([](const AttemptView& v) { return v.heard; })->attempt, 0);
  // Rank 0's pod recreated: its new hub on another address.
  watcher_.Watch(kKey, Address(*second), kToken);
  const uint64_t incarnation = second->hub().incarnation();
  std::optional<AttemptView> v =
      AwaitView([&](const AttemptView& v) { return v.hub_incarnation == incarnation; });
  EXPECT_EQ(v->attempt, 7);
  ASSERT_TRUE(watcher_.Start(kKey, 8, {}, std::nullopt).ok());
  EXPECT_EQ(second->hub().State().attempt(), 8);
  EXPECT_EQ(first->hub().State().attempt(), 0) << "the old hub hears nothing more";

  watcher_.Close(kKey);  // The job finished.
  v = watcher_.View(kKey);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->hub_incarnation, incarnation) << "what the hub said last is kept";
  EXPECT_TRUE(absl::IsFailedPrecondition(watcher_.Start(kKey, 9, {}, std::nullopt)));

  watcher_.Forget(kKey);  // The job was deleted.
  EXPECT_FALSE(watcher_.View(kKey).has_value());
}

TEST_F(HubAttemptWatcherTest, WatchedButSilent_SaysSinceWhenAndNothingHeard) {
  // A port nobody serves: the stream never delivers a state.
  std::unique_ptr<coordination::AttemptHubServer> hub = StartHub(0);
  ASSERT_NE(hub, nullptr);
  const std::string address = Address(*hub);
  hub.reset();
  const absl::Time before = absl::Now();
  watcher_.Watch(kKey, address, kToken);
  std::optional<AttemptView> v = watcher_.View(kKey);
  ASSERT_TRUE(v.has_value());
  EXPECT_FALSE(v->heard);
  EXPECT_GE(v->watching_since, before);
  EXPECT_EQ(changes(), 0) << "a stream that never said anything changes no view";
}

// The proto -> view mapping alone.
TEST(AttemptViewOf, CarriesWhoFollowedTheSameHubButNotAnEarlierHubs) {
  attemptspb::AttemptState state;
  state.set_hub_incarnation(11);
  state.set_attempt(2);
  state.add_following(0);
  state.add_following(3);
  state.add_spares("train-spare1");
  AttemptView before;
  before.hub_incarnation = 11;
  before.followed = {0, 1, 2, 3};
  AttemptView v = AttemptViewOf(state, before);
  EXPECT_THAT(v.following, ElementsAre(0, 3));
  EXPECT_THAT(v.followed, ElementsAre(0, 1, 2, 3)) << "pods 1 and 2 followed this hub before";
  EXPECT_THAT(v.spares, ElementsAre("train-spare1"));
  EXPECT_TRUE(v.connected);

  before.hub_incarnation = 10;  // Rank 0's pod restarted: a hub started anew.
  EXPECT_THAT(AttemptViewOf(state, before).followed, ElementsAre(0, 3));
  EXPECT_THAT(AttemptViewOf(state, std::nullopt).followed, ElementsAre(0, 3));
}

TEST(AttemptViewOf, HangWithItsRanksGroupsAndEvidence) {
  attemptspb::AttemptState state;
  state.set_attempt(1);
  attemptspb::HangReport* h = state.mutable_hang();
  h->set_id(99);
  h->set_attempt(1);
  h->set_detected_unix_ms(1'800'000'000'000);
  attemptspb::HungRank* r = h->add_outliers();
  r->set_rank(5);
  r->set_pod_index(2);
  r->set_local(1);
  r->set_where("train.py:88 in step");
  attemptspb::RankGroup* g = h->add_groups();
  g->add_ranks(0);
  g->add_ranks(1);
  g->set_where("all_reduce");
  h->set_pods_dumped(3);
  h->set_pods_total(4);
  h->set_dumps_dir("/run/cohort/dumps/attempt-1");
  AttemptView v = AttemptViewOf(state, std::nullopt);
  ASSERT_TRUE(v.hang.has_value());
  EXPECT_EQ(v.hang->id, 99u);
  EXPECT_EQ(v.hang->detected_at, absl::FromUnixMillis(1'800'000'000'000));
  ASSERT_EQ(v.hang->outliers.size(), 1u);
  EXPECT_EQ(v.hang->outliers[0].rank, 5);
  EXPECT_EQ(v.hang->outliers[0].pod_index, 2);
  EXPECT_EQ(v.hang->outliers[0].local, 1);
  EXPECT_EQ(v.hang->outliers[0].where, "train.py:88 in step");
  ASSERT_EQ(v.hang->groups.size(), 1u);
  EXPECT_THAT(v.hang->groups[0].ranks, ElementsAre(0, 1));
  EXPECT_FALSE(v.hang->dumps_complete);
  EXPECT_EQ(v.hang->pods_dumped, 3);
  EXPECT_EQ(v.hang->pods_total, 4);
  EXPECT_EQ(v.hang->dumps_dir, "/run/cohort/dumps/attempt-1");
  EXPECT_FALSE(AttemptViewOf(attemptspb::AttemptState(), std::nullopt).hang.has_value());
}

}  // namespace
}  // namespace cohort::op
