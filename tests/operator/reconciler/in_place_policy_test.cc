// Restarting in place: what the job's attempt hub says, put on the pods, and what Decide() does
// with it (in_place_policy.h), as a table.

#include "operator/reconciler/in_place_policy.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/reconciler/conditions.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using testing::AllRunning;
using testing::Gang;
using ::testing::HasSubstr;
using testing::InPhase;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;
using testing::PodBuilder;

// A job that restarts in place (a trainer with a command), in `phase` of `attempt`; after an
// in-place restart when `after_in_place`.
DistributedJob InPlaceJob(Phase phase, int32_t attempt = 0, bool after_in_place = false,
                          const std::string& strategy = "InPlace",
                          absl::Duration ago = absl::Minutes(1)) {
  JobBuilder b;
  b.Spec("restartStrategy", strategy);
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        nlohmann::json::array({"python", "train.py"}));
  return Job(
      [&](DistributedJob& j) {
        InPhase(phase, attempt, ago)(j);
        if (after_in_place) j.status.last_restart_strategy = "InPlace";
      },
      b.Build());
}

// The hub's view: the pods run `attempt`; `ends` lists (pod, exit code).
AttemptView View(int32_t attempt, std::vector<std::pair<int32_t, int>> ends = {}) {
  AttemptView v;
  v.attempt = attempt;
  v.connected = true;
  v.following = {0, 1, 2, 3};
  v.followed = v.following;
  for (auto [pod, code] : ends)
    v.ends[pod] = AttemptView::End{code, "Error", "the last line", kNow};
  return v;
}

// Watched, nothing heard yet, since `ago` before kNow.
AttemptView Silent(absl::Duration ago) {
  AttemptView v;
  v.heard = false;
  v.watching_since = kNow - ago;
  return v;
}

// `v` with pod `pod`'s sidecar not following the hub now, after it did (StoppedFollowing) or
// without ever having followed it (NeverFollowed).
AttemptView StoppedFollowing(AttemptView v, int32_t pod) {
  v.following.erase(pod);
  return v;
}
AttemptView NeverFollowed(AttemptView v, int32_t pod) {
  v.following.erase(pod);
  v.followed.erase(pod);
  return v;
}

struct Case {
  std::string name;
  DistributedJob job;
  std::vector<ObservedPod> pods;
  std::optional<AttemptView> view;
  Phase phase;
  size_t deletes;
  int32_t restart_attempt;
  std::optional<int32_t> start_attempt;
  std::string strategy;      // status.lastRestartStrategy after the pass.
  std::string event_reason;  // Of the first Event ("" for none).
  std::string event_message;
  std::vector<int32_t> replace_ranks = {};  // Pods created alone, beside those that stay.
};

class InPlaceTest : public ::testing::TestWithParam<Case> {};

TEST_P(InPlaceTest, Table) {
  const Case& c = GetParam();
  Decision d = Decide(c.job, c.pods, kNow, DecideOptions{}, c.view ? &*c.view : nullptr);
  EXPECT_EQ(std::string(PhaseName(d.status.phase)), PhaseName(c.phase));
  EXPECT_EQ(d.delete_pods.size(), c.deletes);
  EXPECT_TRUE(d.create_ranks.empty());
  EXPECT_EQ(d.replace_ranks, c.replace_ranks);
  EXPECT_EQ(d.status.restart_attempt, c.restart_attempt);
  EXPECT_EQ(d.start_attempt, c.start_attempt);
  EXPECT_EQ(d.status.last_restart_strategy, c.strategy);
  if (c.event_reason.empty()) {
    EXPECT_TRUE(d.events.empty()) << d.events[0].reason << ": " << d.events[0].message;
  } else {
    ASSERT_FALSE(d.events.empty());
    EXPECT_EQ(d.events[0].reason, c.event_reason);
    EXPECT_THAT(d.events[0].message, HasSubstr(c.event_message));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Decide, InPlaceTest,
    ::testing::Values(
        Case{"ProcessKilled_RestartsInPlace_NoPodDeleted", InPlaceJob(Phase::kRunning), Gang(0, AllRunning),
             View(0, {{2, 137}, {0, 75}, {1, 75}, {3, 75}}), Phase::kRestarting, 0, 1, std::nullopt, "InPlace",
             "RestartedInPlace", "rank 2 (pod train-2) exited with code 137"},
        Case{"OnlyFollowersEnded_WaitsForTheCause", InPlaceJob(Phase::kRunning), Gang(0, AllRunning),
             View(0, {{0, 75}, {1, 75}}), Phase::kRunning, 0, 0, std::nullopt, "", "", ""},
        Case{"HubNeverHeard_RecreatesSayingWhy", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 2) p.Exited(1); }), std::nullopt, Phase::kRestarting, 4, 1,
             std::nullopt, "Recreate", "GangRestart", "rank 2 (pod train-2) exited with code 1"},
        Case{"TrainerContainerEnded_ThatPodReplacedAlone", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 2) p.Exited(1); }), View(0), Phase::kRestarting, 1, 1,
             std::nullopt, "InPlace", "RestartedInPlace",
             "pod train-2 has its trainer container ended: it is replaced alone, every other pod stays"},
        Case{"RankZerosTrainerContainerEnded_Recreates", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 0) p.Exited(1); }), View(0), Phase::kRestarting, 4, 1,
             std::nullopt, "Recreate", "GangRestart", "rank 0 (pod train-0) exited with code 1"},
        Case{"GangScheduled_APodToReplace_Recreates",
             [] {
               DistributedJob j = InPlaceJob(Phase::kRunning);
               j.spec.scheduling.queue_name = "team-a";
               return j;
             }(),
             Gang(0, [](int r, PodBuilder& p) { if (r == 2) p.Exited(1); }), View(0), Phase::kRestarting, 4, 1,
             std::nullopt, "Recreate", "GangRestart", "rank 2 (pod train-2) exited with code 1"},
        Case{"RecreateStrategy_TheHubIsNotAsked", InPlaceJob(Phase::kRunning, 0, false, "Recreate"), Gang(0, AllRunning),
             View(0, {{2, 1}}), Phase::kRunning, 0, 0, std::nullopt, "", "", ""},
        Case{"BackoffOver_OrdersTheNextAttemptFromTheHub", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, AllRunning), View(0, {{0, 75}, {1, 75}, {2, 137}, {3, 76}}), Phase::kPending, 0, 1, 1, "InPlace",
             "", ""},
        Case{"BackoffOver_APodStillEnding_WaitsForItsProcesses", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, AllRunning), View(0, {{0, 75}, {1, 75}, {2, 137}}), Phase::kPending, 0, 1, std::nullopt,
             "InPlace", "", ""},
        Case{"InBackoff_NothingYet", InPlaceJob(Phase::kRestarting, 1, true, "InPlace", absl::Seconds(1)),
             Gang(0, AllRunning),
             View(0), Phase::kRestarting, 0, 1, std::nullopt, "InPlace", "", ""},
        Case{"APodWentWhileWaiting_ReplacedAlone", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, [](int r, PodBuilder& p) { if (r == 3) p.Terminating(); }),
             View(0, {{0, 75}, {1, 75}, {2, 137}}), Phase::kPending, 0, 1, 1, "InPlace", "", "", {3}},
        Case{"RankZerosPodWentWhileWaiting_RecreatesInstead", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, [](int r, PodBuilder& p) { if (r == 0) p.Terminating(); }), View(0), Phase::kPending, 3, 1,
             std::nullopt, "Recreate", "RecreatingGang", "pod train-0 is gone (rank 0's pod hosts"},
        Case{"APodStoppedFollowingAndDidNotEnd_ReplacedAlone", InPlaceJob(Phase::kRunning), Gang(0, AllRunning),
             StoppedFollowing(View(0, {{0, 75}, {1, 75}, {2, 137}}), 3),
             Phase::kRestarting, 1, 1, std::nullopt, "InPlace", "RestartedInPlace",
             "pod train-3 has a sidecar that stopped following the attempt hub"},
        Case{"APodJustStartedFollowsNotYet_RestartsInPlace", InPlaceJob(Phase::kRunning),
             Gang(0, [](int, PodBuilder& p) { p.StartedAt(kNow - absl::Seconds(2)); }),
             NeverFollowed(View(0, {{0, 75}, {1, 75}, {2, 137}}), 3),
             Phase::kRestarting, 0, 1, std::nullopt, "InPlace", "RestartedInPlace",
             "rank 2 (pod train-2) exited with code 137"},
        Case{"APodNeverFollowedWithinPatience_Recreates", InPlaceJob(Phase::kRunning),
             Gang(0, [](int, PodBuilder& p) { p.StartedAt(kNow - absl::Seconds(31)); }),
             NeverFollowed(View(0, {{0, 75}, {1, 75}, {2, 137}}), 3),
             Phase::kRestarting, 1, 1, std::nullopt, "InPlace", "RestartedInPlace",
             "pod train-3 has a sidecar that did not follow the attempt hub within 30s"},
        Case{"BackoffOver_APodFollowsNotYet_WaitsForIt", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, [](int, PodBuilder& p) { p.StartedAt(kNow - absl::Seconds(5)); }),
             NeverFollowed(View(0, {{2, 137}}), 3),
             Phase::kPending, 0, 1, std::nullopt, "InPlace", "", ""},
        Case{"BackoffOver_APodNeverFollowed_RecreatesSayingWhy", InPlaceJob(Phase::kRestarting, 1, true),
             Gang(0, [](int, PodBuilder& p) { p.StartedAt(kNow - absl::Seconds(40)); }),
             NeverFollowed(View(0, {{2, 137}}), 3),
             Phase::kPending, 1, 1, std::nullopt, "InPlace", "ReplacingPod",
             "pod train-3 has a sidecar that did not follow the attempt hub within 30s", {3}},
        Case{"APodThatEndedButFollowsNotYet_RestartsInPlace", InPlaceJob(Phase::kRunning), Gang(0, AllRunning),
             StoppedFollowing(View(0, {{0, 75}, {1, 75}, {2, 137}, {3, 75}}), 3),
             Phase::kRestarting, 0, 1, std::nullopt, "InPlace", "RestartedInPlace",
             "rank 2 (pod train-2) exited with code 137"},
        Case{"NotReadyAndNotEnded_NodeMayBeLost_ReplacedAlone", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 3) p.NotReady(); }),
             View(0, {{0, 75}, {1, 75}, {2, 1}}), Phase::kRestarting, 1, 1, std::nullopt, "InPlace",
             "RestartedInPlace", "pod train-3 is not ready and its processes did not end"},
        Case{"PodEvicted_ReplacedAloneTheOthersStay", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 1) p.Evicted(); }), View(0), Phase::kRestarting, 0, 1,
             std::nullopt, "InPlace", "RestartedInPlace",
             "rank 1 (pod train-1) was preempted or evicted; restarting the gang as restart attempt 1 (preemptions do "
             "not count against maxRestarts); in place: pod train-1 is being deleted: it is replaced alone"},
        Case{"RankZerosPodEvicted_Recreates", InPlaceJob(Phase::kRunning),
             Gang(0, [](int r, PodBuilder& p) { if (r == 0) p.Evicted(); }), View(0), Phase::kRestarting, 3, 1,
             std::nullopt, "Recreate", "Preempted", "rank 0 (pod train-0) was preempted or evicted"},
        Case{"AfterTheAttemptStarted_AMissingRankGetsAReplacement", InPlaceJob(Phase::kPending, 1, true),
             [] {
               std::vector<ObservedPod> pods = Gang(1, AllRunning);
               pods.erase(pods.begin() + 2);  // Its pod went (the old one of attempt 0 is gone).
               return pods;
             }(),
             View(1), Phase::kPending, 0, 1, std::nullopt, "InPlace", "", "", {2}},
        Case{"HubUnreachable_Recreates", InPlaceJob(Phase::kRunning), Gang(0, AllRunning),
             [] {
               AttemptView v = View(0, {{2, 1}});
               v.connected = false;
               return v;
             }(),
             Phase::kRestarting, 4, 1, std::nullopt, "Recreate", "GangRestart", ""},
        Case{"OperatorJustStarted_ThePodsWaitForTheHub", InPlaceJob(Phase::kRunning, 1, true), Gang(0, AllRunning),
             Silent(absl::Seconds(5)), Phase::kRunning, 0, 1, std::nullopt, "InPlace", "", ""},
        Case{"HubSilentTooLong_RecreatesSayingWhy", InPlaceJob(Phase::kRunning, 1, true), Gang(0, AllRunning),
             Silent(absl::Seconds(60)), Phase::kRestarting, 4, 2, std::nullopt, "Recreate", "RecreatingGang",
             "did not answer for 30s"},
        Case{"HubRestartedWithRankZerosSidecar_RecreatesSayingWhy", InPlaceJob(Phase::kRunning, 2, true),
             Gang(0, AllRunning), View(0), Phase::kRestarting, 4, 3, std::nullopt, "Recreate", "RecreatingGang",
             "rank 0's sidecar was restarted"},
        Case{"NextAttemptRunning_RunningAgain", InPlaceJob(Phase::kPending, 1, true), Gang(0, AllRunning),
             View(1), Phase::kRunning, 0, 1, std::nullopt, "InPlace", "Running", "all 4 ranks are running"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Every way back from in place to recreating the pods reads the same (RecreateInstead): a
// RecreatingGang Event that says why and what happens (a gang restarted in the same pass adds why
// it could not restart in place), status.lastRestartStrategy Recreate, and no pod deleted twice in
// the pass.
TEST(RecreateInstead, EveryWayBackReadsTheSame_OneEventNoPodDeletedTwice) {
  struct Way {
    std::string name;
    DistributedJob job;
    std::vector<ObservedPod> pods;
    AttemptView view;
    std::string why;
  };
  const Way ways[] = {
      {"RestartGang: rank 0's trainer ended", InPlaceJob(Phase::kRunning),
       Gang(0,
            [](int r, PodBuilder& p) {
              if (r == 0) p.Exited(1);
            }),
       View(0), "cannot restart in place: pod train-0 has its trainer container ended"},
      {"StartInPlace: rank 0's pod went while the others waited",
       InPlaceJob(Phase::kRestarting, 1, true),
       Gang(0,
            [](int r, PodBuilder& p) {
              if (r == 0) p.Terminating();
            }),
       View(0), "cannot start restart attempt 1 in place: pod train-0 is gone"},
      {"AwaitHub: the hub lost the attempts", InPlaceJob(Phase::kRunning, 2, true),
       Gang(0, AllRunning), View(0),
       "says attempt 0, not 2: rank 0's sidecar was restarted and lost the job's attempts"},
      {"AwaitHub: the hub is silent", InPlaceJob(Phase::kRunning, 1, true), Gang(0, AllRunning),
       Silent(absl::Seconds(60)), "did not answer for 30s"},
  };
  for (const Way& w : ways) {
    Decision d = Decide(w.job, w.pods, kNow, DecideOptions{}, &w.view);
    std::vector<std::string> recreating;
    for (const Event& e : d.events) {
      if (e.reason == reason::kRecreatingGang) recreating.push_back(e.message);
    }
    ASSERT_FALSE(recreating.empty()) << w.name;
    EXPECT_THAT(recreating[0], HasSubstr(w.why)) << w.name;
    EXPECT_THAT(recreating,
                ::testing::Each(::testing::EndsWith("; deleting and creating every pod instead")))
        << w.name;
    EXPECT_EQ(d.status.last_restart_strategy, "Recreate") << w.name;
    EXPECT_FALSE(d.delete_pods.empty()) << w.name;
    const std::set<std::string> once(d.delete_pods.begin(), d.delete_pods.end());
    EXPECT_EQ(once.size(), d.delete_pods.size())
        << w.name << ": " << ::testing::PrintToString(d.delete_pods);
  }
}

// The pods as the hub describes them.
TEST(ApplyAttemptView, PodsOfTheGangRunTheHubsAttempt_TheirEndsReadAsTheTrainersExit) {
  std::vector<ObservedPod> pods = Gang(0, [](int r, PodBuilder& p) {
    if (r == 1) p.Exited(0);      // Its container ended: not in place any more.
    if (r == 3) p.Terminating();  // Going: not of the gang.
  });
  ObservedPod newer = PodBuilder(0, 5).Running();  // Created for a later attempt: not this hub's.
  pods.push_back(newer);
  AttemptView view = View(2, {{2, 137}});
  view.ends[2].reason = "OOMKilled";
  ApplyAttemptView(view, pods);
  EXPECT_EQ(pods[0].restart_attempt, 2);
  EXPECT_TRUE(pods[0].in_place);
  EXPECT_FALSE(pods[0].trainer_exit_code.has_value());
  EXPECT_EQ(pods[1].restart_attempt, 2);
  EXPECT_FALSE(pods[1].in_place);
  EXPECT_EQ(pods[2].phase, ObservedPod::Phase::kFailed);
  EXPECT_EQ(pods[2].trainer_exit_code, 137);
  EXPECT_EQ(pods[2].trainer_reason, "OOMKilled");
  EXPECT_EQ(pods[2].trainer_message, "the last line");
  EXPECT_EQ(pods[3].restart_attempt, 0);
  EXPECT_FALSE(pods[3].in_place);
  EXPECT_EQ(pods[4].restart_attempt, 5);
}

}  // namespace
}  // namespace cohort::op
