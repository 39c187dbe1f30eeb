#pragma once

// Restarting in place (spec.restartStrategy: InPlace; docs/operator.md, "Restarting in place").
// The pods of the gang stay; what their processes do comes from the job's attempt hub on rank
// 0's sidecar (coordination/attempts/attempt_hub.h), not from the pods' container statuses:
//
//   attempt n running --a pod's processes ended (the hub's AttemptEnd)--> the failure policies
//   judge it as if the pod's trainer container had ended so --> DecisionPass::RestartGang: in
//   place when PlanInPlace() finds no blocker, else RecreateInstead() --> after the backoff,
//   StartInPlace() orders attempt n+1 from the hub --> the hub says n+1 runs.
//
// Every way back from in place to recreating the pods goes through RecreateInstead(): the gang
// cannot restart in place (RestartGang), cannot start the attempt in place after all
// (StartInPlace: rank 0's pod went meanwhile), or the hub forgot the attempts or stays silent
// (AwaitHub).
//
// The rest of the flow, in the order an attempt travels: the reconciler applies the order
// (Reconciler::Apply, reconciler.h) through the job's stream to the hub
// (operator/runtime/hub_attempt_watcher.h) -> the hub records it (its AttemptLedger,
// coordination/attempts/attempt_ledger.h) and tells every pod's sidecar, which gives the pod's
// ranks fresh agents (sidecar/attempt_runner.h) -> cohort-launch stops the old processes and
// starts the new ones (launcher/attempt_loop.h). How they end goes back the same way: cohort-launch
// -> its sidecar -> the hub (AttemptEnd) -> the operator (AttemptView, attempt_view.h).

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/attempt_view.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

class DecisionPass;
enum class Verdict;

// Puts what the hub said onto the pods: a pod of the gang (not being deleted, created for
// `view.attempt` or before) runs `view.attempt`; if its trainer container still runs, it is
// `in_place`, and its processes' end in that attempt (if any) reads as its trainer's exit.
void ApplyAttemptView(const AttemptView& view, std::vector<ObservedPod>& pods);

// How long after a pod started its sidecar may take to follow the hub before the pod is taken for
// gone (and replaced alone).
inline constexpr absl::Duration kFirstFollowPatience = absl::Seconds(30);
// How long after the backoff the pods that stay may take to end their processes of the last
// attempt before the next attempt is ordered anyway (cohort-launch stops what is left).
inline constexpr absl::Duration kProcessesEndPatience = absl::Seconds(30);
// How long the operator waits to hear from a job's hub before it takes the pods that restarted in
// place for an earlier attempt's (and recreates them).
inline constexpr absl::Duration kHubSilencePatience = absl::Seconds(30);

// The gang goes back from in place to recreating every pod, because `why` (an Event's words, "the
// attempt hub ... did not answer for 30s"): status.lastRestartStrategy says Recreate, a Warning
// RecreatingGang Event says why, and the pods already there for the next attempt (the pass's
// waiting ones) and those that began as spares and hold a slot go with the old pods.
void RecreateInstead(DecisionPass& pass, const std::string& why);

// How the gang restarts in place, or why it cannot. It cannot when the job wants Recreate, its
// trainer has no command, the hub is not known or not reachable, rank 0's pod cannot stay (it
// hosts the coordination service and the hub), or a pod must be replaced and the job is
// gang-scheduled (spec.scheduling). Otherwise every pod stays but those that must be replaced
// alone: missing, being deleted, evicted or preempted, not following the hub (its sidecar stopped
// following, or never did within kFirstFollowPatience of the pod's start: it or its node is gone),
// not ready without having ended its processes (its node may be lost), or with its trainer
// container ended. A pod that started less than kFirstFollowPatience ago and whose sidecar did not
// follow yet stays: StartInPlace waits for it.
struct InPlacePlan {
  std::string blocker;  // Why the gang cannot restart in place ("" when it can).
  // The pods replaced alone (null: the rank has no pod), and why, as "pod <name> <why>".
  std::vector<std::pair<const ObservedPod*, std::string>> replaced;
};
InPlacePlan PlanInPlace(const DecisionPass& pass);

// While Pending after an in-place restart: replaces alone a pod (not rank 0's) that went while it
// waited, creates the replacements (Decision::replace_ranks), waits for a pod whose sidecar did
// not follow yet (up to kFirstFollowPatience after the pod started) and for every staying pod to
// end its processes of the last attempt (up to kProcessesEndPatience after the backoff), then
// orders the attempt
// from the hub. Recreates every pod instead if rank 0's went meanwhile.
Verdict StartInPlace(DecisionPass& pass);

// Pending after an in-place restart whose staying pods already run the attempt: a rank without a
// pod gets a replacement (Decision::replace_ranks). False, doing nothing, when that is not the
// job's case (the pods are created the usual way).
bool CreateReplacementsInPlace(DecisionPass& pass);

// Before anything judges pods by their restart-attempt label: while the hub of a job that
// restarted in place was not heard from yet (the operator just started), its pods are not an
// earlier attempt's; waits up to kHubSilencePatience for it. A hub that answers with an earlier
// attempt than the running one was restarted with rank 0's sidecar: the pods are recreated, saying
// why.
Verdict AwaitHub(DecisionPass& pass);

}  // namespace cohort::op
