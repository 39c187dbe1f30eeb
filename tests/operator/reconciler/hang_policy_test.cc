// Hung ranks (hang_policy.h): what the job's attempt hub says of a hang becomes the Hung
// condition, one HangDetected Event per hang, and what spec.hangPolicy asks: nothing more
// (Alert), a failed job or a counted restart in place (Fail, Restart) once the stacks are dumped
// (the hub says so); failure rules see the hung rank as ended with reason Hung.

#include "operator/reconciler/hang_policy.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/in_place_policy.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using testing::AllRunning;
using testing::Gang;
using ::testing::HasSubstr;
using testing::InPhase;
using ::testing::IsEmpty;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;

const char kMessage[] =
    "rank 1 (pod train-1, local 0): train.py:40 in <module>: time.sleep(1e9); ranks 0, 2-3: "
    "all_reduce at "
    "train.py:35";

// A running job that restarts in place (its trainer has a command), with spec.hangPolicy `policy`
// ("" for the default) and these failure rules.
DistributedJob HangJob(const std::string& policy = "", json rules = nullptr,
                       int32_t restart_attempt = 0) {
  JobBuilder b;
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        json::array({"python", "train.py"}));
  if (!policy.empty()) b.Spec("hangPolicy", policy);
  if (!rules.is_null()) b.Spec("failurePolicy", {{"rules", std::move(rules)}});
  DistributedJob job = Job(InPhase(Phase::kRunning, restart_attempt), b.Build());
  EXPECT_THAT(Validate(job), IsEmpty());
  return job;
}

// The hub's view of attempt `attempt` with every pod following it and rank 1 hung (hang `id`,
// detected `ago`), the others waiting in an all_reduce; `dumps`: every pod dumped its stacks.
AttemptView HungView(uint64_t id = 7, absl::Duration ago = absl::Seconds(5), bool dumps = false,
                     int32_t attempt = 0) {
  AttemptView v;
  v.attempt = attempt;
  v.connected = true;
  v.following = {0, 1, 2, 3};
  v.followed = v.following;
  AttemptView::Hang h;
  h.id = id;
  h.attempt = attempt;
  h.detected_at = kNow - ago;
  h.outliers = {{1, 1, 0, "train.py:40 in <module>: time.sleep(1e9)"}};
  h.groups = {{{3, 0, 2}, "all_reduce at train.py:35"}};
  h.dumps_complete = dumps;
  h.pods_dumped = dumps ? 4 : 2;
  h.pods_total = 4;
  h.dumps_dir = "/run/cohort/dumps/attempt-0";
  v.hang = std::move(h);
  return v;
}

AttemptView Cleared(int32_t attempt = 0) {
  AttemptView v = HungView(7, absl::Seconds(5), false, attempt);
  v.hang.reset();
  return v;
}

struct Result {
  Verdict verdict;
  Decision decision;
};

// HandleHang alone on the job's running gang, as Decide() would see it (the hub's view on the
// pods).
Result RunAlone(const DistributedJob& job, const AttemptView& view, absl::Time now = kNow) {
  std::vector<ObservedPod> pods = Gang(job.status.restart_attempt, AllRunning);
  ApplyAttemptView(view, pods);
  DecisionPass pass(job, pods, now, DecideOptions{}, &view);
  Verdict verdict = HandleHang(pass);
  return {verdict, std::move(pass.decision)};
}

// Decide() on the job's running gang with the hub's `view`.
Decision DecideWith(const DistributedJob& job, const AttemptView& view, absl::Time now = kNow) {
  return Decide(job, Gang(job.status.restart_attempt, AllRunning), now, DecideOptions{}, &view);
}

std::vector<std::string> Reasons(const Decision& d) {
  std::vector<std::string> out;
  for (const Event& e : d.events) out.push_back(e.reason);
  return out;
}

TEST(RankRanges, ConsecutiveRanksAsRanges_Capped) {
  EXPECT_EQ(RankRanges({7, 0, 1, 2, 3, 4, 6}), "0-4, 6-7");
  EXPECT_EQ(RankRanges({5}), "5");
  EXPECT_EQ(RankRanges({2, 2, 3}), "2-3");
  std::vector<int32_t> odd;
  for (int32_t r = 1; r < 40; r += 2) odd.push_back(r);
  EXPECT_EQ(RankRanges(odd), "1, 3, 5, 7, 9, 11, 13, 15 and 12 more");
}

TEST(HangMessage, LongListsCutToOneReadableLine) {
  DistributedJob job = HangJob();
  AttemptView view = HungView();
  AttemptView::Hang& h = *view.hang;
  h.outliers.clear();
  for (int32_t r = 0; r < 6; ++r) h.outliers.push_back({r, r % 4, 0, std::string(300, 'x')});
  h.groups.assign(9, {{0}, "wait"});
  std::vector<ObservedPod> pods = Gang(0, AllRunning);
  DecisionPass pass(job, pods, kNow, DecideOptions{}, &view);
  const std::string message = HangMessage(pass, h);
  EXPECT_THAT(message, HasSubstr("and 3 more hung ranks"));
  EXPECT_LE(message.size(), 1024u);
}

TEST(HandleHang, ConditionAndOneEventPerHang) {
  DistributedJob job = HangJob("Alert");
  Result first = RunAlone(job, HungView(7));
  EXPECT_EQ(first.verdict, Verdict::kContinue);
  const Condition* hung = FindCondition(first.decision.status.conditions, "Hung");
  ASSERT_NE(hung, nullptr);
  EXPECT_EQ(hung->status, "True");
  EXPECT_EQ(hung->reason, "HangDetected");
  EXPECT_EQ(hung->message, kMessage);
  EXPECT_EQ(hung->last_transition_time, FormatRfc3339(kNow));
  ASSERT_EQ(first.decision.events.size(), 1u);
  EXPECT_EQ(first.decision.events[0], (Event{"Warning", "HangDetected", kMessage}));
  EXPECT_EQ(first.decision.status.last_hang_id, 7);

  // The next pass, later: the same hang says nothing again, and the condition keeps its time.
  job.status = first.decision.status;
  Result again = RunAlone(job, HungView(7), kNow + absl::Seconds(20));
  EXPECT_THAT(again.decision.events, IsEmpty());
  EXPECT_EQ(FindCondition(again.decision.status.conditions, "Hung")->last_transition_time,
            FormatRfc3339(kNow));

  // A new hang of the same attempt (the ranks moved, then stopped again) is told again.
  job.status = again.decision.status;
  Result next = RunAlone(job, HungView(8), kNow + absl::Seconds(40));
  EXPECT_THAT(Reasons(next.decision), ::testing::ElementsAre("HangDetected"));
  EXPECT_EQ(next.decision.status.last_hang_id, 8);
}

TEST(HandleHang, Alert_TheJobKeepsRunning) {
  Decision d = DecideWith(HangJob("Alert"), HungView(7, absl::Minutes(5), true));
  EXPECT_EQ(d.status.phase, Phase::kRunning);
  EXPECT_FALSE(d.restart.has_value());
  EXPECT_THAT(d.delete_pods, IsEmpty());
  EXPECT_EQ(d.start_attempt, std::nullopt);
  EXPECT_EQ(FindCondition(d.status.conditions, "Hung")->status, "True");
  EXPECT_THAT(Reasons(d), ::testing::ElementsAre("HangDetected"));
}

TEST(HandleHang, FailAndRestart_WaitForTheHubToSayTheEvidenceIsComplete) {
  for (const char* policy : {"Fail", "Restart"}) {
    SCOPED_TRACE(policy);
    // The hub calls the evidence complete (every pod's stacks, or what came within its one wait):
    // no clock of the operator's own decides, however long ago the hang was found.
    for (absl::Duration ago : {absl::Seconds(10), absl::Minutes(5)}) {
      Result waiting = RunAlone(HangJob(policy), HungView(7, ago));
      EXPECT_EQ(waiting.verdict, Verdict::kDecided);
      EXPECT_EQ(waiting.decision.status.phase, Phase::kRunning);
      EXPECT_FALSE(waiting.decision.requeue_after.has_value()) << "the hub's next state says";
      EXPECT_FALSE(waiting.decision.restart.has_value());
      EXPECT_THAT(waiting.decision.delete_pods, IsEmpty());
      EXPECT_EQ(FindCondition(waiting.decision.status.conditions, "Hung")->status, "True");
    }
    // Every pod's stacks are in (or the hub stopped waiting for them): it acts.
    Result dumped = RunAlone(HangJob(policy), HungView(7, absl::Seconds(10), /*dumps=*/true));
    EXPECT_NE(dumped.decision.status.phase, Phase::kRunning);
    // The hub is gone: nobody will say more, and it acts with what there is.
    AttemptView gone = HungView(7, absl::Seconds(10));
    gone.connected = false;
    Result late = RunAlone(HangJob(policy), gone);
    EXPECT_NE(late.decision.status.phase, Phase::kRunning);
  }
}

TEST(HandleHang, Fail_TheJobFailsWithReasonHung) {
  Result r = RunAlone(HangJob("Fail"), HungView(7, absl::Seconds(31), /*dumps=*/true));
  EXPECT_EQ(r.verdict, Verdict::kDecided);
  EXPECT_EQ(r.decision.status.phase, Phase::kFailed);
  EXPECT_EQ(r.decision.delete_pods.size(), 4u);
  EXPECT_FALSE(r.decision.restart.has_value());
  const Condition* failed = FindCondition(r.decision.status.conditions, "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "Hung");
  EXPECT_THAT(failed->message, HasSubstr(kMessage));
  EXPECT_THAT(Reasons(r.decision), ::testing::ElementsAre("HangDetected", "Hung"));
  EXPECT_THAT(r.decision.events[1].message, HasSubstr("spec.hangPolicy is Fail: the job fails"));
}

TEST(HandleHang, Restart_InPlaceCountedWithCauseHung) {
  // The default policy.
  Decision d = DecideWith(HangJob(), HungView(7, absl::Seconds(12), true));
  EXPECT_EQ(d.status.phase, Phase::kRestarting);
  EXPECT_EQ(d.status.restarts, 1);
  EXPECT_EQ(d.status.restart_attempt, 1);
  EXPECT_EQ(d.status.last_restart_strategy, "InPlace");
  EXPECT_THAT(d.delete_pods, IsEmpty());
  ASSERT_TRUE(d.restart.has_value());
  EXPECT_STREQ(d.restart->cause_label(), "hung");
  EXPECT_EQ(d.restart->failed_at, kNow - absl::Seconds(12));
  EXPECT_TRUE(d.restart->in_place);
  EXPECT_EQ(FindCondition(d.status.conditions, "Restarting")->reason, "Hung");
  EXPECT_THAT(Reasons(d), ::testing::ElementsAre("HangDetected", "RestartedInPlace"));
  EXPECT_THAT(d.events[1].message, HasSubstr(absl::StrCat("the job hung: ", kMessage)));
  EXPECT_THAT(d.events[1].message, HasSubstr("restart 1 of 3"));
}

TEST(HandleHang, Restart_NoRestartsLeft_Fails) {
  DistributedJob job = HangJob("Restart");
  job.status.restarts = 3;
  Result r = RunAlone(job, HungView(7, absl::Seconds(5), true));
  EXPECT_EQ(r.decision.status.phase, Phase::kFailed);
  EXPECT_EQ(FindCondition(r.decision.status.conditions, "Failed")->reason, "MaxRestartsExceeded");
}

TEST(HandleHang, Restart_FailureRuleOnTerminationReasonHung_Decides) {
  const json fail_on_hung = {{"action", "FailJob"}, {"onTerminationReasons", {"Hung"}}};
  Result failed = RunAlone(HangJob("Restart", {fail_on_hung}), HungView(7, absl::Seconds(5), true));
  EXPECT_EQ(failed.decision.status.phase, Phase::kFailed);
  EXPECT_EQ(failed.decision.delete_pods.size(), 4u);
  const Condition* condition = FindCondition(failed.decision.status.conditions, "Failed");
  ASSERT_NE(condition, nullptr);
  EXPECT_EQ(condition->reason, "FailurePolicy");
  EXPECT_THAT(condition->message, HasSubstr("rule 0 (FailJob, reason Hung of container trainer)"));

  // Not counted against maxRestarts, by a rule.
  const json uncounted = {{"action", "RestartJobAndIgnoreMaxRestarts"},
                          {"onTerminationReasons", {"Hung"}}};
  Result restarted = RunAlone(HangJob("Restart", {uncounted}), HungView(7, absl::Seconds(5), true));
  EXPECT_EQ(restarted.decision.status.phase, Phase::kRestarting);
  EXPECT_EQ(restarted.decision.status.restarts, 0);
  EXPECT_EQ(restarted.decision.status.uncounted_restarts, 1);
  EXPECT_STREQ(restarted.decision.restart->cause_label(), "hung");

  // A rule on exit codes does not match a hang: it has none.
  const json on_codes = {{"action", "FailJob"},
                         {"onExitCodes", {{"operator", "NotIn"}, {"values", {0}}}}};
  Result counted = RunAlone(HangJob("Restart", {on_codes}), HungView(7, absl::Seconds(5), true));
  EXPECT_EQ(counted.decision.status.phase, Phase::kRestarting);
  EXPECT_EQ(counted.decision.status.restarts, 1);
}

TEST(HandleHang, HangCleared_HungFalseRecovered) {
  DistributedJob job = HangJob("Alert");
  job.status = RunAlone(job, HungView(7)).decision.status;
  Result r = RunAlone(job, Cleared(), kNow + absl::Minutes(1));
  EXPECT_EQ(r.verdict, Verdict::kContinue);
  const Condition* hung = FindCondition(r.decision.status.conditions, "Hung");
  ASSERT_NE(hung, nullptr);
  EXPECT_EQ(hung->status, "False");
  EXPECT_EQ(hung->reason, "Recovered");
  EXPECT_EQ(hung->last_transition_time, FormatRfc3339(kNow + absl::Minutes(1)));
  EXPECT_THAT(r.decision.events, IsEmpty());
}

TEST(HandleHang, NextAttemptRuns_HungFalse) {
  // Restarted for the hang; the hub still reports attempt 0's hang while attempt 1 starts.
  Decision restarted = DecideWith(HangJob(), HungView(7, absl::Seconds(5), true));
  ASSERT_EQ(restarted.status.phase, Phase::kRestarting);
  DistributedJob job = HangJob();
  job.status = restarted.status;
  job.status.phase = Phase::kPending;  // The backoff passed and attempt 1 was ordered.
  AttemptView view = HungView(7, absl::Seconds(40), true, /*attempt=*/1);
  view.hang->attempt = 0;
  Decision running =
      Decide(job, Gang(0, AllRunning), kNow + absl::Minutes(1), DecideOptions{}, &view);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  const Condition* hung = FindCondition(running.status.conditions, "Hung");
  ASSERT_NE(hung, nullptr);
  EXPECT_EQ(hung->status, "False");
  EXPECT_EQ(hung->reason, "Recovered");
}

TEST(HandleHang, HubNotHeardButALaterAttemptRuns_HungFalse) {
  // Restarted for the hang by recreating the pods; the new hub is not heard from, the new
  // attempt runs (Running turned True after Hung did).
  DistributedJob job = HangJob("Alert");
  job.status = RunAlone(job, HungView(7)).decision.status;
  job.status.restart_attempt = 1;
  SetCondition(job.status.conditions, Condition{"Running", "True", "AllRanksRunning", "",
                                                FormatRfc3339(kNow + absl::Minutes(2)), 1});
  AttemptView silent;
  silent.heard = false;
  std::vector<ObservedPod> pods = Gang(1, AllRunning);
  DecisionPass pass(job, pods, kNow + absl::Minutes(3), DecideOptions{}, &silent);
  EXPECT_EQ(HandleHang(pass), Verdict::kContinue);
  EXPECT_EQ(FindCondition(pass.decision.status.conditions, "Hung")->status, "False");
  DecisionPass without_view(job, pods, kNow + absl::Minutes(3), DecideOptions{});
  HandleHang(without_view);
  EXPECT_EQ(FindCondition(without_view.decision.status.conditions, "Hung")->reason, "Recovered");
}

TEST(HandleHang, NoHangOrHubNotHeard_NoConditionAndNothingChanges) {
  Result quiet = RunAlone(HangJob(), Cleared());
  EXPECT_EQ(quiet.verdict, Verdict::kContinue);
  EXPECT_EQ(FindCondition(quiet.decision.status.conditions, "Hung"), nullptr);

  // Hung, then the operator restarted: the hub not heard yet says nothing either way.
  DistributedJob job = HangJob("Alert");
  job.status = RunAlone(job, HungView(7)).decision.status;
  AttemptView silent;
  silent.heard = false;
  silent.watching_since = kNow;
  std::vector<ObservedPod> pods = Gang(0, AllRunning);
  DecisionPass pass(job, pods, kNow, DecideOptions{}, &silent);
  EXPECT_EQ(HandleHang(pass), Verdict::kContinue);
  EXPECT_EQ(FindCondition(pass.decision.status.conditions, "Hung")->status, "True");
  EXPECT_THAT(pass.decision.events, IsEmpty());
}

}  // namespace
}  // namespace cohort::op
