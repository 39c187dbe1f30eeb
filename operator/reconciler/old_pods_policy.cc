#include "operator/reconciler/old_pods_policy.h"

#include "absl/strings/str_cat.h"
#include "operator/reconciler/conditions.h"

namespace cohort::op {

Verdict DeleteOldPods(DecisionPass& pass) {
  pass.DeleteAll(pass.old);
  ForceDeleteStuckPods(pass, pass.old);
  return Verdict::kContinue;
}

void ForceDeleteStuckPods(DecisionPass& pass, const std::vector<const ObservedPod*>& pods) {
  if (pass.options.force_delete_after < absl::ZeroDuration()) return;
  for (const ObservedPod* p : pods) {
    if (!p->terminating || p->force_deleted || p->deletion_deadline == absl::InfiniteFuture())
      continue;
    const absl::Time due = p->deletion_deadline + pass.options.force_delete_after;
    if (pass.now < due) {
      pass.Requeue(due - pass.now);
      continue;
    }
    pass.decision.force_delete_pods.push_back(p->name);
    pass.Emit(event_type::kWarning, reason::kForceDeleted,
              absl::StrCat("pod ", p->name, " on node ", p->node.empty() ? "(none)" : p->node,
                           " was still terminating ",
                           absl::FormatDuration(pass.now - p->deletion_deadline),
                           " after its grace period ended (its node may be lost): deleted it with "
                           "grace period 0, as nothing will confirm its deletion"));
  }
}

}  // namespace cohort::op
