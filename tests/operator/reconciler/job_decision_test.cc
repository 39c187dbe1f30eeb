#include "operator/reconciler/job_decision.h"

#include <functional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/job_builder.h"
#include "tests/operator/pod_builder.h"
#include "tests/operator/reconciler/decision_fixtures.h"

namespace cohort::op {
namespace {

using testing::AllRunning;
using ::testing::ElementsAre;
using testing::Gang;
using ::testing::HasSubstr;
using testing::InPhase;
using testing::Job;
using testing::JobBuilder;
using testing::kNow;
using testing::PodBuilder;

struct Case {
  std::string name;
  DistributedJob job;
  std::vector<ObservedPod> pods;
  Phase phase;
  size_t creates;
  size_t deletes;
  int32_t restarts;
  int32_t preemptions;
  int32_t restart_attempt;
  std::string event_reason;   // Of the first event; "" for none.
  std::string event_message;  // Substring of it.
};

class DecideTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecideTest, Table) {
  const Case& c = GetParam();
  Decision d = Decide(c.job, c.pods, kNow);
  EXPECT_EQ(PhaseName(d.status.phase), std::string(PhaseName(c.phase)));
  EXPECT_EQ(d.create_ranks.size(), c.creates);
  EXPECT_EQ(d.delete_pods.size(), c.deletes);
  EXPECT_EQ(d.status.restarts, c.restarts);
  EXPECT_EQ(d.status.preemptions, c.preemptions);
  EXPECT_EQ(d.status.restart_attempt, c.restart_attempt);
  if (c.event_reason.empty()) {
    EXPECT_TRUE(d.events.empty()) << d.events[0].reason;
  } else {
    ASSERT_FALSE(d.events.empty());
    EXPECT_EQ(d.events[0].reason, c.event_reason);
    EXPECT_THAT(d.events[0].message, HasSubstr(c.event_message));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Phases, DecideTest,
    ::testing::Values(
        Case{"NewJob_CreatesEveryRank", Job(), {}, Phase::kPending, 4, 0, 0, 0, 0, "Started",
             "creating 4 pods for restart attempt 0"},
        Case{"AllRunning_Running", Job(), Gang(0, AllRunning), Phase::kRunning, 0, 0, 0, 0, 0,
             "Running", "all 4 ranks are running"},
        Case{"SomePending_StaysPendingCreatesNothing", Job(),
             Gang(0, [](int r, PodBuilder& p) { if (r == 3) p.Pending(); }), Phase::kPending, 0, 0,
             0, 0, 0, "", ""},
        Case{"OneMissing_CreatesIt", Job(), {PodBuilder(0).Running(), PodBuilder(1).Running(), PodBuilder(2).Running()},
             Phase::kPending, 1, 0, 0, 0, 0, "", ""},
        Case{"RankFails_GangRestartNamesRootCause", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int r, PodBuilder& p) {
               if (r == 2) p.Exited(1, "CUDA error: out of memory");
               else if (r != 3) p.Exited(75);
             }),
             Phase::kRestarting, 0, 4, 1, 0, 1, "GangRestart",
             "rank 2 (pod train-2) exited with code 1: CUDA error: out of memory"},
        Case{"TwoProcessesPerPod_GangRestartNamesThePodAndItsRanks",
             Job([](DistributedJob& j) {
               InPhase(Phase::kRunning)(j);
               j.spec.processes_per_pod = 2;
               j.spec.pod_template["spec"]["containers"][0]["command"] = nlohmann::json::array({"python"});
             }),
             Gang(0, [](int r, PodBuilder& p) {
               if (r == 1) p.Exited(137, "cohort-launch: exiting with rank 3's status (killed by signal 9)");
               else p.Exited(75);
             }),
             Phase::kRestarting, 0, 4, 1, 0, 1, "GangRestart",
             "pod train-1 (ranks 2-3) exited with code 137 (SIGKILL: killed, or out of memory): "
             "cohort-launch: exiting with rank 3's status (killed by signal 9)"},
        Case{"FollowersBeforeRootInRankOrder_RootStillNamed", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int r, PodBuilder& p) { p.Exited(r == 3 ? 137 : 75); }),
             Phase::kRestarting, 0, 4, 1, 0, 1, "GangRestart", "rank 3 (pod train-3) exited with code 137"},
        Case{"FailureWithNoRestartsLeft_Failed",
             Job([](DistributedJob& j) { InPhase(Phase::kRunning)(j); j.status.restarts = 3; }),
             Gang(0, [](int r, PodBuilder& p) { if (r == 1) p.Exited(2); }), Phase::kFailed, 0, 4, 3,
             0, 0, "MaxRestartsExceeded", "rank 1 (pod train-1) exited with code 2; no restarts left"},
        Case{"Evicted_PreemptionDoesNotCountAsRestart", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int r, PodBuilder& p) { if (r == 0) p.Evicted(); }), Phase::kRestarting, 0, 3,
             0, 1, 1, "Preempted", "rank 0 (pod train-0) was preempted or evicted"},
        Case{"DeletedBySomeoneElse_Preemption", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int r, PodBuilder& p) { if (r == 1) p.Terminating(); }), Phase::kRestarting,
             0, 3, 0, 1, 1, "Preempted", "rank 1"},
        Case{"CheckpointedForPreemption_Exit76", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int, PodBuilder& p) { p.Exited(kPreemptedExitCode); }), Phase::kRestarting,
             0, 4, 0, 1, 1, "Preempted", "preempted"},
        Case{"PodVanishedWhileRunning_Preemption", Job(InPhase(Phase::kRunning)),
             {PodBuilder(0).Running(), PodBuilder(1).Running(), PodBuilder(3).Running()},
             Phase::kRestarting, 0, 3, 0, 1, 1, "Preempted", "rank 2 (pod train-2) was deleted"},
        Case{"AllSucceeded_Succeeded", Job(InPhase(Phase::kRunning)),
             Gang(0, [](int, PodBuilder& p) { p.Exited(0); }), Phase::kSucceeded, 0, 0, 0, 0, 0,
             "Completed", "all 4 ranks exited successfully"},
        Case{"RestartingWithinBackoff_Waits", Job(InPhase(Phase::kRestarting, 1, absl::Seconds(3))),
             {}, Phase::kRestarting, 0, 0, 0, 0, 1, "", ""},
        Case{"BackoffPassedOldPodsTerminating_Waits",
             Job(InPhase(Phase::kRestarting, 1, absl::Minutes(1))),
             Gang(0, [](int, PodBuilder& p) { p.Terminating(); }), Phase::kPending, 0, 0, 0, 0, 1, "",
             ""},
        Case{"BackoffPassedOneOldPodTerminating_CreatesNoRankYet",
             Job(InPhase(Phase::kRestarting, 1, absl::Minutes(1))),
             {PodBuilder(0, 0).Terminating()}, Phase::kPending, 0, 0, 0, 0, 1, "", ""},
        Case{"BackoffPassedOldPodsGone_NextRestartAttempt",
             Job(InPhase(Phase::kRestarting, 1, absl::Minutes(1))), {}, Phase::kPending, 4, 0, 0, 0, 1,
             "Started", "restart attempt 1"},
        Case{"OldRestartAttemptPod_Deleted", Job(InPhase(Phase::kRunning, 2)),
             [] {
               auto pods = Gang(2, AllRunning);
               pods.push_back(PodBuilder(5, 1).Running());
               return pods;
             }(),
             Phase::kRunning, 0, 1, 0, 0, 2, "", ""},
        Case{"Suspend_DeletesPods", Job([](DistributedJob& j) { InPhase(Phase::kRunning)(j); j.spec.suspend = true; }),
             Gang(0, AllRunning), Phase::kSuspended, 0, 4, 0, 0, 0, "Suspended", "spec.suspend"},
        Case{"Resume_NewRestartAttempt", Job(InPhase(Phase::kSuspended, 0)), {}, Phase::kPending, 4, 0,
             0, 0, 1, "Resumed", "starting restart attempt 1"},
        Case{"DeadlinePassed_Failed",
             Job([](DistributedJob& j) { InPhase(Phase::kRunning)(j); j.spec.active_deadline_seconds = 60; }),
             Gang(0, AllRunning), Phase::kFailed, 0, 4, 0, 0, 0, "DeadlineExceeded",
             "activeDeadlineSeconds (60)"},
        Case{"InvalidSpec_ConditionAndEventNothingCreated",
             Job(nullptr, JobBuilder().Spec("replicas", 0).Build()), {}, Phase::kPending, 0, 0, 0, 0,
             0, "InvalidSpec", "spec.replicas"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(Decide, BeingDeleted_DoesNothing) {
  Decision d = Decide(Job([](DistributedJob& j) { j.being_deleted = true; }), {}, kNow);
  EXPECT_TRUE(d.create_ranks.empty());
  EXPECT_TRUE(d.events.empty());
}

TEST(RestartCause, FromTheRootRanksExitOrTheCauseLibdistWasTold) {
  auto root = [](int code, std::string message = "", std::string reason = "") -> ObservedPod {
    return PodBuilder(0).Exited(code, std::move(message)).Reason(std::move(reason));
  };
  EXPECT_STREQ(InfoOf(RestartCause(root(1, "Traceback ..."))).label, "crash");
  EXPECT_STREQ(InfoOf(RestartCause(root(139))).label, "signal");
  EXPECT_STREQ(InfoOf(RestartCause(root(137, "", "OOMKilled"))).label, "oom");
  EXPECT_STREQ(InfoOf(RestartCause(root(137, "", "Error"))).label, "signal");
  EXPECT_STREQ(InfoOf(RestartCause(root(kPreemptedExitCode))).label, "preempted");
  auto told = [&](const std::string& words) {
    return std::string(InfoOf(RestartCause(root(kPeerFailureExitCode,
                                                "cohort: the job failed: rank 2 ... [cause: " +
                                                    words + "]. Exiting with code 75")))
                           .label);
  };
  EXPECT_EQ(told("heartbeat timeout"), "heartbeat_timeout");
  EXPECT_EQ(told("reported error"), "reported_error");
  EXPECT_EQ(told("collective timeout"), "collective_timeout");
  EXPECT_EQ(told("coordination service lost"), "service_lost");
  EXPECT_EQ(told("crash"), "crash");
  EXPECT_EQ(told("something new"), "unknown");
  EXPECT_STREQ(InfoOf(RestartCause(root(kPeerFailureExitCode, "no marker"))).label, "unknown");
}

TEST(Decide, GangRestartSaysItsCauseAndWhenTheRankFailed) {
  Decision crash = Decide(Job(InPhase(Phase::kRunning)),
                          Gang(0,
                               [](int r, PodBuilder& p) {
                                 if (r == 2) p.Exited(137).FinishedAt(kNow - absl::Seconds(3));
                               }),
                          kNow);
  ASSERT_TRUE(crash.restart.has_value());
  EXPECT_STREQ(crash.restart->cause_label(), "signal");
  EXPECT_EQ(crash.restart->failed_at, kNow - absl::Seconds(3));

  Decision evicted = Decide(Job(InPhase(Phase::kRunning)),
                            Gang(0,
                                 [](int r, PodBuilder& p) {
                                   if (r == 1) p.Evicted();
                                 }),
                            kNow);
  ASSERT_TRUE(evicted.restart.has_value());
  EXPECT_STREQ(evicted.restart->cause_label(), "preempted");
  EXPECT_EQ(evicted.restart->failed_at, absl::InfinitePast());

  EXPECT_FALSE(
      Decide(Job(InPhase(Phase::kRunning)), Gang(0, AllRunning), kNow).restart.has_value());
  // No restarts left: the job fails, which is no restart.
  Decision last = Decide(Job([](DistributedJob& j) {
                           InPhase(Phase::kRunning)(j);
                           j.status.restarts = j.spec.max_restarts;
                         }),
                         Gang(0,
                              [](int r, PodBuilder& p) {
                                if (r == 0) p.Exited(1);
                              }),
                         kNow);
  EXPECT_EQ(last.status.phase, Phase::kFailed);
  EXPECT_FALSE(last.restart.has_value());
}

TEST(Decide, RestartRequeuesAfterBackoff) {
  Decision d = Decide(Job(InPhase(Phase::kRunning)),
                      Gang(0,
                           [](int r, PodBuilder& p) {
                             if (r == 0) p.Exited(1);
                           }),
                      kNow);
  EXPECT_EQ(d.requeue_after, absl::Seconds(10));
  const Condition* running = FindCondition(d.status.conditions, "Running");
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(running->status, "False");
}

// Pods not placed yet: the job stays Pending, counts nothing, and condition Scheduled says why
// and how many are placed, read from the pods as the API server returns them.
TEST(Decide, PodsWaitingToBePlaced_ConditionScheduledSaysWhyAndHowMany) {
  auto pod = [](int rank, nlohmann::json spec, nlohmann::json conditions) {
    nlohmann::json p = {
        {"metadata",
         {{"name", absl::StrCat("train-", rank)},
          {"labels",
           {{"cohort.dev/rank", absl::StrCat(rank)}, {"cohort.dev/restart-attempt", "0"}}}}},
        {"spec", spec},
        {"status", {{"phase", "Pending"}, {"conditions", conditions}}}};
    return *ObservePod(p);
  };
  const nlohmann::json placed = {{"nodeName", "node-0"}};
  const nlohmann::json gates = {{"schedulingGates", {{{"name", "kueue.x-k8s.io/admission"}}}}};
  const nlohmann::json none = nlohmann::json::array();
  const nlohmann::json unschedulable = {
      {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"}}};
  auto scheduled = [](const Decision& d) -> std::string {
    for (const Condition& c : d.status.conditions) {
      if (c.type == "Scheduled") return absl::StrCat(c.status, "/", c.reason, ": ", c.message);
    }
    return "";
  };
  auto decide = [](std::vector<ObservedPod> pods) {
    return Decide(Job(InPhase(Phase::kPending)), pods, kNow);
  };

  Decision gated =
      decide({pod(0, placed, none), pod(1, gates, none), pod(2, gates, none), pod(3, gates, none)});
  EXPECT_THAT(
      scheduled(gated),
      HasSubstr("False/SchedulingGated: waiting for admission: 1 of 4 pods placed, 3 held"));
  EXPECT_EQ(gated.status.phase, Phase::kPending);
  EXPECT_EQ(gated.status.restarts, 0);
  EXPECT_FALSE(gated.restart.has_value());

  Decision full = decide({pod(0, placed, none), pod(1, placed, none),
                          pod(2, nlohmann::json::object(), unschedulable),
                          pod(3, nlohmann::json::object(), unschedulable)});
  EXPECT_THAT(
      scheduled(full),
      HasSubstr("False/Unschedulable: waiting for room: 2 of 4 pods placed, 2 unschedulable"));

  Decision fresh = decide({pod(0, nlohmann::json::object(), none), pod(1, placed, none),
                           pod(2, placed, none), pod(3, placed, none)});
  EXPECT_EQ(scheduled(fresh), "False/WaitingForScheduler: 3 of 4 pods placed");

  Decision all = decide(
      {pod(0, placed, none), pod(1, placed, none), pod(2, placed, none), pod(3, placed, none)});
  EXPECT_EQ(scheduled(all), "True/AllPodsScheduled: all 4 pods are placed on nodes");
}

TEST(ObservePod, ReadsLabelsPhaseConditionsAndTrainerExit) {
  nlohmann::json pod = {
      {"metadata",
       {{"name", "train-2"},
        {"labels", {{"cohort.dev/rank", "2"}, {"cohort.dev/restart-attempt", "3"}}},
        {"deletionTimestamp", "2026-11-22T13:00:00Z"}}},
      {"status",
       {{"phase", "Failed"},
        {"startTime", "2026-11-22T12:00:00Z"},
        {"conditions",
         {{{"type", "Ready"}, {"status", "False"}},
          {{"type", "DisruptionTarget"}, {"status", "True"}}}},
        {"containerStatuses",
         {{{"name", "cohort-sidecar"}, {"state", {{"terminated", {{"exitCode", 1}}}}}},
          {{"name", "trainer"},
           {"state", {{"terminated", {{"exitCode", 137}, {"reason", "OOMKilled"}}}}}}}}}}};
  std::optional<ObservedPod> p = ObservePod(pod);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->name, "train-2");
  EXPECT_EQ(p->rank, 2);
  EXPECT_EQ(p->restart_attempt, 3);
  EXPECT_EQ(p->started_at, absl::FromUnixSeconds(1795348800));  // 2026-11-22T12:00:00Z
  EXPECT_EQ(p->phase, ObservedPod::Phase::kFailed);
  EXPECT_FALSE(p->ready);
  EXPECT_TRUE(p->disruption_target);
  EXPECT_TRUE(p->terminating);
  EXPECT_EQ(p->trainer_exit_code, 137);
  EXPECT_EQ(p->trainer_message, "OOMKilled");
  EXPECT_EQ(p->trainer_reason, "OOMKilled");
  EXPECT_STREQ(InfoOf(RestartCause(*p)).label, "oom");
}

// Kubelets list container statuses by name: a helper that sorts before the trainer must not be
// read as the trainer. The node and the end of the grace period are read too.
TEST(ObservePod, TheTrainerByNameAndTheNodeAndDeletionDeadline) {
  nlohmann::json pod = {
      {"metadata",
       {{"name", "train-1"},
        {"labels", {{"cohort.dev/rank", "1"}, {"cohort.dev/restart-attempt", "0"}}},
        {"deletionTimestamp", "2026-11-22T13:00:30Z"}}},
      {"spec", {{"nodeName", "node-b"}}},
      {"status",
       {{"phase", "Failed"},
        {"containerStatuses",
         {{{"name", "aaa-helper"},
           {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}}},
          {{"name", "cohort-sidecar"}, {"state", {{"terminated", {{"exitCode", 1}}}}}},
          {{"name", "trainer"},
           {"state", {{"terminated", {{"exitCode", 3}, {"reason", "Error"}}}}}}}}}}};
  std::optional<ObservedPod> p = ObservePod(pod, "trainer");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->trainer_name, "trainer");
  EXPECT_EQ(p->trainer_exit_code, 3);
  EXPECT_EQ(p->node, "node-b");
  EXPECT_EQ(p->deletion_deadline, *ParseRfc3339("2026-11-22T13:00:30Z"));
  ASSERT_EQ(p->containers.size(), 2u);  // The sidecar is not one of them.
  EXPECT_EQ(p->containers[0].name, "aaa-helper");
  EXPECT_EQ(p->containers[0].exit_code, 0);
  // Without the name, the first app container's status would be taken: the old mistake.
  EXPECT_EQ(ObservePod(pod)->trainer_exit_code, 0);
}

TEST(ObservePod, NotOursWithoutLabels) {
  EXPECT_FALSE(ObservePod({{"metadata", {{"name", "x"}}}}).has_value());
  EXPECT_FALSE(
      ObservePod({{"metadata",
                   {{"labels", {{"cohort.dev/rank", "a"}, {"cohort.dev/restart-attempt", "0"}}}}}})
          .has_value());
}

TEST(ObservePod, RunningAndReady) {
  std::optional<ObservedPod> p = ObservePod(
      {{"metadata",
        {{"name", "train-0"},
         {"labels", {{"cohort.dev/rank", "0"}, {"cohort.dev/restart-attempt", "0"}}}}},
       {"status",
        {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}});
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->phase, ObservedPod::Phase::kRunning);
  EXPECT_TRUE(p->ready);
  EXPECT_FALSE(p->trainer_exit_code.has_value());
}

// Found by tests/fuzz (kube_json): members of other types than a pod's threw (nlohmann's value()),
// and a pod without a name was deleted by name "" (the whole collection).
TEST(ObservePod, UnexpectedShapes_NoThrowAndNamelessIsNotOurs) {
  nlohmann::json labels = {{"cohort.dev/rank", "0"}, {"cohort.dev/restart-attempt", "0"}};
  for (const nlohmann::json& pod :
       {nlohmann::json(3), nlohmann::json::array(), nlohmann::json({{"metadata", 3}}),
        nlohmann::json({{"metadata", {{"labels", "cohort.dev/rank=0"}}}}),
        nlohmann::json({{"metadata", {{"labels", labels}}}}),
        nlohmann::json({{"metadata", {{"name", 7}, {"labels", labels}}}})}) {
    EXPECT_FALSE(ObservePod(pod).has_value()) << pod.dump();
  }
  nlohmann::json odd = {
      {"metadata", {{"name", "train-0"}, {"labels", labels}}},
      {"status",
       {{"phase", 3},
        {"conditions", {1, {{"type", "Ready"}, {"status", true}}}},
        {"containerStatuses",
         {{{"name", "trainer"},
           {"state", {{"terminated", {{"exitCode", "137"}, {"finishedAt", 5}}}}}}}}}}};
  std::optional<ObservedPod> p = ObservePod(odd);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->phase, ObservedPod::Phase::kPending);
  EXPECT_FALSE(p->ready);
  EXPECT_FALSE(p->trainer_exit_code.has_value());
}

// Found by tests/fuzz (kube_json): the termination message was cut at 512 bytes in the middle of
// a two-byte character, and the status holding it could not be serialized for the API server.
TEST(Decide, LongTerminationMessage_CutAtACharacterBoundary) {
  std::string message = "a";
  for (int i = 0; i < 300; ++i) message += "\u00e9";  // 2 bytes each: byte 512 is inside one.
  Decision d = Decide(Job(InPhase(Phase::kRunning)),
                      Gang(0,
                           [&](int r, PodBuilder& p) {
                             if (r == 1) p.Exited(1, message);
                           }),
                      kNow);
  const Condition* restarting = FindCondition(d.status.conditions, "Restarting");
  ASSERT_NE(restarting, nullptr);
  EXPECT_NO_THROW(nlohmann::json(restarting->message).dump());
  EXPECT_THAT(restarting->message, HasSubstr("a\u00e9\u00e9"));
  ASSERT_FALSE(d.events.empty());
  EXPECT_NO_THROW(nlohmann::json(d.events[0].message).dump());
}

TEST(RestartBackoff, DoublesAndCaps) {
  DistributedJobSpec spec;
  EXPECT_EQ(RestartBackoff(spec, 1), absl::Seconds(10));
  EXPECT_EQ(RestartBackoff(spec, 2), absl::Seconds(20));
  EXPECT_EQ(RestartBackoff(spec, 4), absl::Seconds(80));
  EXPECT_EQ(RestartBackoff(spec, 20), absl::Minutes(5));
}

TEST(SetCondition, TransitionTimeChangesOnlyOnFlip) {
  std::vector<Condition> cs;
  SetCondition(cs, Condition{"Running", "True", "A", "", "t1", 1});
  SetCondition(cs, Condition{"Running", "True", "B", "m", "t2", 2});
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].last_transition_time, "t1");
  EXPECT_EQ(cs[0].reason, "B");
  SetCondition(cs, Condition{"Running", "False", "C", "", "t3", 3});
  EXPECT_EQ(cs[0].last_transition_time, "t3");
}

// A rank whose processes ended (the hub's AttemptEnd) and a hang the hub named in the same pass:
// the real exit is the cause (HandleFailure runs before HandleHang), not the hang.
TEST(Decide, AFailureInTheSamePassWinsOverAHang) {
  JobBuilder b;
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        nlohmann::json::array({"python", "train.py"}));
  b.Spec("hangPolicy", "Fail");
  DistributedJob job = Job(InPhase(Phase::kRunning), b.Build());
  AttemptView view;
  view.connected = true;
  view.following = view.followed = {0, 1, 2, 3};
  view.ends[2] = AttemptView::End{1, "Error", "RuntimeError: bad batch", kNow};
  AttemptView::Hang hang;
  hang.id = 3;
  hang.detected_at = kNow - absl::Minutes(1);
  hang.dumps_complete = true;
  hang.outliers = {{1, 1, 0, "train.py:40 in step"}};
  view.hang = hang;
  Decision d = Decide(job, Gang(0, AllRunning), kNow, DecideOptions{}, &view);
  EXPECT_EQ(d.status.phase, Phase::kRestarting);
  ASSERT_TRUE(d.restart.has_value());
  EXPECT_STREQ(d.restart->cause_label(), "crash");
  ASSERT_FALSE(d.events.empty());
  EXPECT_THAT(d.events[0].message, HasSubstr("rank 2 (pod train-2) exited with code 1"));
  EXPECT_EQ(FindCondition(d.status.conditions, "Hung"), nullptr);
  EXPECT_EQ(d.status.last_hang_id, 0);
}

}  // namespace
}  // namespace cohort::op
