#pragma once

// Elastic replica groups (spec.elastic; docs/operator.md, "Elastic replica groups"). A newcomer's
// question: "a node is lost and no pod can take its place: what does an elastic job do, and how
// does it get its group back?"
//
//   a pod is lost --the failure policies--> the gang restarts in place (counted once, as any
//   failure), its pod replaced as today (a spare first, then a replacement pod)
//   StartInPlace, before it orders the next attempt --ElasticStart--> every replica group whose
//     pods all follow the attempt hub runs; a group with a pod that does not (its replacement is
//     Pending) is waited for until shrinkAfterSeconds after the restart began, then left out
//     (never group 0, which holds rank 0; never below minReplicas: then the job waits): the
//     attempt's layout (common/attempt_layout.h) goes to the hub with the order, which tells
//     every pod its place (ranks renumbered densely) or that it is idle
//   running without group g --ResizeElastic--> once g's pods all follow again (or spec.replicas
//     changed: kubectl scale), the hub drains the attempt (every rank stops at the preemption
//     sync point, checkpoints, exits 76); once they ended, the gang restarts in place at the new
//     size, uncounted (status.lastRestartKind Resize)
//   every pass --KeepElastic--> status.replicas, replicaGroups and droppedReplicaGroups from the
//     hub's layout, the Shrunk condition and the Shrunk/Grew Events when they change, and a pod
//     for every slot that has none (the dropped groups' and, after a scale up, the new ones)
//
// The pods of a dropped group stay: those that survived idle (cohort-launch runs nothing until an
// attempt places them again), so they rejoin without being scheduled again; a Pending
// replacement stays Pending, asking for the capacity.

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/attempt_layout.h"

namespace cohort::op {

class DecisionPass;
enum class Verdict;

// How long a drained attempt's ranks may take to reach the preemption sync point and exit
// before the next attempt is ordered anyway (cohort-launch stops what is left; the steps since
// their last checkpoint are lost).
inline constexpr absl::Duration kDrainPatience = absl::Seconds(60);

// An elastic job, in StartInPlace just before it orders the next attempt: sets the attempt's
// layout (Decision::start_layout). False when the order must wait (a group's pods may still come
// within shrinkAfterSeconds, or leaving them out would go below minReplicas): requeued.
bool ElasticStart(DecisionPass& pass);

// An elastic job whose attempt runs: a drained resize whose ranks ended (or that ran out of
// kDrainPatience) restarts the gang at the new size; a dropped group whose pods are all back, or
// a spec.replicas the attempt does not run (kubectl scale), drains the attempt. kContinue when
// neither (and for a job that is not elastic).
Verdict ResizeElastic(DecisionPass& pass);

// After the policies, for an elastic job: the status from the hub's layout, the Shrunk
// condition and Events, and a pod for every slot without one.
void KeepElastic(DecisionPass& pass);

}  // namespace cohort::op
