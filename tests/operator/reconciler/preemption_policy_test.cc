// The preemption policy (preemption_policy.h), run alone: what counts as a preemption, which pod
// it names, and a failure rule about the pod the cluster took.
#include "operator/reconciler/preemption_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using testing::AllRunning;
using testing::CheckPolicyCase;
using testing::Gang;
using testing::InPhase;
using testing::Job;
using testing::JobBuilder;
using testing::PodBuilder;
using testing::PolicyCase;

DistributedJob RunningWithRules(nlohmann::json rules) {
  return Job(InPhase(Phase::kRunning),
             JobBuilder().Spec("failurePolicy", {{"rules", std::move(rules)}}).Build());
}

class PreemptionPolicyTable : public ::testing::TestWithParam<PolicyCase> {};
TEST_P(PreemptionPolicyTable, Row) { CheckPolicyCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    HandlePreemption, PreemptionPolicyTable,
    ::testing::Values(
        PolicyCase{.name = "NothingTaken_Continues",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0, AllRunning),
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kRunning},
        PolicyCase{.name = "Evicted_UncountedRestart",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0,
                                [](int r, PodBuilder& p) {
                                  if (r == 0) p.Evicted();
                                }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 3,
                   .event_reason = "Preempted",
                   .event_message = "rank 0 (pod train-0) was preempted or evicted",
                   .requeue = absl::Seconds(10),
                   .preemptions = 1},
        PolicyCase{.name = "DeletedBySomeoneElse_Preemption",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0,
                                [](int r, PodBuilder& p) {
                                  if (r == 1) p.Terminating();
                                }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 3,
                   .event_reason = "Preempted",
                   .event_message = "rank 1",
                   .requeue = absl::Seconds(10),
                   .preemptions = 1},
        PolicyCase{.name = "EvictedBeforeTheRanksThatCheckpointed_TheEvictedNamed",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0,
                                [](int r, PodBuilder& p) {
                                  if (r == 2)
                                    p.Evicted();
                                  else
                                    p.Exited(kPreemptedExitCode);
                                }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 3,
                   .event_reason = "Preempted",
                   .event_message = "rank 2 (pod train-2)",
                   .requeue = absl::Seconds(10),
                   .preemptions = 1},
        PolicyCase{.name = "CheckpointedAndExited76_Preemption",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0, [](int, PodBuilder& p) { p.Exited(kPreemptedExitCode); }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 4,
                   .event_reason = "Preempted",
                   .event_message = "rank 0",
                   .requeue = absl::Seconds(10),
                   .preemptions = 1},
        PolicyCase{.name = "CheckpointedButOneCrashed_LeftToHandleFailure",
                   .policy = HandlePreemption,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Gang(0,
                                [](int r, PodBuilder& p) {
                                  if (r == 1)
                                    p.Exited(1);
                                  else
                                    p.Exited(kPreemptedExitCode);
                                }),
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kRunning},
        PolicyCase{
            .name = "PodVanishedWhileRunning_Preemption",
            .policy = HandlePreemption,
            .job = Job(InPhase(Phase::kRunning)),
            .pods = {PodBuilder(0).Running(), PodBuilder(1).Running(), PodBuilder(3).Running()},
            .verdict = Verdict::kDecided,
            .phase = Phase::kRestarting,
            .deletes = 3,
            .event_reason = "Preempted",
            .event_message = "rank 2 (pod train-2) was deleted",
            .requeue = absl::Seconds(10),
            .preemptions = 1},
        PolicyCase{.name = "PodMissingWhilePending_BeingCreatedNotPreempted",
                   .policy = HandlePreemption,
                   .job = Job(),
                   .pods = {PodBuilder(0).Running()},
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kPending},
        PolicyCase{
            .name = "EvictedUnderADisruptionTargetFailJobRule_Fails",
            .policy = HandlePreemption,
            .job = RunningWithRules({{{"action", "FailJob"},
                                      {"onPodConditions", {{{"type", "DisruptionTarget"}}}}}}),
            .pods = Gang(0,
                         [](int r, PodBuilder& p) {
                           if (r == 1) p.Evicted();
                         }),
            .verdict = Verdict::kDecided,
            .phase = Phase::kFailed,
            .deletes = 3,
            .event_reason = "FailurePolicy",
            .event_message = "rule 0 (FailJob"}),
    testing::PolicyCaseName);

}  // namespace
}  // namespace cohort::op
