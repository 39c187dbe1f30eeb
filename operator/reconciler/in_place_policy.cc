#include "operator/reconciler/in_place_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/rfc3339.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/elastic_policy.h"
#include "operator/reconciler/spare_policy.h"

namespace cohort::op {

using PodPhase = ObservedPod::Phase;

void ApplyAttemptView(const AttemptView& view, std::vector<ObservedPod>& pods) {
  if (!view.heard) return;
  for (ObservedPod& p : pods) {
    if (p.terminating || p.restart_attempt > view.attempt) continue;  // Not of this gang.
    p.restart_attempt = view.attempt;
    // Its trainer container runs cohort-launch for as long as the pod restarts in place; one
    // that ended ended the pod's part in it, and its status says how.
    if (p.phase != PodPhase::kRunning || p.trainer_exit_code) continue;
    p.in_place = true;
    auto end = view.ends.find(p.rank);
    if (end == view.ends.end()) continue;
    p.phase = PodPhase::kFailed;
    p.trainer_exit_code = end->second.exit_code;
    p.trainer_reason = end->second.reason;
    p.trainer_message = end->second.message;
    p.finished_at = end->second.finished_at;
    for (ObservedPod::ContainerExit& c : p.containers) {
      if (c.name == p.trainer_name) {
        c.exit_code = end->second.exit_code;
        c.reason = end->second.reason;
      }
    }
  }
}

namespace {

// What the gang's pods allow: the whole gang cannot restart in place (`blocker`), or it can with
// some pods replaced alone.
struct GangCheck {
  std::string blocker;  // Why the gang cannot ("" when it can).
  // Pods that go (replaced alone), each with why; ranks without a pod (created alone).
  std::vector<std::pair<const ObservedPod*, std::string>> replace;
  std::vector<int32_t> missing;
  // Until when a pod whose sidecar did not follow the hub yet may still (it started within
  // kFirstFollowPatience); InfinitePast when every pod's sidecar follows.
  absl::Time follow_by = absl::InfinitePast();
};

GangCheck Blocked(std::string why) {
  GangCheck check;
  check.blocker = std::move(why);
  return check;
}

// Why `p` cannot stay in place ("" when it can). A pod whose sidecar did not follow the hub yet but
// may still sets `*wait_until` to when it must have.
std::string WhyItGoes(const DecisionPass& pass, const ObservedPod& p, absl::Time* wait_until) {
  if (p.terminating) return "is being deleted";
  if (p.disruption_target) return "was evicted or preempted";
  if (!p.in_place) return "has its trainer container ended";
  // A pod that reported the end of its processes is there; one that did not must be heard from.
  const bool ended = pass.view->ends.count(p.rank) > 0;
  if (!ended && !pass.view->following.count(p.rank)) {
    if (pass.view->followed.count(p.rank)) {
      return "has a sidecar that stopped following the attempt hub, and its processes did not end "
             "(it or its node is "
             "gone)";
    }
    const absl::Time patience_ends = p.started_at + kFirstFollowPatience;
    if (pass.now >= patience_ends) {
      return absl::StrCat(
          "has a sidecar that did not follow the attempt hub within ",
          absl::FormatDuration(kFirstFollowPatience),
          " of the pod's start, and its processes did not end (it or its node is gone)");
    }
    *wait_until = patience_ends;  // Its sidecar is still starting: it follows soon.
  }
  if (!ended && !p.ready)
    return "is not ready and its processes did not end (its node may be lost)";
  return "";
}

// `pods` (by rank) restarting in place, beside `others` (the ranks of pods of the next attempt
// already there: replacements).
GangCheck CheckGang(const DecisionPass& pass, const std::vector<const ObservedPod*>& pods,
                    const std::vector<const ObservedPod*>& others = {}) {
  if (!pass.view->connected) return Blocked("the attempt hub on rank 0's sidecar is not reachable");
  // Rank 0's pod hosts the coordination service and the hub: the gang cannot go on without it.
  const char* kRankZero = " (rank 0's pod hosts the coordination service and the attempt hub)";
  GangCheck check;
  std::set<int32_t> present;
  for (const ObservedPod* p : others) present.insert(p->rank);
  for (const ObservedPod* p : pods) {
    absl::Time wait_until = absl::InfinitePast();
    std::string why = WhyItGoes(pass, *p, &wait_until);
    // An elastic job's pod that the running attempt leaves out and that waits for a node stays:
    // it asks for the capacity its group needs to rejoin (elastic_policy.h).
    if (!why.empty() && !pass.Runs(p->rank) && !p->terminating && p->phase == PodPhase::kPending) {
      present.insert(p->rank);
      continue;
    }
    if (!why.empty()) {
      if (p->rank == 0) return Blocked(absl::StrCat("pod ", p->name, " ", why, kRankZero));
      check.replace.emplace_back(p, std::move(why));
      continue;
    }
    check.follow_by = std::max(check.follow_by, wait_until);
    present.insert(p->rank);
  }
  for (const auto& [p, why] : check.replace) present.insert(p->rank);
  for (int32_t rank = 0; rank < pass.spec.replicas; ++rank) {
    if (present.count(rank)) continue;
    if (rank == 0)
      return Blocked(absl::StrCat("pod ", PodName(pass.job, rank), " is gone", kRankZero));
    check.missing.push_back(rank);
  }
  // A gang scheduler (spec.scheduling) admits whole gangs: a pod alone would wait for ever.
  const bool gang_scheduled = GangScheduled(pass.spec);
  // Spares too: the pod that goes would finish the admitted group (Kueue), and a new spare could
  // not join it.
  if (gang_scheduled && (!check.replace.empty() || !check.missing.empty())) {
    const std::string what =
        check.replace.empty()
            ? absl::StrCat("pod ", PodName(pass.job, check.missing[0]), " is gone")
            : absl::StrCat("pod ", check.replace[0].first->name, " ", check.replace[0].second);
    return Blocked(absl::StrCat(
        what, ", and a pod of a gang-scheduled job (spec.scheduling) cannot be replaced alone"));
  }
  return check;
}

// Restarting in place: the ranks of the gang without a pod get one of their own (a replacement,
// ReplacementPodName), at once, whatever of theirs is still terminating.
void CreateReplacements(DecisionPass& pass, const std::vector<const ObservedPod*>& staying,
                        const std::set<int32_t>& taken_by_spares = {}) {
  std::set<int32_t> present = taken_by_spares;
  for (const ObservedPod* p : pass.current) present.insert(p->rank);
  for (const ObservedPod* p : staying) present.insert(p->rank);
  for (int32_t rank = 0; rank < pass.spec.replicas; ++rank) {
    if (!present.count(rank)) pass.decision.replace_ranks.push_back(rank);
  }
}

}  // namespace

void RecreateInstead(DecisionPass& pass, const std::string& why) {
  pass.status.last_restart_strategy = restart_strategy::kRecreate;
  pass.Emit(event_type::kWarning, reason::kRecreatingGang,
            absl::StrCat(why, "; deleting and creating every pod instead"));
  // The pods that waited for the next attempt are an earlier attempt's now.
  pass.DeleteAll(pass.waiting);
  pass.old.insert(pass.old.end(), pass.waiting.begin(), pass.waiting.end());
  pass.waiting.clear();
  DropSparesHoldingSlots(pass);
}

InPlacePlan PlanInPlace(const DecisionPass& pass) {
  InPlacePlan plan;
  if (pass.spec.restart_strategy != RestartStrategy::kInPlace) {
    plan.blocker = "spec.restartStrategy is Recreate";
  } else if (!RestartsInPlace(pass.spec)) {
    plan.blocker =
        "the trainer container has no command (cohort-launch runs the command; it cannot know an "
        "image's "
        "entrypoint)";
  } else if (pass.view == nullptr || !pass.view->heard) {
    plan.blocker = "the attempt hub on rank 0's sidecar was not heard from";
  } else {
    GangCheck check = CheckGang(pass, pass.current);
    plan.blocker = std::move(check.blocker);
    // Which ready spare would take each slot (StartInPlace gives them after the backoff).
    std::vector<int32_t> lost = check.missing;
    for (const auto& [p, why] : check.replace) lost.push_back(p->rank);
    std::map<int32_t, std::string> spare_for;
    for (const SlotPlan::Assignment& a : PlanSlotsForSpares(pass, lost).assignments) {
      spare_for[a.pod_index] = absl::StrCat(" (spare ", a.spare, " takes its slot)");
    }
    for (auto& [p, why] : check.replace) {
      plan.replaced.push_back({p, absl::StrCat("pod ", p->name, " ", why, spare_for[p->rank])});
    }
    for (int32_t rank : check.missing) {
      plan.replaced.push_back(
          {nullptr, absl::StrCat("pod ", PodName(pass.job, rank), " is gone", spare_for[rank])});
    }
  }
  if (!plan.blocker.empty()) plan.replaced.clear();
  return plan;
}

Verdict StartInPlace(DecisionPass& pass) {
  if (pass.status.phase != Phase::kPending || pass.waiting.empty()) return Verdict::kContinue;
  GangCheck check;
  if (pass.view == nullptr || !pass.view->heard) {
    check.blocker = "the attempt hub on rank 0's sidecar is not reachable";
  } else {
    check = CheckGang(pass, pass.waiting, pass.current);
  }
  if (!check.blocker.empty()) {
    // Rank 0's pod went while the others waited: the pods are recreated after all.
    RecreateInstead(pass, absl::StrCat("cannot start restart attempt ", pass.status.restart_attempt,
                                       " in place: ", check.blocker));
    return Verdict::kContinue;
  }
  CheckLabelledSpares(pass);
  // A pod that went while it waited is replaced alone, like one that went before.
  for (const auto& [gone, why] : check.replace) {
    pass.Emit(
        event_type::kWarning, reason::kReplacingPod,
        absl::StrCat("pod ", gone->name, " ", why, ": replacing it alone for restart attempt ",
                     pass.status.restart_attempt));
    pass.DeleteAll({gone});
    pass.old.push_back(gone);
    pass.waiting.erase(std::find(pass.waiting.begin(), pass.waiting.end(), gone));
  }
  // The slots without a pod go to ready spares first (no pod is scheduled for them), then to
  // replacements.
  std::set<int32_t> present;
  for (const ObservedPod* p : pass.current) present.insert(p->rank);
  for (const ObservedPod* p : pass.waiting) present.insert(p->rank);
  std::vector<int32_t> lost;
  for (int32_t rank = 1; rank < pass.spec.replicas; ++rank) {
    if (!present.count(rank)) lost.push_back(rank);
  }
  CreateReplacements(pass, pass.waiting, TakeSlotsWithSpares(pass, lost));
  if (check.follow_by != absl::InfinitePast()) {
    // The order would reach them when they follow; their processes of the last attempt must be
    // known to have ended first.
    pass.Requeue(std::min(absl::Seconds(1), check.follow_by - pass.now));
    return Verdict::kDecided;
  }
  // Every pod that stays ends its processes of the last attempt before the next starts: a rank
  // that checkpoints after a preemption notice finishes it. Waited for up to kProcessesEndPatience
  // after the backoff (cohort-launch stops what is left when the order comes), unless the gang
  // restarts because it hung: its processes will not end by themselves.
  const Condition* restarted = FindCondition(pass.status.conditions, condition::kRestarting);
  const absl::Time since =
      restarted ? ParseRfc3339(restarted->last_transition_time).value_or(pass.now) : pass.now;
  bool all_ended = true;
  for (const ObservedPod* p : pass.waiting) {
    // A pod the last attempt left out (an elastic job's) ran nothing to end.
    if (pass.view->layout && !pass.view->layout->Position(p->rank)) continue;
    all_ended &= pass.view->ends.count(p->rank) > 0;
  }
  if (restarted != nullptr && restarted->reason == reason::kHung) all_ended = true;
  if (!all_ended && pass.now < since + kProcessesEndPatience) {
    pass.Requeue(std::min(absl::Seconds(1), since + kProcessesEndPatience - pass.now));
    return Verdict::kDecided;
  }
  // An elastic job runs the replica groups whose pods are there (or waits for them a while).
  if (!ElasticStart(pass)) return Verdict::kDecided;
  // Ordered again on every pass until the hub says it runs: the hub takes a repeated order.
  pass.decision.start_attempt = pass.status.restart_attempt;
  AssignLabelledSpares(pass);
  pass.Requeue(absl::Seconds(1));
  return Verdict::kDecided;
}

bool CreateReplacementsInPlace(DecisionPass& pass) {
  if (pass.status.last_restart_strategy != restart_strategy::kInPlace ||
      std::none_of(pass.current.begin(), pass.current.end(),
                   [](const ObservedPod* p) { return p->in_place; })) {
    return false;
  }
  CreateReplacements(pass, {});
  return true;
}

Verdict AwaitHub(DecisionPass& pass) {
  const AttemptView* view = pass.view;
  if (view == nullptr || !RestartsInPlace(pass.spec) ||
      pass.status.last_restart_strategy != restart_strategy::kInPlace) {
    return Verdict::kContinue;
  }
  if (view->heard) {
    // Running after an in-place restart, the hub knows the attempt; one that is behind was started
    // anew (rank 0's sidecar restarted) and lost the job's attempts: the pods are recreated.
    if (pass.status.phase == Phase::kRunning && view->attempt < pass.status.restart_attempt) {
      RecreateInstead(pass, absl::StrCat("the attempt hub on rank 0's sidecar says attempt ",
                                         view->attempt, ", not ", pass.status.restart_attempt,
                                         ": rank 0's sidecar was restarted and lost the job's "
                                         "attempts"));
    }
    return Verdict::kContinue;
  }
  bool in_place_pods = false;
  for (const ObservedPod* p : pass.old) in_place_pods |= !p->terminating;
  if (!in_place_pods) return Verdict::kContinue;
  const absl::Time give_up = view->watching_since + kHubSilencePatience;
  if (pass.now < give_up) {
    pass.Requeue(std::min(absl::Seconds(1), give_up - pass.now));
    return Verdict::kDecided;
  }
  RecreateInstead(pass, absl::StrCat("the attempt hub on rank 0's sidecar did not answer for ",
                                     absl::FormatDuration(kHubSilencePatience),
                                     ": the pods that restarted in place cannot be told to go on"));
  return Verdict::kContinue;
}

}  // namespace cohort::op
