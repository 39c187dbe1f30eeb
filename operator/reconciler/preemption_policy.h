#pragma once

// Preemption: the cluster took a rank (its pod evicted, with the DisruptionTarget condition, or
// deleted by someone else), a pod of a running gang vanished, or a trainer checkpointed at the
// preemption sync point and exited kPreemptedExitCode (76). The gang restarts without counting
// against maxRestarts, unless a failure rule (failure_policy.h) matches the pod taken.

#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// Decides when it restarted the gang (or a rule decided).
Verdict HandlePreemption(DecisionPass& pass);

}  // namespace cohort::op
