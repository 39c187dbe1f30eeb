#include "operator/reconciler/job_decision.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/failure_cause.h"
#include "common/termination_message.h"
#include "kube/json_fields.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/elastic_policy.h"
#include "operator/reconciler/failure_policy.h"
#include "operator/reconciler/hang_policy.h"
#include "operator/reconciler/in_place_policy.h"
#include "operator/reconciler/lifecycle_policy.h"
#include "operator/reconciler/old_pods_policy.h"
#include "operator/reconciler/preemption_policy.h"
#include "operator/reconciler/spare_policy.h"
#include "operator/reconciler/startup_policy.h"

namespace cohort::op {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Minutes(5);

}  // namespace

FailureCause RestartCause(const ObservedPod& root) {
  const ExitKind kind = ExitKindOf(root);
  if (kind == ExitKind::kFollowed) {
    // The cause libdist told it, from the line its default handler wrote (the log's tail).
    return ParsePeerFailureCause(root.trainer_message).value_or(FailureCause::kUnspecified);
  }
  // kSucceeded: a pod that failed without an exit code.
  return kind == ExitKind::kSucceeded ? FailureCause::kProcessExited : FailureCauseOf(kind);
}

absl::Duration RestartBackoff(const DistributedJobSpec& spec, int32_t restart) {
  return DoublingDelay(spec.restart_backoff, kMaxBackoff, restart);
}

Decision Decide(const DistributedJob& job, const std::vector<ObservedPod>& pods, absl::Time now,
                const DecideOptions& options, const AttemptView* view) {
  // Spares that hold no slot are judged apart (spare_policy.h): no policy of the gang sees them.
  std::vector<ObservedPod> seen, spares;
  for (const ObservedPod& p : pods) (p.rank < 0 ? spares : seen).push_back(p);
  if (view != nullptr && job.spec.restart_strategy == RestartStrategy::kInPlace)
    ApplyAttemptView(*view, seen);
  DecisionPass pass(job, seen, now, options, view);
  for (const ObservedPod& p : spares) pass.spares.push_back(&p);
  if (job.being_deleted)
    return std::move(pass.decision);  // Garbage collection removes the children.
  // In order; the first that decides ends the pass.
  using Policy = Verdict (*)(DecisionPass&);
  static constexpr Policy kPolicies[] = {
      KeepFinished,   // lifecycle: a finished job until its TTL
      CheckSpec,      // lifecycle: nothing runs on an invalid spec
      AwaitHub,       // in place: pods of a later attempt than their label, until the hub is heard
      DeleteOldPods,  // old restart attempts' pods, and those of lost nodes
      SuspendOrResume,     // lifecycle
      EnforceDeadline,     // lifecycle: activeDeadlineSeconds
      EndBackoff,          // startup: the backoff after a restart
      StartInPlace,        // in place: order the next attempt from the hub
      CreateMissingRanks,  // startup
      ReportScheduling,    // startup: waiting for admission or room
      ResizeElastic,       // elastic: a drained resize ends, or a group back / a scale drains
      HandlePreemption,    // preemption, or a rule about the pod taken
      HandleFailure,       // the root cause, failure rules, maxRestarts
      HandleHang,          // in place: the hub's hang detector, spec.hangPolicy (a real exit wins)
      CompleteOrMarkRunning,
  };
  for (Policy policy : kPolicies) {
    if (policy(pass) == Verdict::kDecided) break;
  }
  KeepSpares(pass);   // Whatever the gang's policies decided.
  KeepElastic(pass);  // Likewise: the layout's status, a pod for every slot.
  pass.Count();
  return std::move(pass.decision);
}

}  // namespace cohort::op
