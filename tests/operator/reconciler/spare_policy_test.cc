// Hot spares: what Decide() does with spare pods (spare_policy.h) beside the gang that restarts in
// place, as a table.

#include "operator/reconciler/spare_policy.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

using Slots = std::vector<std::pair<int32_t, std::string>>;   // (pod index, spare)
using Labels = std::vector<std::pair<std::string, int32_t>>;  // (spare, pod index)

// A job of 4 pods and `spares` spares that restarts in place, in `phase` of `attempt` (after an
// in-place restart when attempt > 0), having created `created` spares so far.
DistributedJob SpareJob(Phase phase, int32_t attempt, int32_t spares, int32_t created,
                        std::function<void(DistributedJob&)> change = nullptr,
                        nlohmann::json annotations = nullptr) {
  JobBuilder b;
  b.Spec("spares", spares);
  if (!annotations.is_null())
    b.Set("/spec/template/metadata/annotations"_json_pointer, annotations);
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        nlohmann::json::array({"python", "train.py"}));
  return Job(
      [&](DistributedJob& j) {
        InPhase(phase, attempt)(j);
        if (attempt > 0) j.status.last_restart_strategy = "InPlace";
        j.status.spares_created = created;
        if (change) change(j);
      },
      b.Build());
}

// The hub's view: the pods run `attempt`, those of `following` follow it, `spares` follow as
// spares; `ends` lists (pod, exit code).
AttemptView View(int32_t attempt, std::set<int32_t> following, std::set<std::string> spares,
                 std::vector<std::pair<int32_t, int>> ends = {}) {
  AttemptView v;
  v.attempt = attempt;
  v.connected = true;
  v.following = following;
  v.followed = {0, 1, 2, 3};
  v.spares = std::move(spares);
  for (auto [pod, code] : ends)
    v.ends[pod] = AttemptView::End{code, "Error", "the last line", kNow};
  return v;
}

ObservedPod ReadySpare(const std::string& name) {
  return PodBuilder(-1).Spare(name).Running().StartedAt(kNow - absl::Minutes(5));
}

// The gang of attempt 0 without pod `gone`, plus `more`.
std::vector<ObservedPod> GangWithout(int32_t gone, std::vector<ObservedPod> more) {
  std::vector<ObservedPod> pods = Gang(0, AllRunning);
  pods.erase(pods.begin() + gone);
  pods.insert(pods.end(), more.begin(), more.end());
  return pods;
}

// A job restarting in place after pod 3 was lost, whose pods keep to topology domain "rack-a"
// (`kind`: "required" or "preferred"), with ready spares in `domains` (train-spare<i> in the i-th).
DistributedJob TopologyJob(const std::string& kind) {
  return SpareJob(
      Phase::kRestarting, 1, 2, 2, nullptr,
      {{absl::StrCat("kueue.x-k8s.io/podset-", kind, "-topology"), "example.com/rack"}});
}
std::vector<ObservedPod> RackAGangWithout3(std::vector<std::string> domains) {
  std::vector<ObservedPod> pods = Gang(0, [](int, PodBuilder& p) { p.Domain("rack-a"); });
  pods.erase(pods.begin() + 3);
  for (size_t i = 0; i < domains.size(); ++i) {
    pods.push_back(PodBuilder(-1)
                       .Spare(absl::StrCat("train-spare", i))
                       .Running()
                       .StartedAt(kNow - absl::Minutes(5))
                       .Domain(domains[i]));
  }
  return pods;
}
AttemptView SparesFollowing() {
  return View(0, {0, 1, 2}, {"train-spare0", "train-spare1"}, {{0, 75}, {1, 75}, {2, 75}});
}

// The gang of attempt 0 with pod 1 evicted, beside `spare`.
std::vector<ObservedPod> PodOneEvictedBeside(ObservedPod spare) {
  std::vector<ObservedPod> pods = Gang(0, [](int r, PodBuilder& p) {
    if (r == 1) p.Evicted();
  });
  pods.push_back(std::move(spare));
  return pods;
}

struct Case {
  std::string name;
  DistributedJob job;
  std::vector<ObservedPod> pods;
  AttemptView view;
  Phase phase;
  std::optional<int32_t> start_attempt;
  Labels relabels;
  Slots assignments;
  std::vector<int32_t> replace_ranks;
  std::vector<int32_t> create_spares;
  std::vector<std::string> deletes;
  std::string event_reason;  // Of some Event ("" for none at all).
  std::string event_message;
  int32_t ready_spares = 0;
  std::map<int32_t, std::string> slots = {};
};

class SpareTest : public ::testing::TestWithParam<Case> {};

TEST_P(SpareTest, Table) {
  const Case& c = GetParam();
  Decision d = Decide(c.job, c.pods, kNow, DecideOptions{}, &c.view);
  EXPECT_EQ(std::string(PhaseName(d.status.phase)), PhaseName(c.phase));
  EXPECT_EQ(d.start_attempt, c.start_attempt);
  EXPECT_EQ(d.relabel_spares, c.relabels);
  EXPECT_EQ(d.spare_assignments, c.assignments);
  EXPECT_EQ(d.replace_ranks, c.replace_ranks);
  EXPECT_EQ(d.create_spares, c.create_spares);
  EXPECT_THAT(d.delete_pods, ::testing::UnorderedElementsAreArray(c.deletes));
  EXPECT_EQ(d.status.ready_spares, c.ready_spares);
  EXPECT_EQ(d.status.slots, c.slots);
  if (c.event_reason.empty()) {
    EXPECT_TRUE(d.events.empty()) << d.events[0].reason << ": " << d.events[0].message;
  } else {
    bool found = false;
    for (const Event& e : d.events) {
      if (e.reason != c.event_reason) continue;
      found = true;
      EXPECT_THAT(e.message, HasSubstr(c.event_message));
    }
    EXPECT_TRUE(found) << "no " << c.event_reason << " Event";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Decide, SpareTest,
    ::testing::Values(
        // Pod 3's node was lost (the pod is gone): after the backoff, the ready spare is labelled
        // as pod 3 and the attempt is ordered with it; no pod is created for the slot; a new spare
        // is.
        Case{"BackoffOver_ALostSlotGoesToTheReadySpare",
             SpareJob(Phase::kRestarting, 1, 1, 1),
             GangWithout(3, {ReadySpare("train-spare0")}),
             View(0, {0, 1, 2}, {"train-spare0"}, {{0, 75}, {1, 75}, {2, 75}}),
             Phase::kPending,
             1,
             Labels{{"train-spare0", 3}},
             Slots{{3, "train-spare0"}},
             {},
             {1},
             {},
             "SpareTakesSlot",
             "spare pod train-spare0 takes the slot of rank 3 (pod train-3) in restart attempt 1: "
             "no pod is "
             "scheduled for it"},
        // Two slots lost, one spare: the lower pod index gets it, the other a replacement pod.
        Case{"TwoSlotsLostOneSpare_TheLowerIndexGetsIt_TheOtherAReplacement",
             SpareJob(Phase::kRestarting, 1, 1, 1),
             [] {
               std::vector<ObservedPod> pods = GangWithout(3, {ReadySpare("train-spare0")});
               pods.erase(pods.begin() + 1);
               return pods;
             }(),
             View(0, {0, 2}, {"train-spare0"}, {{0, 75}, {2, 75}}),
             Phase::kPending,
             1,
             Labels{{"train-spare0", 1}},
             Slots{{1, "train-spare0"}},
             {3},
             {1},
             {},
             "SpareTakesSlot",
             "takes the slot of rank 1"},
        // A required topology: the spare in the gang's domain takes the slot, though older ones
        // elsewhere are ready.
        Case{"RequiredTopology_TheSpareInTheGangsDomainTakesTheSlot",
             TopologyJob("required"),
             RackAGangWithout3({"rack-b", "rack-a"}),
             SparesFollowing(),
             Phase::kPending,
             1,
             Labels{{"train-spare1", 3}},
             Slots{{3, "train-spare1"}},
             {},
             {2},
             {},
             "SpareTakesSlot",
             "spare pod train-spare1 takes the slot of rank 3",
             1},
        // None in the gang's domain: a replacement pod, saying why the spares could not.
        Case{"RequiredTopology_NoSpareInTheGangsDomain_AReplacementSayingWhy",
             TopologyJob("required"),
             RackAGangWithout3({"rack-b", "rack-c"}),
             SparesFollowing(),
             Phase::kPending,
             1,
             {},
             {},
             {3},
             {},
             {},
             "NoSpareForSlot",
             "no ready spare can take the slot of rank 3 (pod train-3): no ready spare is in its "
             "topology domain, "
             "rack-a (node label example.com/rack); a replacement pod is created for it",
             2},
        // Preferred: a spare elsewhere takes it when none is in the domain.
        Case{"PreferredTopology_NoSpareInTheGangsDomain_AnotherTakesIt",
             TopologyJob("preferred"),
             RackAGangWithout3({"rack-b", "rack-c"}),
             SparesFollowing(),
             Phase::kPending,
             1,
             Labels{{"train-spare0", 3}},
             Slots{{3, "train-spare0"}},
             {},
             {2},
             {},
             "SpareTakesSlot",
             "spare pod train-spare0 takes the slot of rank 3",
             1},
        // A spare whose sidecar does not follow the hub is not ready: the slot is replaced as
        // without spares.
        Case{"SpareNotFollowingTheHub_AReplacementAsWithoutSpares",
             SpareJob(Phase::kRestarting, 1, 1, 1),
             GangWithout(3, {ReadySpare("train-spare0")}),
             View(0, {0, 1, 2}, {}, {{0, 75}, {1, 75}, {2, 75}}),
             Phase::kPending,
             1,
             {},
             {},
             {3},
             {},
             {},
             "",
             ""},
        // Rank 0's pod hosts the coordination service and the hub: never a spare's; recreated.
        Case{"SlotZeroLost_RecreatedNotGivenToTheSpare",
             SpareJob(Phase::kRestarting, 1, 1, 1),
             GangWithout(0, {ReadySpare("train-spare0")}),
             View(0, {1, 2, 3}, {"train-spare0"}, {{1, 75}, {2, 75}, {3, 75}}),
             Phase::kPending,
             std::nullopt,
             {},
             {},
             {},
             {},
             {"train-1", "train-2", "train-3"},
             "RecreatingGang",
             "pod train-0 is gone",
             1},
        // Labelled in an earlier pass, but the hub still lists it as a spare (the order that gave
        // it the slot was not carried out): the assignment goes with the order again.
        Case{"LabelledSpareNotGivenTheSlotYet_AssignedAgain",
             SpareJob(Phase::kRestarting, 1, 1, 2),
             GangWithout(3, {PodBuilder(3, 1).Spare("train-spare0").Running(),
                             PodBuilder(-1).Spare("train-spare1")}),
             View(0, {0, 1, 2}, {"train-spare0"}, {{0, 75}, {1, 75}, {2, 75}}),
             Phase::kPending,
             1,
             {},
             Slots{{3, "train-spare0"}},
             {},
             {},
             {},
             "",
             "",
             0,
             {{3, "train-spare0"}}},
        // Running the attempt, the spare holds slot 3: the status says so; a new spare is ready.
        Case{"SpareHoldsTheSlot_StatusSaysWhich",
             SpareJob(Phase::kRunning, 1, 1, 2),
             GangWithout(3, {PodBuilder(3, 1).Spare("train-spare0").Running(),
                             ReadySpare("train-spare1")}),
             View(1, {0, 1, 2, 3}, {"train-spare1"}),
             Phase::kRunning,
             std::nullopt,
             {},
             {},
             {},
             {},
             {},
             "",
             "",
             1,
             {{3, "train-spare0"}}},
        // The first pass: the spares are created with the gang.
        Case{"NewJob_SparesCreatedWithTheGang",
             SpareJob(Phase::kPending, 0, 2, 0),
             {},
             View(0, {}, {}),
             Phase::kPending,
             std::nullopt,
             {},
             {},
             {},
             {0, 1},
             {},
             "Started",
             ""},
        // A spare whose cohort-launch ended is deleted and another created; the gang runs on.
        Case{"SpareFailed_ReplacedWithoutTouchingTheGang",
             SpareJob(Phase::kRunning, 0, 1, 1),
             GangWithout(3,
                         {PodBuilder(3).Running(), PodBuilder(-1).Spare("train-spare0").Exited(2)}),
             View(0, {0, 1, 2, 3}, {}),
             Phase::kRunning,
             std::nullopt,
             {},
             {},
             {},
             {1},
             {"train-spare0"},
             "ReplacingSpare",
             "spare pod train-spare0 has its trainer container (cohort-launch) ended with code 2: "
             "deleting it and "
             "creating another; the gang is not touched"},
        // spec.spares lowered: the newest goes.
        Case{"SparesLowered_TheNewestGoes",
             SpareJob(Phase::kRunning, 0, 1, 2),
             GangWithout(3, {PodBuilder(3).Running(), ReadySpare("train-spare0"),
                             PodBuilder(-1)
                                 .Spare("train-spare1")
                                 .Running()
                                 .StartedAt(kNow - absl::Minutes(1))}),
             View(0, {0, 1, 2, 3}, {"train-spare0", "train-spare1"}),
             Phase::kRunning,
             std::nullopt,
             {},
             {},
             {},
             {},
             {"train-spare1"},
             "",
             "",
             1},
        // A finished job's spares go (its pods stay for their logs).
        Case{"JobSucceeded_SparesDeleted",
             SpareJob(Phase::kSucceeded, 0, 1, 1),
             GangWithout(3, {PodBuilder(3).Exited(0), ReadySpare("train-spare0")}),
             View(0, {}, {"train-spare0"}),
             Phase::kSucceeded,
             std::nullopt,
             {},
             {},
             {},
             {},
             {"train-spare0"},
             "",
             ""},
        // An eviction restarts in place saying which spare will take the slot.
        Case{"PodEvicted_TheRestartSaysWhichSpareTakesTheSlot",
             SpareJob(Phase::kRunning, 0, 1, 1),
             PodOneEvictedBeside(ReadySpare("train-spare0")),
             View(0, {0, 1, 2, 3}, {"train-spare0"}),
             Phase::kRestarting,
             std::nullopt,
             {},
             {},
             {},
             {},
             {},
             "RestartedInPlace",
             "pod train-1 is being deleted (spare train-spare0 takes its slot)",
             1},
        // A gang-scheduled job is recreated whole, spares or not (the pod that goes would finish
        // the admitted group, and a new spare could not join it): its spare goes with the old
        // group, and new spares come with the new gang's pods, not before.
        Case{"GangScheduled_ReadySpare_RecreatedAsWithoutSpares",
             SpareJob(Phase::kRunning, 0, 1, 1,
                      [](DistributedJob& j) { j.spec.scheduling.queue_name = "team-a"; }),
             PodOneEvictedBeside(ReadySpare("train-spare0")),
             View(0, {0, 1, 2, 3}, {"train-spare0"}),
             Phase::kRestarting,
             std::nullopt,
             {},
             {},
             {},
             {},
             {"train-0", "train-2", "train-3", "train-spare0"},
             "Preempted",
             "rank 1 (pod train-1) was preempted or evicted"},
        Case{"GangScheduled_NoSpareReady_Recreated",
             SpareJob(Phase::kRunning, 0, 1, 1,
                      [](DistributedJob& j) { j.spec.scheduling.queue_name = "team-a"; }),
             PodOneEvictedBeside(PodBuilder(-1).Spare("train-spare0").Pending()),
             View(0, {0, 1, 2, 3}, {}),
             Phase::kRestarting,
             std::nullopt,
             {},
             {},
             {},
             {},
             {"train-0", "train-2", "train-3", "train-spare0"},
             "ReplacingSpare",
             "belongs to restart attempt 0's pod group, and the gang was recreated"},
        // Labelled with slot 3 in an earlier pass, the spare stopped following before the order:
        // it is deleted and the slot goes to the other ready spare.
        Case{"LabelledSpareStoppedFollowing_DeletedTheSlotGoesToAnother",
             SpareJob(Phase::kRestarting, 1, 1, 2),
             GangWithout(3, {PodBuilder(3, 1).Spare("train-spare0").Running(),
                             ReadySpare("train-spare1")}),
             View(0, {0, 1, 2}, {"train-spare1"}, {{0, 75}, {1, 75}, {2, 75}}),
             Phase::kPending,
             1,
             Labels{{"train-spare1", 3}},
             Slots{{3, "train-spare1"}},
             {},
             {2},
             {"train-spare0"},
             "ReplacingSpare",
             "spare pod train-spare0, given the slot of rank 3 (pod train-3), no longer follows "
             "the attempt hub before "
             "restart attempt 1 started: deleting it"},
        // Rank 0's pod went after a spare was labelled with slot 3: the gang is recreated, and the
        // labelled spare goes too (it cannot be a fresh pod of the new gang); a new spare is made.
        Case{"RankZeroGoneAfterASpareWasLabelled_RecreatedTheSpareDeleted",
             SpareJob(Phase::kRestarting, 1, 1, 1),
             [] {
               std::vector<ObservedPod> pods =
                   GangWithout(3, {PodBuilder(3, 1).Spare("train-spare0").Running()});
               pods.erase(pods.begin());
               return pods;
             }(),
             View(0, {1, 2}, {"train-spare0"}, {{1, 75}, {2, 75}}),
             Phase::kPending,
             std::nullopt,
             {},
             {},
             {},
             {1},
             {"train-1", "train-2", "train-spare0"},
             "RecreatingGang",
             "pod train-0 is gone"},
        // A status write that was lost: the spares seen name the next number.
        Case{"SparesCreatedBehind_TheNextNumberIsPastTheSpareSeen",
             SpareJob(Phase::kRunning, 0, 2, 0),
             GangWithout(3, {PodBuilder(3).Running(), ReadySpare("train-spare4")}),
             View(0, {0, 1, 2, 3}, {"train-spare4"}),
             Phase::kRunning,
             std::nullopt,
             {},
             {},
             {},
             {5},
             {},
             "",
             "",
             1}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace cohort::op
