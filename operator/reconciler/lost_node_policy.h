#pragma once

// Pods of earlier restart attempts, and the lost nodes that keep them: an old pod never
// outlives its attempt, and one still terminating past its grace period and
// DecideOptions::force_delete_after (its node lost: no kubelet will confirm the deletion) is
// deleted with grace period 0, with a ForceDeleted Event naming the pod and its node, so that
// the next attempt (which waits for every old pod) can start.

#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// Always continues.
Verdict DeleteOldPods(DecisionPass& pass);

}  // namespace cohort::op
