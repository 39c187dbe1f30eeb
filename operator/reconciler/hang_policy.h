#pragma once

// Hung ranks (docs/faults.md, "Hung ranks"): the job's attempt hub on rank 0's sidecar runs a
// hang detector and says which ranks of the running attempt made no progress for longer than
// their timeout (AttemptView::hang), and where every rank waits. The operator says so and acts
// as spec.hangPolicy asks:
//
//   hub names a hang --> condition Hung=True (HangDetected), one Warning Event per hang id
//     Alert:         nothing more; the job keeps running
//     Fail/Restart:  wait until the hub says the evidence is complete (dumps_complete: every pod's
//                    stacks, or what came within common/hang_evidence.h's kEvidencePatience of
//                    the detection), or the hub is gone, then
//                    Fail: the job fails (reason Hung)
//                    Restart: spec.failurePolicy.rules see the hung rank's pod as if its trainer
//                             had ended with reason Hung; without a match a counted restart
//                             (cause "hung"), in place where the gang can stay
//   no hang of the running attempt any more (it cleared, or a later attempt runs) --> Hung=False
//   (Recovered)
//
// The operator hears of hangs only from the hub, which it watches for InPlace jobs
// (spec.restartStrategy, Reconciler::ObserveAttempts): without a view nothing here happens.
//
// How a hang is found and who ends it, end to end: each process's progress (the Python start-up
// hook, launcher/python_probe/, or libdist's step reports) -> its pod's sidecar reads it every
// second (sidecar/progress_watch.h) -> rank 0's attempt hub, whose AttemptLedger runs the
// HangDetector (coordination/attempts/attempt_ledger.h, hang_detector.h) and asks every pod for
// its evidence (the files and the one wait: common/hang_evidence.h) -> the operator sees
// AttemptView::hang and decides here -> Restart: the next attempt goes through the hub to every
// pod's cohort-launch, which kills the hung processes (launcher/attempt_loop.h); Fail: the pods
// are deleted and the kubelet kills them.

#include <cstdint>
#include <string>
#include <vector>

#include "operator/reconciler/attempt_view.h"
#include "operator/reconciler/decision_pass.h"

namespace cohort::op {

// "0-4, 6-7": the ranks, sorted, runs of consecutive ones as ranges.
std::string RankRanges(std::vector<int32_t> ranks);

// What the condition and the Event say: the hung ranks first, each with its pod (`pass`'s, or the
// name the pod of that index has), then each group of waiting ranks, e.g. "rank 1 (pod demo-1,
// local 0): train.py:40 in step: time.sleep(1e9); ranks 0, 2-3: all_reduce at train.py:35". Cut
// to a length an Event keeps.
std::string HangMessage(const DecisionPass& pass, const AttemptView::Hang& hang);

// The Hung condition, its Event and spec.hangPolicy for the running attempt (see above). Decides
// while it waits for the evidence and when it fails or restarts the job; with Alert, or when
// nothing hangs, the pass goes on.
Verdict HandleHang(DecisionPass& pass);

}  // namespace cohort::op
