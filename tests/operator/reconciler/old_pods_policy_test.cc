// The old pods policy (old_pods_policy.h): old restart attempts' pods deleted, and those a
// lost node keeps terminating force-deleted past their grace period and the operator's bound.
#include "operator/reconciler/old_pods_policy.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using testing::AllRunning;
using testing::CheckPolicyCase;
using ::testing::ElementsAre;
using testing::Gang;
using ::testing::HasSubstr;
using testing::InPhase;
using testing::Job;
using testing::kNow;
using testing::PodBuilder;
using testing::PolicyCase;

class LostNodePolicyTable : public ::testing::TestWithParam<PolicyCase> {};
TEST_P(LostNodePolicyTable, Row) { CheckPolicyCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    DeleteOldPods, LostNodePolicyTable,
    ::testing::Values(
        PolicyCase{.name = "NoOldPods_NothingToDo",
                   .policy = DeleteOldPods,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0, AllRunning),
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kRunning},
        PolicyCase{.name = "OldAttemptsPods_Deleted",
                   .policy = DeleteOldPods,
                   .job = Job(InPhase(Phase::kPending, 2)),
                   .pods = Gang(1, AllRunning),
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kPending,
                   .deletes = 4},
        PolicyCase{.name = "OldPodTerminatingWithinGrace_DueLater",
                   .policy = DeleteOldPods,
                   .job = Job(InPhase(Phase::kPending, 1)),
                   .pods = {PodBuilder(2, 0).TerminatingUntil(kNow + absl::Seconds(10), "node-b")},
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kPending,
                   .requeue = absl::Seconds(70)},
        PolicyCase{.name = "OldPodPastGracePlusBound_ForceDeleted",
                   .policy = DeleteOldPods,
                   .job = Job(InPhase(Phase::kPending, 1)),
                   .pods = {PodBuilder(2, 0).TerminatingUntil(kNow - absl::Seconds(61), "node-b")},
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kPending,
                   .event_reason = "ForceDeleted",
                   .event_message = "pod train-2 on node node-b"}),
    testing::PolicyCaseName);

// Lost nodes: a pod of an earlier attempt that stays terminating (nothing confirms its deletion)
// is force-deleted once its grace period ended DecideOptions::force_delete_after ago.
class LostNodeTest : public ::testing::Test {
 protected:
  // Restart attempt 1 waiting to start, its predecessor's rank 2 still terminating on node-b
  // with a grace period that ended `ago`.
  Decision DecideWithOldPod(absl::Duration ago, DecideOptions options = {}) {
    DistributedJob job = Job(InPhase(Phase::kPending, 1));
    std::vector<ObservedPod> pods = {PodBuilder(2, 0).TerminatingUntil(kNow - ago, "node-b")};
    return Decide(job, pods, kNow, options);
  }
};

TEST_F(LostNodeTest, PastGracePlusTheBound_ForceDeletedWithAnEventNamingPodAndNode) {
  Decision d = DecideWithOldPod(absl::Seconds(61));
  EXPECT_THAT(d.force_delete_pods, ElementsAre("train-2"));
  EXPECT_TRUE(d.delete_pods.empty()) << "already being deleted: no second graceful delete";
  EXPECT_TRUE(d.create_ranks.empty()) << "the next attempt starts once the pod is gone";
  ASSERT_FALSE(d.events.empty());
  EXPECT_EQ(d.events[0].type, "Warning");
  EXPECT_EQ(d.events[0].reason, "ForceDeleted");
  EXPECT_THAT(d.events[0].message,
              HasSubstr("pod train-2 on node node-b was still terminating 1m1s"));
}

// A job that finished while a pod replaced alone (restarting in place) stayed terminating on a
// lost node: its pods stay, but that one is force-deleted all the same; a completed pod is not.
TEST_F(LostNodeTest, FinishedJob_APodStuckTerminatingIsForceDeleted_TheOthersStay) {
  DistributedJob job = Job(InPhase(Phase::kSucceeded, 1));
  std::vector<ObservedPod> pods = Gang(0, [](int, PodBuilder& p) { p.Exited(0); });
  pods[2] = PodBuilder(2, 0).TerminatingUntil(kNow - absl::Seconds(61), "node-b");
  pods.push_back(PodBuilder(2, 1).Exited(0));
  pods.back().name = "train-2-r1";
  Decision d = Decide(job, pods, kNow);
  EXPECT_THAT(d.force_delete_pods, ElementsAre("train-2"));
  EXPECT_TRUE(d.delete_pods.empty()) << "a finished job's pods stay";
  EXPECT_EQ(d.status.phase, Phase::kSucceeded);
}

TEST_F(LostNodeTest, WithinTheBound_WaitsAndLooksAgainWhenItIsDue) {
  // A running gang of attempt 1 (nothing else to look again for) beside an old pod whose grace
  // period ended 20 s ago: due in 40 s.
  DistributedJob job = Job(InPhase(Phase::kRunning, 1));
  std::vector<ObservedPod> pods = Gang(1, AllRunning);
  pods.push_back(PodBuilder(2, 0).TerminatingUntil(kNow - absl::Seconds(20), "node-b"));
  Decision d = Decide(job, pods, kNow);
  EXPECT_TRUE(d.force_delete_pods.empty());
  ASSERT_TRUE(d.requeue_after.has_value());
  EXPECT_EQ(*d.requeue_after, absl::Seconds(40));
  EXPECT_TRUE(d.events.empty());
}

TEST_F(LostNodeTest, AlreadyForceDeleted_NotAgainAndNoSecondEvent) {
  DistributedJob job = Job(InPhase(Phase::kPending, 1));
  ObservedPod gone = PodBuilder(2, 0).TerminatingUntil(kNow - absl::Minutes(5), "node-b");
  gone.force_deleted = true;  // deletionGracePeriodSeconds 0: a finalizer holds it.
  Decision d = Decide(job, {gone}, kNow);
  EXPECT_TRUE(d.force_delete_pods.empty());
  EXPECT_TRUE(d.events.empty());
}

TEST_F(LostNodeTest, TheBoundIsTheOperatorsFlag_NegativeNever) {
  DecideOptions soon;
  soon.force_delete_after = absl::Seconds(5);
  EXPECT_THAT(DecideWithOldPod(absl::Seconds(6), soon).force_delete_pods, ElementsAre("train-2"));
  DecideOptions never;
  never.force_delete_after = -absl::InfiniteDuration();
  EXPECT_TRUE(DecideWithOldPod(absl::Hours(5), never).force_delete_pods.empty());
}

TEST_F(LostNodeTest, ThePodsOfTheCurrentAttemptAreNotForceDeleted) {
  DistributedJob job = Job(InPhase(Phase::kRunning, 1));
  std::vector<ObservedPod> pods = {PodBuilder(0, 1).Running(),
                                   PodBuilder(1, 1).TerminatingUntil(kNow - absl::Hours(1))};
  EXPECT_TRUE(Decide(job, pods, kNow).force_delete_pods.empty());
}

}  // namespace
}  // namespace cohort::op
