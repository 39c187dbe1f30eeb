#include "operator/reconciler/startup_policy.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/rfc3339.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/in_place_policy.h"

namespace cohort::op {
namespace {

using PodPhase = ObservedPod::Phase;

// While waiting for pods of an old restart attempt to go (their names are reused), look again this
// often; pod watch events usually come first.
constexpr absl::Duration kOldPodsRecheck = absl::Seconds(1);

}  // namespace

Verdict EndBackoff(DecisionPass& pass) {
  DistributedJobStatus& st = pass.status;
  if (st.phase != Phase::kRestarting) return Verdict::kContinue;
  const Condition* restarting = FindCondition(st.conditions, condition::kRestarting);
  absl::Time since =
      restarting ? ParseRfc3339(restarting->last_transition_time).value_or(pass.now) : pass.now;
  const bool counted = st.last_restart_kind == restart_kind::kFailure;
  // A resize (an elastic job's) stopped every rank at a common step on purpose: no backoff.
  absl::Time ready_at = st.last_restart_kind == restart_kind::kResize
                            ? since
                            : since + RestartBackoff(pass.spec, counted ? st.restarts : 1);
  if (pass.now < ready_at) {
    pass.Requeue(ready_at - pass.now);
    return Verdict::kDecided;
  }
  st.phase = Phase::kPending;
  pass.SetCondition(condition::kRestarting, false, reason::kRestarted,
                    absl::StrCat("restart attempt ", st.restart_attempt));
  return Verdict::kContinue;
}

Verdict CreateMissingRanks(DecisionPass& pass) {
  if (pass.status.phase != Phase::kPending) return Verdict::kContinue;
  if (CreateReplacementsInPlace(pass)) return Verdict::kContinue;
  std::set<int32_t> present;
  for (const ObservedPod* p : pass.current) present.insert(p->rank);
  std::vector<int32_t>& create = pass.decision.create_ranks;
  if (!pass.old.empty()) {
    pass.Requeue(kOldPodsRecheck);
  } else {
    for (int32_t rank = 0; rank < pass.spec.replicas; ++rank) {
      if (!present.count(rank)) create.push_back(rank);
    }
  }
  if (present.empty() && !create.empty()) {
    pass.Emit(event_type::kNormal, reason::kStarted,
              absl::StrCat("creating ", create.size(), create.size() == 1 ? " pod" : " pods",
                           " for restart attempt ", pass.status.restart_attempt));
  }
  return Verdict::kContinue;
}

Verdict ReportScheduling(DecisionPass& pass) {
  if (pass.status.phase != Phase::kPending || pass.current.empty()) return Verdict::kContinue;
  int32_t placed = 0, gated = 0, unschedulable = 0;
  for (const ObservedPod* p : pass.current) {
    if (!p->node.empty()) {
      ++placed;
    } else if (p->gated || p->unscheduled_reason == reason::kSchedulingGated) {
      ++gated;
    } else if (p->unscheduled_reason == reason::kUnschedulable) {
      ++unschedulable;
    }
  }
  const int32_t pods = pass.spec.replicas;
  if (placed == pods) {
    pass.SetCondition(
        condition::kScheduled, true, reason::kAllPodsScheduled,
        absl::StrCat("all ", pods, pods == 1 ? " pod is" : " pods are", " placed on nodes"));
  } else if (gated > 0) {
    pass.SetCondition(
        condition::kScheduled, false, reason::kSchedulingGated,
        absl::StrCat(
            "waiting for admission: ", placed, " of ", pods, " pods placed, ", gated,
            " held by scheduling gates (an admission controller such as Kueue removes them "
            "when it admits the job)"));
  } else if (unschedulable > 0) {
    pass.SetCondition(condition::kScheduled, false, reason::kUnschedulable,
                      absl::StrCat("waiting for room: ", placed, " of ", pods, " pods placed, ",
                                   unschedulable, " unschedulable (see kubectl describe pod)"));
  } else {
    // Not placed yet, and the scheduler has not said why: a new attempt's pods, whatever the
    // last attempt's were.
    pass.SetCondition(condition::kScheduled, false, reason::kWaitingForScheduler,
                      absl::StrCat(placed, " of ", pods, " pods placed"));
  }
  return Verdict::kContinue;
}

Verdict CompleteOrMarkRunning(DecisionPass& pass) {
  // The pods the attempt runs: an elastic job's may leave some out (elastic_policy.h).
  std::vector<const ObservedPod*> current, idle;
  for (const ObservedPod* p : pass.current) (pass.Runs(p->rank) ? current : idle).push_back(p);
  const int32_t pods = pass.RunningPods();
  const int64_t ranks = int64_t{pods} * ResolvedProcessesPerPod(pass.job);
  const bool complete = static_cast<int32_t>(current.size()) == pods;
  if (complete && std::all_of(current.begin(), current.end(), [](const ObservedPod* p) {
        return p->phase == PodPhase::kSucceeded;
      })) {
    pass.Finish(Phase::kSucceeded, reason::kCompleted,
                absl::StrCat("all ", ranks, " ranks exited successfully"));
    pass.DeleteAll(idle);  // An elastic job's pods left out of the last attempt: nothing to keep.
    return Verdict::kDecided;
  }
  const bool all_running =
      complete && std::all_of(current.begin(), current.end(), [](const ObservedPod* p) {
        return p->phase == PodPhase::kRunning || p->phase == PodPhase::kSucceeded;
      });
  if (all_running && pass.status.phase == Phase::kPending) {
    pass.status.phase = Phase::kRunning;
    if (pass.status.start_time.empty()) pass.status.start_time = FormatRfc3339(pass.now);
    pass.SetCondition(condition::kRunning, true, reason::kAllRanksRunning,
                      absl::StrCat("all ", ranks, " ranks are running (restart attempt ",
                                   pass.status.restart_attempt, ")"));
    pass.Emit(event_type::kNormal, reason::kRunning,
              absl::StrCat("all ", ranks, " ranks are running"));
  }
  return Verdict::kDecided;
}

}  // namespace cohort::op
