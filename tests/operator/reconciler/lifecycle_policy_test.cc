// The lifecycle policies (lifecycle_policy.h): a finished job until its TTL, an invalid spec,
// suspend and resume, activeDeadlineSeconds; each run alone.
#include "operator/reconciler/lifecycle_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/conditions.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using testing::AllRunning;
using testing::CheckPolicyCase;
using testing::Gang;
using testing::InPhase;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;
using testing::PodBuilder;
using testing::PolicyCase;

DistributedJob Finished(Phase phase, int64_t ttl, absl::Duration ago) {
  return Job([=](DistributedJob& j) {
    j.status.phase = phase;
    j.status.completion_time = FormatRfc3339(kNow - ago);
    j.spec.ttl_seconds_after_finished = ttl;
  });
}

DistributedJob WithDeadline(int64_t seconds) {
  return Job([=](DistributedJob& j) {
    InPhase(Phase::kRunning)(j);  // Started an hour ago.
    j.spec.active_deadline_seconds = seconds;
  });
}

class LifecyclePolicyTable : public ::testing::TestWithParam<PolicyCase> {};
TEST_P(LifecyclePolicyTable, Row) { CheckPolicyCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    KeepFinished, LifecyclePolicyTable,
    ::testing::Values(PolicyCase{.name = "Running_NotItsBusiness",
                                 .policy = KeepFinished,
                                 .job = Job(InPhase(Phase::kRunning)),
                                 .pods = Gang(0, AllRunning),
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kRunning},
                      PolicyCase{.name = "TtlPassed_DeletesTheJob",
                                 .policy = KeepFinished,
                                 .job = Finished(Phase::kSucceeded, 60, absl::Seconds(100)),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kSucceeded,
                                 .delete_job = true},
                      PolicyCase{.name = "TtlAhead_LooksAgainWhenDue",
                                 .policy = KeepFinished,
                                 .job = Finished(Phase::kFailed, 600, absl::Seconds(100)),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kFailed,
                                 .requeue = absl::Seconds(500)},
                      PolicyCase{.name = "KeepsThePodsForTheirLogs",
                                 .policy = KeepFinished,
                                 .job = Job(InPhase(Phase::kSucceeded)),
                                 .pods = Gang(0, [](int, PodBuilder& p) { p.Exited(0); }),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kSucceeded}),
    testing::PolicyCaseName);

INSTANTIATE_TEST_SUITE_P(
    CheckSpec, LifecyclePolicyTable,
    ::testing::Values(PolicyCase{.name = "Valid_Continues",
                                 .policy = CheckSpec,
                                 .job = Job(),
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kPending},
                      PolicyCase{.name = "Invalid_DecidesWithTheEvent",
                                 .policy = CheckSpec,
                                 .job = Job(nullptr, JobBuilder().Spec("replicas", 0).Build()),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kPending,
                                 .event_reason = "InvalidSpec",
                                 .event_message = "spec.replicas"}),
    testing::PolicyCaseName);

INSTANTIATE_TEST_SUITE_P(SuspendOrResume, LifecyclePolicyTable,
                         ::testing::Values(PolicyCase{.name = "Suspend_DeletesThePods",
                                                      .policy = SuspendOrResume,
                                                      .job = Job([](DistributedJob& j) {
                                                        InPhase(Phase::kRunning)(j);
                                                        j.spec.suspend = true;
                                                      }),
                                                      .pods = Gang(0, AllRunning),
                                                      .verdict = Verdict::kDecided,
                                                      .phase = Phase::kSuspended,
                                                      .deletes = 4,
                                                      .event_reason = "Suspended",
                                                      .event_message = "spec.suspend to false"},
                                           PolicyCase{.name = "StillSuspended_NoSecondEvent",
                                                      .policy = SuspendOrResume,
                                                      .job = Job([](DistributedJob& j) {
                                                        InPhase(Phase::kSuspended)(j);
                                                        j.spec.suspend = true;
                                                      }),
                                                      .verdict = Verdict::kDecided,
                                                      .phase = Phase::kSuspended},
                                           PolicyCase{
                                               .name = "Resume_NextAttemptPending",
                                               .policy = SuspendOrResume,
                                               .job = Job(InPhase(Phase::kSuspended)),
                                               .verdict = Verdict::kContinue,
                                               .phase = Phase::kPending,
                                               .event_reason = "Resumed",
                                               .event_message = "starting restart attempt 1"},
                                           PolicyCase{.name = "Running_NotItsBusiness",
                                                      .policy = SuspendOrResume,
                                                      .job = Job(InPhase(Phase::kRunning)),
                                                      .pods = Gang(0, AllRunning),
                                                      .verdict = Verdict::kContinue,
                                                      .phase = Phase::kRunning}),
                         testing::PolicyCaseName);

INSTANTIATE_TEST_SUITE_P(EnforceDeadline, LifecyclePolicyTable,
                         ::testing::Values(PolicyCase{.name = "NoDeadline_Continues",
                                                      .policy = EnforceDeadline,
                                                      .job = Job(InPhase(Phase::kRunning)),
                                                      .pods = Gang(0, AllRunning),
                                                      .verdict = Verdict::kContinue,
                                                      .phase = Phase::kRunning},
                                           PolicyCase{
                                               .name = "Passed_FailsAndDeletesThePods",
                                               .policy = EnforceDeadline,
                                               .job = WithDeadline(60),
                                               .pods = Gang(0, AllRunning),
                                               .verdict = Verdict::kDecided,
                                               .phase = Phase::kFailed,
                                               .deletes = 4,
                                               .event_reason = "DeadlineExceeded",
                                               .event_message = "activeDeadlineSeconds (60)"},
                                           PolicyCase{.name = "Ahead_LooksAgainWhenDue",
                                                      .policy = EnforceDeadline,
                                                      .job = WithDeadline(7200),
                                                      .pods = Gang(0, AllRunning),
                                                      .verdict = Verdict::kContinue,
                                                      .phase = Phase::kRunning,
                                                      .requeue = absl::Hours(1)}),
                         testing::PolicyCaseName);

TEST(CheckSpec, TheSameProblemTwice_OneEventAndTheConditionKeepsItsTime) {
  DistributedJob job = Job(nullptr, JobBuilder().Spec("replicas", 0).Build());
  DecisionPass first(job, {}, kNow, {});
  ASSERT_EQ(CheckSpec(first), Verdict::kDecided);
  ASSERT_EQ(first.decision.events.size(), 1u);
  job.status = first.decision.status;
  DecisionPass second(job, {}, kNow + absl::Minutes(1), {});
  ASSERT_EQ(CheckSpec(second), Verdict::kDecided);
  EXPECT_TRUE(second.decision.events.empty());
  const Condition* c = FindCondition(second.decision.status.conditions, condition::kSpecValid);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->last_transition_time, FormatRfc3339(kNow));
}

}  // namespace
}  // namespace cohort::op
