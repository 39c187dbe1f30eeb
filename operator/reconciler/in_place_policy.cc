#include "operator/reconciler/in_place_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/decision_pass.h"

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

// What stands in the way of `pods` (the gang, by rank) restarting in place.
struct GangCheck {
  std::string blocker;  // Why they cannot ("" when they can).
  // Pods whose sidecar did not follow the hub yet but may still (started within kHubPatience),
  // and until when they may.
  std::vector<std::string> not_following_yet;
  absl::Time patience_ends = absl::InfinitePast();
};

GangCheck Blocked(std::string why) {
  GangCheck check;
  check.blocker = std::move(why);
  return check;
}

GangCheck CheckGang(const DecisionPass& pass, const std::vector<const ObservedPod*>& pods) {
  GangCheck check;
  if (!pass.view->connected) return Blocked("the attempt hub on rank 0's sidecar is not reachable");
  std::set<int32_t> present;
  for (const ObservedPod* p : pods) {
    const std::string who = absl::StrCat("pod ", p->name);
    if (p->terminating) return Blocked(absl::StrCat(who, " is being deleted"));
    if (p->disruption_target) return Blocked(absl::StrCat(who, " was evicted or preempted"));
    if (!p->in_place) return Blocked(absl::StrCat(who, "'s trainer container ended"));
    // A pod that reported the end of its processes is there; one that did not must be heard from.
    const bool ended = pass.view->ends.count(p->rank) > 0;
    if (!ended && !pass.view->following.count(p->rank)) {
      if (pass.view->followed.count(p->rank)) {
        return Blocked(absl::StrCat(who, "'s sidecar stopped following the attempt hub and its processes did not end (it or its "
                                  "node is gone)"));
      }
      const absl::Time patience_ends = p->started_at + kHubPatience;
      if (pass.now >= patience_ends) {
        return Blocked(absl::StrCat(who, "'s sidecar did not follow the attempt hub within ", absl::FormatDuration(kHubPatience),
                             " of the pod's start and its processes did not end (it or its node is gone)"));
      }
      // Its sidecar is still starting (the pod just started): it follows soon.
      check.not_following_yet.push_back(p->name);
      check.patience_ends = std::max(check.patience_ends, patience_ends);
    }
    if (!ended && !p->ready) {
      return Blocked(absl::StrCat(who, " is not ready and its processes did not end (its node may be lost)"));
    }
    present.insert(p->rank);
  }
  for (int32_t rank = 0; rank < pass.spec.replicas; ++rank) {
    if (!present.count(rank)) return Blocked(absl::StrCat("pod ", PodName(pass.job, rank), " is gone"));
  }
  return check;
}

}  // namespace

std::string InPlaceBlocker(const DecisionPass& pass) {
  if (pass.spec.restart_strategy != RestartStrategy::kInPlace) return "spec.restartStrategy is Recreate";
  if (!RestartsInPlace(pass.job)) {
    return "the trainer container has no command (cohort-launch runs the command; it cannot know an image's "
           "entrypoint)";
  }
  if (pass.view == nullptr || !pass.view->heard) return "the attempt hub on rank 0's sidecar was not heard from";
  return CheckGang(pass, pass.current).blocker;
}

Verdict StartInPlace(DecisionPass& pass) {
  if (pass.status.phase != Phase::kPending || pass.waiting.empty()) return Verdict::kContinue;
  GangCheck check;
  if (pass.view == nullptr || !pass.view->heard) {
    check.blocker = "the attempt hub on rank 0's sidecar is not reachable";
  } else {
    check = CheckGang(pass, pass.waiting);
  }
  const std::string& blocker = check.blocker;
  if (blocker.empty() && !check.not_following_yet.empty()) {
    // The order would reach them when they follow; their processes of the last attempt must be
    // known to have ended first.
    pass.Requeue(std::min(absl::Seconds(1), check.patience_ends - pass.now));
    return Verdict::kDecided;
  }
  if (blocker.empty()) {
    // Ordered again on every pass until the hub says it runs: the hub takes a repeated order.
    pass.decision.start_attempt = pass.status.restart_attempt;
    pass.Requeue(absl::Seconds(1));
    return Verdict::kDecided;
  }
  // A pod of the gang went while it waited: the pods are recreated after all.
  pass.status.last_restart_strategy = restart_strategy::kRecreate;
  pass.Emit(event_type::kWarning, reason::kRecreatingGang,
            absl::StrCat("cannot start restart attempt ", pass.status.restart_attempt, " in place: ", blocker,
                         "; deleting and creating every pod instead"));
  pass.DeleteAll(pass.waiting);
  pass.old.insert(pass.old.end(), pass.waiting.begin(), pass.waiting.end());
  pass.waiting.clear();
  return Verdict::kContinue;
}

Verdict AwaitHub(DecisionPass& pass) {
  const AttemptView* view = pass.view;
  if (view == nullptr || !RestartsInPlace(pass.job) ||
      pass.status.last_restart_strategy != restart_strategy::kInPlace) {
    return Verdict::kContinue;
  }
  if (view->heard) {
    // Running after an in-place restart, the hub knows the attempt; one that is behind was started
    // anew (rank 0's sidecar restarted) and lost the job's attempts: the pods are recreated.
    if (pass.status.phase == Phase::kRunning && view->attempt < pass.status.restart_attempt) {
      pass.status.last_restart_strategy = restart_strategy::kRecreate;
      pass.Emit(event_type::kWarning, reason::kRecreatingGang,
                absl::StrCat("the attempt hub on rank 0's sidecar says attempt ", view->attempt, ", not ",
                             pass.status.restart_attempt,
                             ": rank 0's sidecar was restarted and lost the job's attempts; deleting and creating "
                             "every pod"));
      // They are an earlier attempt's now: DeleteOldPods, next, deletes them.
      pass.old.insert(pass.old.end(), pass.waiting.begin(), pass.waiting.end());
      pass.waiting.clear();
    }
    return Verdict::kContinue;
  }
  bool in_place_pods = false;
  for (const ObservedPod* p : pass.old) in_place_pods |= !p->terminating;
  if (!in_place_pods) return Verdict::kContinue;
  const absl::Time give_up = view->watching_since + kHubPatience;
  if (pass.now < give_up) {
    pass.Requeue(std::min(absl::Seconds(1), give_up - pass.now));
    return Verdict::kDecided;
  }
  pass.status.last_restart_strategy = restart_strategy::kRecreate;
  pass.Emit(event_type::kWarning, reason::kRecreatingGang,
            absl::StrCat("the attempt hub on rank 0's sidecar did not answer for ", absl::FormatDuration(kHubPatience),
                         ": the pods that restarted in place cannot be told to go on; deleting and creating every pod"));
  return Verdict::kContinue;
}

}  // namespace cohort::op
