// Elastic replica groups (elastic_policy.h) through Decide(), as a table: a lost pod's group
// waited for, then left out; minReplicas and group 0 respected; a group back or a scale drains the
// attempt; a drained attempt restarts uncounted at the new size; the status and Events say so.

#include "operator/reconciler/elastic_policy.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/conditions.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using ::testing::HasSubstr;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;
using testing::PodBuilder;

// 4 pods in 2 replica groups of 2 (pods 0-1, 2-3), at least `min_replicas` pods.
DistributedJob ElasticJob(int32_t min_replicas = 2, int32_t replicas = 4) {
  JobBuilder b;
  b.Spec("replicas", replicas);
  b.Spec("elastic",
         {{"minReplicas", min_replicas}, {"podsPerGroup", 2}, {"shrinkAfterSeconds", 60}});
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        nlohmann::json::array({"python", "train.py"}));
  return Job(nullptr, b.Build());
}

// Pending after a counted in-place restart to attempt 1 whose backoff (10 s) ended `ago` before
// kNow: the restart began ago + 10 s before it.
DistributedJob PendingAfterRestart(absl::Duration ago, DistributedJob job = ElasticJob()) {
  job.status.phase = Phase::kPending;
  job.status.restart_attempt = 1;
  job.status.restarts = 1;
  job.status.last_restart_kind = "Failure";
  job.status.last_restart_strategy = "InPlace";
  job.status.start_time = FormatRfc3339(kNow - absl::Hours(1));
  SetCondition(job.status.conditions,
               Condition{"Restarting", "False", "Restarted", "x", FormatRfc3339(kNow - ago), 1});
  return job;
}

// Running attempt `attempt`, whose layout leaves out groups `dropped` (status as KeepElastic
// wrote it when `known`).
DistributedJob RunningElastic(int32_t attempt, std::vector<int32_t> dropped, bool known = true,
                              DistributedJob job = ElasticJob()) {
  job.status.phase = Phase::kRunning;
  job.status.restart_attempt = attempt;
  job.status.restarts = 1;
  job.status.last_restart_kind = "Failure";
  job.status.last_restart_strategy = "InPlace";
  job.status.start_time = FormatRfc3339(kNow - absl::Hours(1));
  if (known) {
    job.status.dropped_replica_groups = dropped;
    job.status.replica_groups = 2 - static_cast<int32_t>(dropped.size());
    job.status.replicas = job.status.replica_groups * 2;
  }
  return job;
}

// The hub: attempt `attempt`, pods `following`, ends (pod, exit code), the layout of the attempt
// (none: every pod).
AttemptView View(int32_t attempt, std::set<int32_t> following,
                 std::vector<std::pair<int32_t, int>> ends = {},
                 std::optional<AttemptLayout> layout = std::nullopt) {
  AttemptView v;
  v.attempt = attempt;
  v.connected = true;
  v.following = following;
  v.followed = following;
  v.layout = layout;
  for (auto [pod, code] : ends)
    v.ends[pod] = AttemptView::End{code, code == 76 ? "Preempted" : "Error", "x", kNow};
  return v;
}

// Pods 0-2 of attempt 0 that ended it (in place), pod 3's replacement of attempt 1 (Pending).
std::vector<ObservedPod> ThreeStayOneReplacementPending() {
  std::vector<ObservedPod> pods;
  for (int r = 0; r < 3; ++r) pods.push_back(PodBuilder(r, 0).Running());
  ObservedPod replacement = PodBuilder(3, 1).Pending();
  replacement.name = "train-3-r1";
  replacement.unscheduled_reason = "Unschedulable";
  pods.push_back(replacement);
  return pods;
}
const AttemptView kThreeEnded = View(0, {0, 1, 2}, {{0, 75}, {1, 75}, {2, 137}});

// Attempt 1 runs pods 0-1 (group 1 left out): pod 2 idle, pod 3's replacement as `three`.
std::vector<ObservedPod> ShrunkGang(std::function<void(PodBuilder&)> three) {
  std::vector<ObservedPod> pods;
  for (int r = 0; r < 3; ++r) pods.push_back(PodBuilder(r, 0).Running());
  PodBuilder replacement(3, 1);
  three(replacement);
  ObservedPod p = replacement;
  p.name = "train-3-r1";
  pods.push_back(p);
  return pods;
}
const AttemptLayout kWithoutGroupOne = LayoutWithout(4, 2, {1}, 2);

struct Case {
  std::string name;
  DistributedJob job;
  std::vector<ObservedPod> pods;
  AttemptView view;
  Phase phase;
  std::optional<int32_t> start_attempt;
  std::optional<AttemptLayout> start_layout;
  std::optional<int32_t> drain;  // The attempt drained.
  int32_t restart_attempt;
  std::string condition;          // "<type>=<status>/<reason>" of the one to check ("" for none).
  std::string event_reason = "";  // Of the first Event ("" for none).
  std::string event_message = "";
  std::vector<int32_t> replace_ranks = {};
  size_t deletes = 0;
};

std::string ConditionOf(const DistributedJobStatus& st, const std::string& type) {
  const Condition* c = FindCondition(st.conditions, type);
  return c == nullptr ? "" : absl::StrCat(type, "=", c->status, "/", c->reason);
}

class ElasticTest : public ::testing::TestWithParam<Case> {};

TEST_P(ElasticTest, Table) {
  const Case& c = GetParam();
  Decision d = Decide(c.job, c.pods, kNow, DecideOptions{}, &c.view);
  EXPECT_EQ(std::string(PhaseName(d.status.phase)), PhaseName(c.phase));
  EXPECT_EQ(d.start_attempt, c.start_attempt);
  EXPECT_EQ(d.start_layout, c.start_layout);
  EXPECT_EQ(d.drain_attempt ? std::optional<int32_t>(d.drain_attempt->first) : std::nullopt,
            c.drain);
  EXPECT_EQ(d.status.restart_attempt, c.restart_attempt);
  EXPECT_EQ(d.status.restarts, 1) << "a resize or a shrink counts nothing beyond the failure";
  EXPECT_EQ(d.replace_ranks, c.replace_ranks);
  EXPECT_EQ(d.delete_pods.size(), c.deletes);
  if (!c.condition.empty()) {
    const std::string type = c.condition.substr(0, c.condition.find('='));
    EXPECT_EQ(ConditionOf(d.status, type), c.condition);
  }
  if (c.event_reason.empty()) {
    EXPECT_TRUE(d.events.empty()) << d.events[0].reason << ": " << d.events[0].message;
  } else {
    ASSERT_FALSE(d.events.empty());
    EXPECT_EQ(d.events[0].reason, c.event_reason);
    EXPECT_THAT(d.events[0].message, HasSubstr(c.event_message));
  }
}

INSTANTIATE_TEST_SUITE_P(Decide, ElasticTest,
                         ::
                             testing::Values(Case{"LostPodsReplacementPending_"
                                                  "WaitsWithinShrinkAfterSeconds",
                                                  PendingAfterRestart(absl::Seconds(5)),
                                                  ThreeStayOneReplacementPending(), kThreeEnded,
                                                  Phase::kPending, std::nullopt, std::nullopt,
                                                  std::nullopt, 1, "Shrunk=True/WaitingForPods"},
                                             Case{"ShrinkAfterSecondsPassed_StartsWithoutItsGroup",
                                                  PendingAfterRestart(absl::Seconds(51)),
                                                  ThreeStayOneReplacementPending(), kThreeEnded,
                                                  Phase::kPending, 1, kWithoutGroupOne,
                                                  std::nullopt, 1, ""},
                                             Case{"BelowMinReplicas_Waits",
                                                  PendingAfterRestart(absl::Seconds(51),
                                                                      ElasticJob(4)),
                                                  ThreeStayOneReplacementPending(), kThreeEnded,
                                                  Phase::kPending, std::nullopt, std::nullopt,
                                                  std::nullopt, 1, "Shrunk=True/WaitingForPods"},
                                             Case{"GroupZeroIsNeverLeftOut",
                                                  PendingAfterRestart(absl::Seconds(51)),
                                                  [] {
                                                    std::vector<ObservedPod> pods =
                                                        ThreeStayOneReplacementPending();
                                                    pods[3].rank =
                                                        1;  // Pod 1's replacement is Pending
                                                            // instead, pod 1 is gone.
                                                    pods[3].name = "train-1-r1";
                                                    pods[1] = PodBuilder(3, 0).Running();
                                                    return pods;
                                                  }(),
                                                  View(0, {0, 2, 3}, {{0, 75}, {2, 75}, {3, 75}}),
                                                  Phase::kPending, std::nullopt, std::nullopt,
                                                  std::nullopt, 1, "Shrunk=True/WaitingForPods"},
                                             Case{"EveryGroupReady_TheWholeLayout",
                                                  PendingAfterRestart(absl::Seconds(5)),
                                                  [] {
                                                    std::vector<ObservedPod> pods =
                                                        ThreeStayOneReplacementPending();
                                                    pods[3] = PodBuilder(3, 1).Running();
                                                    return pods;
                                                  }(),
                                                  View(0, {0, 1, 2, 3},
                                                       {{0, 75}, {1, 75}, {2, 137}}),
                                                  Phase::kPending, 1, LayoutWithout(4, 2, {}, 2),
                                                  std::nullopt, 1, ""},
                                             Case{"RunningShrunk_"
                                                  "StatusConditionAndEventSayWhichGroup",
                                                  RunningElastic(1, {}, /*known=*/false),
                                                  ShrunkGang([](PodBuilder& p) { p.Pending(); }),
                                                  View(1, {0, 1, 2}, {}, kWithoutGroupOne),
                                                  Phase::kRunning, std::nullopt, std::nullopt,
                                                  std::nullopt, 1, "Shrunk=True/PodsLost", "Shrunk",
                                                  "runs 1 of 2 replica groups, without group 1 "
                                                  "(pods train-2, train-3)"},
                                             Case{"RunningShrunk_ALeftOutPodGone_IsCreatedAgain_"
                                                  "NoRestart",
                                                  RunningElastic(1, {1}),
                                                  [] {
                                                    std::vector<ObservedPod> pods = ShrunkGang(
                                                        [](PodBuilder& p) { p.Pending(); });
                                                    pods.pop_back();
                                                    return pods;
                                                  }(),
                                                  View(1, {0, 1, 2}, {}, kWithoutGroupOne),
                                                  Phase::kRunning,
                                                  std::nullopt,
                                                  std::nullopt,
                                                  std::nullopt,
                                                  1,
                                                  "",
                                                  "",
                                                  "",
                                                  {3}},
                                             Case{
                                                 "GroupBack_DrainsTheAttempt", RunningElastic(1, {1}),
                                                 ShrunkGang([](PodBuilder& p) { p.Running(); }),
                                                 View(1, {0, 1, 2, 3}, {}, kWithoutGroupOne),
                                                 Phase::kRunning, std::nullopt, std::nullopt, 1,
                                                 1, "Resizing=True/Draining", "Resizing",
                                                 "to grow to 2 of 2 replica groups: group 1 (pods "
                                                 "train-2, train-3) is ready again"},
                                             Case{
                                                 "Drained_EveryRankAtTheSyncPoint_"
                                                 "RestartsUncounted",
                                                 [] {
                                                   DistributedJob j = RunningElastic(1, {1});
                                                   SetCondition(
                                                       j.status.conditions,
                                                       Condition{
                                                           "Resizing", "True", "Draining",
                                                           "to grow",
                                                           FormatRfc3339(kNow - absl::Seconds(3)),
                                                           1});
                                                   return j;
                                                 }(),
                                                 ShrunkGang([](PodBuilder& p) { p.Running(); }),
                                                 View(
                                                     1,
                                                     {0, 1, 2, 3}, {{0, 76}, {1, 76}}, kWithoutGroupOne),
                                                 Phase::kRestarting, std::nullopt,
                                                 std::nullopt, std::nullopt, 2,
                                                 "Resizing=False/Resized", "RestartedInPlace",
                                                 "every rank stopped at the preemption sync "
                                                 "point"},
                                             Case{"ScaledDown_DrainsTheAttempt", RunningElastic(1, {}, true, ElasticJob(2, 2)),
                                                  [] {
                                                    std::vector<ObservedPod> pods;
                                                    for (int r = 0; r < 4; ++r)
                                                      pods.push_back(PodBuilder(r, 1).Running());
                                                    return pods;
                                                  }(),
                                                  View(1, {0, 1, 2, 3}, {},
                                                       LayoutWithout(4, 2, {}, 2)),
                                                  Phase::kRunning, std::nullopt, std::nullopt, 1, 1,
                                                  "Resizing=True/Draining", "Resizing",
                                                  "scale down to 2 pods"},
                                             Case{"ShrunkAttemptSucceeds_TheLeftOutPodsGo",
                                                  RunningElastic(1, {1}),
                                                  [] {
                                                    std::vector<ObservedPod> pods = ShrunkGang(
                                                        [](PodBuilder& p) { p.Pending(); });
                                                    pods[0] = PodBuilder(0, 1).Exited(0);
                                                    pods[1] = PodBuilder(1, 1).Exited(0);
                                                    return pods;
                                                  }(),
                                                  View(1, {2}, {}, kWithoutGroupOne),
                                                  Phase::kSucceeded,
                                                  std::nullopt,
                                                  std::nullopt,
                                                  std::nullopt,
                                                  1,
                                                  "",
                                                  "Completed",
                                                  "all 2 ranks exited successfully",
                                                  {},
                                                  2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace cohort::op
