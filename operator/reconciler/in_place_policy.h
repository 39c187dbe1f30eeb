#pragma once

// Restarting in place (spec.restartStrategy: InPlace; docs/operator.md, "Restarting in place").
// The pods of the gang stay; what their processes do comes from the job's attempt hub on rank
// 0's sidecar (coordination/attempts/attempt_hub.h), not from the pods' container statuses:
//
//   attempt n running --a pod's processes ended (the hub's AttemptEnd)--> the failure policies
//   judge it as if the pod's trainer container had ended so --> RestartGang: in place when
//   InPlaceBlocker() finds nothing (else the pods are recreated, with an Event saying why) -->
//   after the backoff, StartInPlace() orders attempt n+1 from the hub --> the hub says n+1 runs.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

class DecisionPass;
enum class Verdict;

// What the job's attempt hub said last.
struct AttemptView {
  // False while the operator watches the hub but has heard nothing yet (it just started, or rank
  // 0's sidecar does not answer): nothing below is known, only since when it waits.
  bool heard = true;
  absl::Time watching_since = absl::InfinitePast();
  uint64_t hub_incarnation = 0;
  int32_t attempt = 0;  // The attempt the pods' processes run (or last ran).
  // How each pod's processes ended in `attempt`, by pod index (absent: still running).
  struct End {
    int32_t exit_code = 0;
    std::string reason;
    std::string message;
    absl::Time finished_at = absl::InfinitePast();
  };
  std::map<int32_t, End> ends;
  // The pods whose sidecar follows the hub now (a pod on a lost node, or whose sidecar died,
  // does not), and those whose sidecar followed it at some time since the operator watches it
  // (one that did and follows no more is gone; one that never did may still be starting).
  std::set<int32_t> following;
  std::set<int32_t> followed;
  // Hot spares whose sidecar follows the hub now, holding no slot, by pod name.
  std::set<std::string> spares;
  bool connected = false;  // The stream is up now (else: what it said before it broke).

  // A hang the hub's detector found in `attempt` (docs/faults.md, "Hung ranks"): ranks that made
  // no progress for longer than their timeout. Absent: none (or it cleared).
  struct Hang {
    uint64_t id = 0;  // New per hang the hub found (a later one has a larger id).
    int32_t attempt = 0;
    absl::Time detected_at = absl::InfinitePast();
    struct Rank {
      int32_t rank = 0;
      int32_t pod_index = 0;
      int32_t local = 0;  // Its index among its pod's processes.
      std::string where;  // "train.py:88 in step: time.sleep(3600)" ("" when unknown).
    };
    std::vector<Rank> outliers;  // The ranks named as hung, the likeliest cause first.
    // Every other rank, grouped by where it waits ("all_reduce at train.py:91").
    struct Group {
      std::vector<int32_t> ranks;
      std::string where;
    };
    std::vector<Group> groups;
    // Evidence: every pod's processes dumped their stacks (or the hub stopped waiting for them).
    bool dumps_complete = false;
    int32_t pods_dumped = 0;
    int32_t pods_total = 0;
    std::string dumps_dir;  // Where each pod keeps them ("/run/cohort/dumps/attempt-0").
  };
  std::optional<Hang> hang;
};

// Puts what the hub said onto the pods: a pod of the gang (not being deleted, created for
// `view.attempt` or before) runs `view.attempt`; if its trainer container still runs, it is
// `in_place`, and its processes' end in that attempt (if any) reads as its trainer's exit.
void ApplyAttemptView(const AttemptView& view, std::vector<ObservedPod>& pods);

// How long the operator waits to hear from a job's hub before it takes the pods that restarted in
// place for an earlier attempt's (and recreates them); and how long after a pod started its
// sidecar may take to follow the hub before the pod is taken for gone.
inline constexpr absl::Duration kHubPatience = absl::Seconds(30);

// How the gang restarts in place, or why it cannot. It cannot when the job wants Recreate, its
// trainer has no command, the hub is not known or not reachable, rank 0's pod cannot stay (it
// hosts the coordination service and the hub), or a pod must be replaced and the job is
// gang-scheduled (spec.scheduling). Otherwise every pod stays but those that must be replaced
// alone: missing, being deleted, evicted or preempted, not following the hub (its sidecar stopped
// following, or never did within kHubPatience of the pod's start: it or its node is gone), not
// ready without having ended its processes (its node may be lost), or with its trainer container
// ended. A pod that started less than kHubPatience ago and whose sidecar did not follow yet
// stays: StartInPlace waits for it.
struct InPlacePlan {
  std::string blocker;  // Why the gang cannot restart in place ("" when it can).
  // The pods replaced alone (null: the rank has no pod), and why, as "pod <name> <why>".
  std::vector<std::pair<const ObservedPod*, std::string>> replaced;
};
InPlacePlan PlanInPlace(const DecisionPass& pass);

// While Pending after an in-place restart: replaces alone a pod (not rank 0's) that went while it
// waited, creates the replacements (Decision::replace_ranks), waits for a pod whose sidecar did
// not follow yet (up to kHubPatience after the pod started) and for every staying pod to end its
// processes of the last attempt (up to kHubPatience after the backoff), then orders the attempt
// from the hub. Recreates every pod instead if rank 0's went meanwhile.
Verdict StartInPlace(DecisionPass& pass);

// Pending after an in-place restart whose staying pods already run the attempt: a rank without a
// pod gets a replacement (Decision::replace_ranks). False, doing nothing, when that is not the
// job's case (the pods are created the usual way).
bool CreateReplacementsInPlace(DecisionPass& pass);

// Before anything judges pods by their restart-attempt label: while the hub of a job that
// restarted in place was not heard from yet (the operator just started), its pods are not an
// earlier attempt's; waits up to kHubPatience for it. A hub that answers with an earlier attempt
// than the running one was restarted with rank 0's sidecar: the pods are recreated, saying why.
Verdict AwaitHub(DecisionPass& pass);

}  // namespace cohort::op
