// The startup policies (startup_policy.h): the backoff after a restart, creating the ranks once
// the old attempt is gone, and Running/Succeeded; each run alone.
#include "operator/reconciler/startup_policy.h"

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
using testing::PodBuilder;
using testing::PolicyCase;

// Restarting for `ago` after a restart of `kind`, with `restarts` counted so far. restartBackoff
// is 10 s: the counted restart number n waits 10 s x 2^(n-1).
DistributedJob Restarting(absl::Duration ago, const char* kind, int32_t restarts) {
  return Job([=](DistributedJob& j) {
    InPhase(Phase::kRestarting, 1, ago)(j);
    j.status.last_restart_kind = kind;
    j.status.restarts = restarts;
  });
}

class StartupPolicyTable : public ::testing::TestWithParam<PolicyCase> {};
TEST_P(StartupPolicyTable, Row) { CheckPolicyCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    EndBackoff, StartupPolicyTable,
    ::testing::Values(PolicyCase{.name = "WithinTheBackoff_Waits",
                                 .policy = EndBackoff,
                                 .job = Restarting(absl::Seconds(3), restart_kind::kFailure, 1),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kRestarting,
                                 .requeue = absl::Seconds(7),
                                 .restarts = 1},
                      PolicyCase{.name = "ThirdCountedRestart_WaitsFortySeconds",
                                 .policy = EndBackoff,
                                 .job = Restarting(absl::Seconds(20), restart_kind::kFailure, 3),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kRestarting,
                                 .requeue = absl::Seconds(20),
                                 .restarts = 3},
                      PolicyCase{.name = "AfterAPreemption_TheFirstBackoffWhateverTheRestarts",
                                 .policy = EndBackoff,
                                 .job = Restarting(absl::Seconds(20), restart_kind::kPreemption, 3),
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kPending,
                                 .restarts = 3},
                      PolicyCase{
                          .name = "AfterAnUncountedRestart_TheFirstBackoff",
                          .policy = EndBackoff,
                          .job = Restarting(absl::Seconds(20), restart_kind::kUncountedFailure, 3),
                          .verdict = Verdict::kContinue,
                          .phase = Phase::kPending,
                          .restarts = 3},
                      PolicyCase{.name = "NotRestarting_Continues",
                                 .policy = EndBackoff,
                                 .job = Job(InPhase(Phase::kRunning)),
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kRunning}),
    testing::PolicyCaseName);

INSTANTIATE_TEST_SUITE_P(
    CreateMissingRanks, StartupPolicyTable,
    ::testing::Values(PolicyCase{.name = "NewJob_EveryRank",
                                 .policy = CreateMissingRanks,
                                 .job = Job(),
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kPending,
                                 .creates = 4,
                                 .event_reason = "Started",
                                 .event_message = "creating 4 pods for restart attempt 0"},
                      PolicyCase{.name = "OneMissing_ThatOneWithoutAnEvent",
                                 .policy = CreateMissingRanks,
                                 .job = Job(),
                                 .pods = {PodBuilder(0).Running(), PodBuilder(1).Running(),
                                          PodBuilder(3).Running()},
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kPending,
                                 .creates = 1},
                      PolicyCase{.name = "OldAttemptStillThere_NothingYet",
                                 .policy = CreateMissingRanks,
                                 .job = Job(InPhase(Phase::kPending, 1)),
                                 .pods = {PodBuilder(0, 0).Terminating()},
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kPending,
                                 .requeue = absl::Seconds(1)},
                      PolicyCase{.name = "Running_NothingCreated",
                                 .policy = CreateMissingRanks,
                                 .job = Job(InPhase(Phase::kRunning)),
                                 .pods = {PodBuilder(0).Running(), PodBuilder(1).Running(),
                                          PodBuilder(3).Running()},
                                 .verdict = Verdict::kContinue,
                                 .phase = Phase::kRunning}),
    testing::PolicyCaseName);

INSTANTIATE_TEST_SUITE_P(
    CompleteOrMarkRunning, StartupPolicyTable,
    ::testing::Values(PolicyCase{.name = "AllRunning_Running",
                                 .policy = CompleteOrMarkRunning,
                                 .job = Job(),
                                 .pods = Gang(0, AllRunning),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kRunning,
                                 .event_reason = "Running",
                                 .event_message = "all 4 ranks are running"},
                      PolicyCase{.name = "OnePending_StaysPending",
                                 .policy = CompleteOrMarkRunning,
                                 .job = Job(),
                                 .pods = Gang(0,
                                              [](int r, PodBuilder& p) {
                                                if (r == 3) p.Pending();
                                              }),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kPending},
                      PolicyCase{.name = "AllSucceeded_Succeeded",
                                 .policy = CompleteOrMarkRunning,
                                 .job = Job(InPhase(Phase::kRunning)),
                                 .pods = Gang(0, [](int, PodBuilder& p) { p.Exited(0); }),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kSucceeded,
                                 .event_reason = "Completed",
                                 .event_message = "all 4 ranks exited successfully"},
                      PolicyCase{.name = "SomeSucceededOthersRunning_StillRunning",
                                 .policy = CompleteOrMarkRunning,
                                 .job = Job(InPhase(Phase::kRunning)),
                                 .pods = Gang(0,
                                              [](int r, PodBuilder& p) {
                                                if (r < 2) p.Exited(0);
                                              }),
                                 .verdict = Verdict::kDecided,
                                 .phase = Phase::kRunning}),
    testing::PolicyCaseName);

}  // namespace
}  // namespace cohort::op
