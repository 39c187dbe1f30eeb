// The failure policy: spec.failurePolicy.rules' parsing and validation (each problem names its
// field), which rule matches which pod, the root cause of a failed attempt (HandleFailure, run
// alone), and what Decide() does with a match.

#include "operator/reconciler/failure_policy.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/job_builder.h"
#include "tests/operator/pod_builder.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using testing::CheckPolicyCase;
using ::testing::HasSubstr;
using testing::InPhase;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;
using testing::PodBuilder;
using testing::PolicyCase;

// JobBuilder's job (a trainer and, here, a helper container) with these rules.
DistributedJob JobWithRules(json rules, int max_restarts = 3) {
  absl::StatusOr<DistributedJob> job =
      ParseDistributedJob(JobBuilder()
                              .Set("/spec/template/spec/containers/1"_json_pointer,
                                   {{"name", "helper"}, {"image", "helper:1"}})
                              .Spec("failurePolicy", {{"rules", std::move(rules)}})
                              .Spec("maxRestarts", max_restarts)
                              .Build());
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

std::vector<FailureRule> Rules(json rules) {
  DistributedJob job = JobWithRules(std::move(rules));
  EXPECT_THAT(Validate(job), ::testing::IsEmpty());
  return job.spec.failure_rules;
}

// ---- Matching: a table of (rules, pod) -> the rule that decides --------------------------------

struct MatchCase {
  std::string name;
  json rules;
  ObservedPod pod;
  int index;  // -1: no rule matches.
  std::string matched;
};

class MatchTest : public ::testing::TestWithParam<MatchCase> {};

TEST_P(MatchTest, Table) {
  const MatchCase& c = GetParam();
  std::optional<RuleMatch> m = MatchFailureRules(Rules(c.rules), c.pod);
  if (c.index < 0) {
    EXPECT_FALSE(m.has_value()) << m->Describe();
    return;
  }
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->index, static_cast<size_t>(c.index));
  EXPECT_EQ(m->matched, c.matched);
}

const json kFailOn3 = {{"action", "FailJob"},
                       {"onExitCodes", {{"operator", "In"}, {"values", {3}}}}};
const json kRestartOn4 = {{"action", "RestartJobAndIgnoreMaxRestarts"},
                          {"onExitCodes", {{"operator", "In"}, {"values", {4, 5}}}}};

INSTANTIATE_TEST_SUITE_P(
    Rules, MatchTest,
    ::testing::Values(
        MatchCase{"ExitCodeIn",
                  {kFailOn3},
                  PodBuilder(1).Exited(3),
                  0,
                  "exit code 3 of container trainer"},
        MatchCase{"ExitCodeNotListed", {kFailOn3}, PodBuilder(1).Exited(1), -1, ""},
        MatchCase{
            "FirstMatchWins",
            {kRestartOn4,
             kFailOn3,
             {{"action", "RestartJob"}, {"onExitCodes", {{"operator", "NotIn"}, {"values", {0}}}}}},
            PodBuilder(1).Exited(3),
            1,
            "exit code 3 of container trainer"},
        MatchCase{
            "NotIn",
            {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "NotIn"}, {"values", {1, 2}}}}}},
            PodBuilder(0).Exited(9),
            0,
            "exit code 9 of container trainer"},
        MatchCase{
            "NotInListed",
            {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "NotIn"}, {"values", {1, 2}}}}}},
            PodBuilder(0).Exited(2),
            -1,
            ""},
        // A follower of another rank's failure never matches, even a rule listing 75.
        MatchCase{
            "FollowerNeverMatches",
            {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "In"}, {"values", {75}}}}}},
            PodBuilder(2).Exited(75),
            -1,
            ""},
        MatchCase{"NotTerminatedNoExitCode", {kFailOn3}, PodBuilder(1).Running(), -1, ""},
        MatchCase{
            "NamedContainer",
            {{{"action", "FailJob"},
              {"onExitCodes", {{"containerName", "helper"}, {"operator", "In"}, {"values", {7}}}}}},
            PodBuilder(1).Exited(1).Container("helper", 7),
            0,
            "exit code 7 of container helper"},
        MatchCase{
            "NamedContainerOtherCode",
            {{{"action", "FailJob"},
              {"onExitCodes", {{"containerName", "helper"}, {"operator", "In"}, {"values", {7}}}}}},
            PodBuilder(1).Exited(7).Container("helper", 1),
            -1,
            ""},
        MatchCase{"OomKilledReason",
                  {{{"action", "RestartJob"}, {"onTerminationReasons", {"OOMKilled"}}}},
                  PodBuilder(0).Exited(137).Reason("OOMKilled"),
                  0,
                  "reason OOMKilled of container trainer"},
        MatchCase{"OtherReason",
                  {{{"action", "RestartJob"}, {"onTerminationReasons", {"OOMKilled"}}}},
                  PodBuilder(0).Exited(137),
                  -1,
                  ""},
        MatchCase{"DisruptionTarget",
                  {{{"action", "FailJob"},
                    {"onPodConditions", {{{"type", "DisruptionTarget"}, {"status", "True"}}}}}},
                  PodBuilder(3).Running().Evicted(),
                  0,
                  "condition DisruptionTarget=True"},
        MatchCase{"ConditionStatusDefaultsToTrue",
                  {{{"action", "FailJob"}, {"onPodConditions", {{{"type", "DisruptionTarget"}}}}}},
                  PodBuilder(3).Running().Evicted(),
                  0,
                  "condition DisruptionTarget=True"},
        MatchCase{"ConditionAbsent",
                  {{{"action", "FailJob"}, {"onPodConditions", {{{"type", "DisruptionTarget"}}}}}},
                  PodBuilder(3).Exited(1),
                  -1,
                  ""},
        // Every matcher of a rule must match.
        MatchCase{"AllMatchersOfARule",
                  {{{"action", "FailJob"},
                    {"onExitCodes", {{"operator", "In"}, {"values", {137}}}},
                    {"onTerminationReasons", {"OOMKilled"}}}},
                  PodBuilder(0).Exited(137).Reason("OOMKilled"),
                  0,
                  "exit code 137 of container trainer, reason OOMKilled of container trainer"},
        MatchCase{"OneMatcherMisses",
                  {{{"action", "FailJob"},
                    {"onExitCodes", {{"operator", "In"}, {"values", {137}}}},
                    {"onTerminationReasons", {"OOMKilled"}}}},
                  PodBuilder(0).Exited(137).Reason("Error"),
                  -1,
                  ""}),
    [](const ::testing::TestParamInfo<MatchCase>& info) { return info.param.name; });

// ---- Parsing and validation ---------------------------------------------------------------

std::string Problems(json rules) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(
      JobBuilder().Spec("failurePolicy", {{"rules", std::move(rules)}}).Build());
  EXPECT_TRUE(job.ok());
  std::string out;
  for (const std::string& e : Validate(*job)) out += e + "\n";
  return out;
}

TEST(FailureRulesSpec, EachProblemNamesItsField) {
  EXPECT_THAT(
      Problems({{{"action", "Explode"}, {"onExitCodes", {{"operator", "In"}, {"values", {1}}}}}}),
      HasSubstr("spec.failurePolicy.rules[0].action: 'Explode' is not an action; write FailJob, "
                "RestartJob or RestartJobAndIgnoreMaxRestarts"));
  EXPECT_THAT(Problems({{{"onExitCodes", {{"operator", "In"}, {"values", {1}}}}}}),
              HasSubstr("spec.failurePolicy.rules[0].action: required"));
  EXPECT_THAT(Problems({kFailOn3, {{"action", "FailJob"}}}),
              HasSubstr("spec.failurePolicy.rules[1]: needs a matcher"));
  EXPECT_THAT(Problems({{{"action", "FailJob"},
                         {"onExitCodes", {{"operator", "Maybe"}, {"values", {1}}}}}}),
              HasSubstr("spec.failurePolicy.rules[0].onExitCodes.operator: 'Maybe' is not an "
                        "operator; write In or NotIn"));
  EXPECT_THAT(
      Problems({{{"action", "FailJob"},
                 {"onExitCodes", {{"operator", "In"}, {"values", json::array()}}}}}),
      HasSubstr(
          "spec.failurePolicy.rules[0].onExitCodes.values: must list at least one exit code"));
  EXPECT_THAT(
      Problems(
          {{{"action", "FailJob"}, {"onExitCodes", {{"operator", "In"}, {"values", {"3", 300}}}}}}),
      HasSubstr("spec.failurePolicy.rules[0].onExitCodes.values[1]: 300 is not an exit code"));
  EXPECT_THAT(
      Problems(
          {{{"action", "FailJob"},
            {"onExitCodes", {{"containerName", "nope"}, {"operator", "In"}, {"values", {1}}}}}}),
      HasSubstr(
          "spec.failurePolicy.rules[0].onExitCodes.containerName: 'nope' is not a container"));
  EXPECT_THAT(
      Problems({{{"action", "FailJob"},
                 {"onPodConditions", {{{"type", "DisruptionTarget"}, {"status", "yes"}}}}}}),
      HasSubstr(
          "spec.failurePolicy.rules[0].onPodConditions[0].status: must be True, False or Unknown"));
  EXPECT_THAT(Problems({{{"action", "FailJob"}, {"onTerminationReasons", {3}}}}),
              HasSubstr("spec.failurePolicy.rules[0].onTerminationReasons[0]: 3 is not a reason"));
  EXPECT_THAT(Problems("everything"), HasSubstr("spec.failurePolicy.rules: expected a list"));
  EXPECT_THAT(Problems({kFailOn3, kRestartOn4}), ::testing::IsEmpty());
}

// ---- What Decide() does with a match --------------------------------------------------------

// The 4 pods of a running gang of JobBuilder's job, `failure` applied to rank `exit_rank`.
std::vector<ObservedPod> Gang(int exit_rank, std::function<void(PodBuilder&)> failure) {
  std::vector<ObservedPod> pods;
  for (int r = 0; r < 4; ++r) {
    PodBuilder p(r);
    p.Running();
    if (r == exit_rank) failure(p);
    pods.push_back(p);
  }
  return pods;
}

DistributedJob Running(DistributedJob job) {
  job.status.phase = Phase::kRunning;
  job.status.start_time = FormatRfc3339(kNow - absl::Hours(1));
  return job;
}

TEST(FailureRulesDecide, FailJobFailsAtOnceNamingTheRuleRankAndCode) {
  Decision d =
      Decide(Running(JobWithRules({kFailOn3})), Gang(1, [](PodBuilder& p) { p.Exited(3); }), kNow);
  EXPECT_EQ(d.status.phase, Phase::kFailed);
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_EQ(d.delete_pods.size(), 4u);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].reason, "FailurePolicy");
  EXPECT_THAT(d.events[0].message, HasSubstr("rank 1 (pod train-1) exited with code 3"));
  EXPECT_THAT(d.events[0].message, HasSubstr("rule 0 (FailJob, exit code 3 of container trainer)"));
  const Condition* failed = FindCondition(d.status.conditions, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "FailurePolicy");
}

TEST(FailureRulesDecide, WithoutAMatchingRuleTheDefaultRestartsCounted) {
  Decision d =
      Decide(Running(JobWithRules({kFailOn3})), Gang(1, [](PodBuilder& p) { p.Exited(1); }), kNow);
  EXPECT_EQ(d.status.phase, Phase::kRestarting);
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.uncounted_restarts, 0);
  EXPECT_EQ(d.status.last_restart_kind, "Failure");
}

TEST(FailureRulesDecide, IgnoreMaxRestartsRestartsEvenWithMaxRestartsZero) {
  Decision d = Decide(Running(JobWithRules({kRestartOn4}, /*max_restarts=*/0)),
                      Gang(0, [](PodBuilder& p) { p.Exited(4); }), kNow);
  EXPECT_EQ(d.status.phase, Phase::kRestarting);
  EXPECT_EQ(d.status.restarts, 0);
  EXPECT_EQ(d.status.uncounted_restarts, 1);
  EXPECT_EQ(d.status.restart_attempt, 1);
  EXPECT_EQ(d.status.last_restart_kind, "UncountedFailure");
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_THAT(d.events[0].message,
              HasSubstr("rule 0 (RestartJobAndIgnoreMaxRestarts, exit code 4"));
  EXPECT_THAT(d.events[0].message, HasSubstr("not counted against maxRestarts"));
  // Its backoff is the first restart's, not one that grows with the count: with 3 counted
  // restarts before, a counted one would wait 4x as long.
  DistributedJob next = JobWithRules({kRestartOn4}, 0);
  next.status = d.status;
  next.status.restarts = 3;
  Decision later = Decide(next, {}, kNow + next.spec.restart_backoff);
  EXPECT_EQ(later.status.phase, Phase::kPending);
  EXPECT_EQ(later.create_ranks.size(), 4u);
}

TEST(FailureRulesDecide, RestartJobOnAnEvictionCountsIt) {
  json rule = {{"action", "RestartJob"}, {"onPodConditions", {{{"type", "DisruptionTarget"}}}}};
  Decision d =
      Decide(Running(JobWithRules({rule}, 1)), Gang(1, [](PodBuilder& p) { p.Evicted(); }), kNow);
  EXPECT_EQ(d.status.phase, Phase::kRestarting);
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.preemptions, 0);
  // The same eviction without the rule is a preemption, not counted.
  Decision plain = Decide(Running(JobWithRules({kFailOn3}, 1)),
                          Gang(1, [](PodBuilder& p) { p.Evicted(); }), kNow);
  EXPECT_EQ(plain.status.restarts, 0);
  EXPECT_EQ(plain.status.preemptions, 1);
  EXPECT_EQ(plain.status.last_restart_kind, "Preemption");
}

TEST(FailureRulesDecide, RestartJobAtMaxRestartsFails) {
  json rule = {{"action", "RestartJob"}, {"onTerminationReasons", {"OOMKilled"}}};
  DistributedJob job = Running(JobWithRules({rule}, 1));
  job.status.restarts = 1;
  Decision d = Decide(job, Gang(0, [](PodBuilder& p) { p.Exited(137).Reason("OOMKilled"); }), kNow);
  EXPECT_EQ(d.status.phase, Phase::kFailed);
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].reason, "MaxRestartsExceeded");
  EXPECT_THAT(d.events[0].message,
              HasSubstr("rule 0 (RestartJob, reason OOMKilled of container trainer)"));
}

TEST(FailureRulesDecide, TheRootCauseMatchesNotTheFollowers) {
  // Rank 0 followed rank 1's failure (exit 75); rank 1 exited 3: the FailJob rule sees rank 1.
  std::vector<ObservedPod> pods = {PodBuilder(0).Exited(75), PodBuilder(1).Exited(3),
                                   PodBuilder(2).Exited(75), PodBuilder(3).Exited(75)};
  Decision d = Decide(Running(JobWithRules({kFailOn3})), pods, kNow);
  EXPECT_EQ(d.status.phase, Phase::kFailed);
  ASSERT_FALSE(d.events.empty());
  EXPECT_THAT(d.events[0].message, HasSubstr("rank 1 (pod train-1) exited with code 3"));
}

// ---- HandleFailure alone: the root cause, the wait for it, maxRestarts ---------------------

// Ranks 1-3 exited 75 (followers) `ago`; rank 0, the cause, not reported yet (or `root`).
std::vector<ObservedPod> Followers(absl::Duration ago,
                                   std::function<void(PodBuilder&)> root = nullptr) {
  return testing::Gang(0, [=](int r, PodBuilder& p) {
    if (r != 0) p.Exited(kPeerFailureExitCode, "rank 0 failed").FinishedAt(kNow - ago);
    if (r == 0 && root) root(p);
  });
}

class HandleFailureTable : public ::testing::TestWithParam<PolicyCase> {};
TEST_P(HandleFailureTable, Row) { CheckPolicyCase(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    HandleFailure, HandleFailureTable,
    ::testing::Values(
        PolicyCase{.name = "NoneFailed_Continues",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = testing::Gang(0, testing::AllRunning),
                   .verdict = Verdict::kContinue,
                   .phase = Phase::kRunning},
        PolicyCase{
            .name = "RootAmongFollowers_CountedRestartNamingIt",
            .policy = HandleFailure,
            .job = Job(InPhase(Phase::kRunning)),
            .pods = Followers(absl::Seconds(1),
                              [](PodBuilder& p) { p.Exited(1, "CUDA error: out of memory"); }),
            .verdict = Verdict::kDecided,
            .phase = Phase::kRestarting,
            .deletes = 4,
            .event_reason = "GangRestart",
            .event_message =
                "rank 0 (pod train-0) exited with code 1: CUDA error: out of memory; restarting "
                "the gang as restart attempt 1 (restart 1 of 3)",
            .requeue = absl::Seconds(10),
            .restarts = 1},
        PolicyCase{.name = "OnlyFollowers_WaitsThreeSecondsForTheCause",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Followers(absl::Seconds(1)),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRunning,
                   .requeue = absl::Seconds(2)},
        PolicyCase{.name = "OnlyFollowersPastTheWait_RestartNamingAFollower",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = Followers(absl::Seconds(3)),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 4,
                   .event_reason = "GangRestart",
                   .event_message = "exited with code 75",
                   .requeue = absl::Seconds(10),
                   .restarts = 1},
        PolicyCase{.name = "OnlyFollowersWithRules_WaitsTenSeconds",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning),
                              JobBuilder().Spec("failurePolicy", {{"rules", {kFailOn3}}}).Build()),
                   .pods = Followers(absl::Seconds(3)),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRunning,
                   .requeue = absl::Seconds(7)},
        // One order for every supervisor (common/exit_codes.h): a crash while the others saved
        // their preemption checkpoint is the cause, and it counts.
        PolicyCase{.name = "CrashAmongPreemptedRanks_CountedRestartNamingTheCrash",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = testing::Gang(0,
                                         [](int r, PodBuilder& p) {
                                           if (r == 2)
                                             p.Exited(139);
                                           else
                                             p.Exited(kPreemptedExitCode);
                                         }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 4,
                   .event_reason = "GangRestart",
                   .event_message = "rank 2 (pod train-2) exited with code 139",
                   .requeue = absl::Seconds(10),
                   .restarts = 1},
        PolicyCase{.name = "ErrorThenAKill_TheKillIsTheRoot",
                   .policy = HandleFailure,
                   .job = Job(InPhase(Phase::kRunning)),
                   .pods = testing::Gang(0,
                                         [](int r, PodBuilder& p) {
                                           if (r == 1) p.Exited(1);
                                           if (r == 3) p.Exited(137);
                                         }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kRestarting,
                   .deletes = 4,
                   .event_reason = "GangRestart",
                   .event_message = "rank 3 (pod train-3) exited with code 137",
                   .requeue = absl::Seconds(10),
                   .restarts = 1},
        PolicyCase{.name = "NoRestartsLeft_Failed",
                   .policy = HandleFailure,
                   .job = Job([](DistributedJob& j) {
                     InPhase(Phase::kRunning)(j);
                     j.status.restarts = 3;
                   }),
                   .pods = testing::Gang(0,
                                         [](int r, PodBuilder& p) {
                                           if (r == 1) p.Exited(2);
                                         }),
                   .verdict = Verdict::kDecided,
                   .phase = Phase::kFailed,
                   .deletes = 4,
                   .event_reason = "MaxRestartsExceeded",
                   .event_message =
                       "rank 1 (pod train-1) exited with code 2; no restarts left (maxRestarts 3)",
                   .restarts = 3}),
    testing::PolicyCaseName);

}  // namespace
}  // namespace cohort::op
