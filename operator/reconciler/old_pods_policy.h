#pragma once

// Pods of earlier restart attempts, and the lost nodes that keep them: an old pod never
// outlives its attempt, and one still terminating past its grace period and
// DecideOptions::force_delete_after (its node lost: no kubelet will confirm the deletion) is
// deleted with grace period 0, with a ForceDeleted Event naming the pod and its node, so that
// the next attempt (which waits for every old pod) can start. Restarting in place, a pod replaced
// alone is such an old pod too; its replacement does not wait for it, and a job that finished
// meanwhile still has it force-deleted.

#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// Always continues.
Verdict DeleteOldPods(DecisionPass& pass);
// The force-deletion alone, of the pods among `pods` that are being deleted (a finished job's).
void ForceDeleteStuckPods(DecisionPass& pass, const std::vector<const ObservedPod*>& pods);

}  // namespace cohort::op
