#pragma once

// The job's life around its training: a finished job kept until its TTL, an invalid spec,
// suspend and resume, and activeDeadlineSeconds.

#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// Succeeded or Failed: keeps the pods (for their logs) and deletes the job once
// ttlSecondsAfterFinished passed. Decides every finished job's pass.
Verdict KeepFinished(DecisionPass& pass);
// SpecValid: an invalid spec creates nothing (the condition names each problem; the Event is
// emitted once per distinct problem). Decides when invalid.
Verdict CheckSpec(DecisionPass& pass);
// spec.suspend: deletes the pods (Suspended; decides). Resuming starts the next restart attempt
// and treats the current pods as old ones (continues).
Verdict SuspendOrResume(DecisionPass& pass);
// activeDeadlineSeconds from status.startTime: past it the job fails (decides); before it, the
// pass looks again when it is due.
Verdict EnforceDeadline(DecisionPass& pass);

}  // namespace cohort::op
