#pragma once

// Hot spares (spec.spares; docs/operator.md, "Hot spares"): pods beyond the gang, started like its
// pods (their sidecar follows the job's attempt hub, cohort-launch waits) but holding no rank.
// Restarting in place, a ready spare takes the slot of a pod that is gone:
//
//   a pod of the gang is lost --RestartGang (in place)--> after the backoff, StartInPlace finds the
//   slot without a pod --TakeSlotsWithSpares--> the spare is labelled with the slot's rank and the
//   attempt (Decision::relabel_spares) and the attempt is ordered with the assignment
//   (Decision::spare_assignments) --> the hub tells the spare's sidecar, which runs the slot's
//   ranks from that attempt on; KeepSpares creates a new spare in the same pass.
//
// Where no spare is ready (or the slot is pod 0's, which hosts the coordination service and the
// hub), the slot is handled as without spares: a replacement pod, or the gang recreated.
//
// The rest of the flow: a spare pod is built by BuildSparePod (children.h) and named by
// SparePodName (operator/api/child_names.h); its sidecar follows the hub as a spare
// (sidecar/attempt_runner.h, sidecar/spare.h) and the hub's SlotRegistry keeps who holds which
// slot (coordination/attempts/slot_registry.h) -> the reconciler relabels the spare, then orders
// the attempt with the assignment (Reconciler::Apply, reconciler.h) -> the hub tells the spare
// its pod index -> its sidecar re-executes itself as that pod's (sidecar/spare.h) -> its
// cohort-launch, waiting on the launch socket, reconnects and runs the slot's ranks
// (launcher/attempt_loop.h).

#include <cstdint>
#include <set>
#include <vector>

#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/spare_slots.h"

namespace cohort::op {

// The spares that can take a slot now: Running, Ready, not being deleted, their trainer container
// (cohort-launch) not ended, and (restarting in place) following the job's attempt hub as a spare;
// the longest-running first.
std::vector<const ObservedPod*> ReadySpares(const DecisionPass& pass);

// Which ready spare would take each of the slots `lost` (pod indexes without a pod that stays), by
// PlanSpareSlots (spare_slots.h). With a topology (SpareTopology()), a slot's domain is the gang's:
// that of the pods that stay (rank 0's first), each spare's that of its node; required, a spare
// elsewhere (or whose domain is not known) takes no slot.
SlotPlan PlanSlotsForSpares(const DecisionPass& pass, const std::vector<int32_t>& lost);

// Restarting in place: the slots `lost` go to ready spares as PlanSlotsForSpares gives them. Each
// spare taken is labelled with its slot (Decision::relabel_spares), leaves pass.spares, and goes
// into the next start order's assignments; a SpareTakesSlot Event says which (a NoSpareForSlot
// Event, a slot that ready spares could not take: outside its topology domain). Returns the slots
// taken.
std::set<int32_t> TakeSlotsWithSpares(DecisionPass& pass, const std::vector<int32_t>& lost);

// With the start order of status.restart_attempt: the assignments of spares labelled with a slot of
// that attempt in an earlier pass that the hub still lists as spares (the order that gave them the
// slot was not carried out yet). A repeated order's assignments are ignored by the hub.
void AssignLabelledSpares(DecisionPass& pass);

// When the gang is recreated while pods of the next attempt are already there: a pod that began as
// a spare and was given a slot cannot be a fresh pod of the new gang (it is a spare's sidecar, or
// follows as the slot's holder a hub that is going): deleted, and left to DeleteOldPods' list.
void DropSparesHoldingSlots(DecisionPass& pass);

// Before the next attempt is ordered: a spare labelled with a slot of it in an earlier pass that
// can no longer take it (being deleted, evicted, no longer following the hub as a spare: not
// readiness, which flaps while the spare's sidecar restarts as the slot's) is deleted
// (ReplacingSpare), so that its slot is lost again and goes to another spare or a replacement pod.
void CheckLabelledSpares(DecisionPass& pass);

// Every pass, after the gang's policies: keeps spec.spares spares. A spare that failed, ended or
// was evicted is deleted and replaced without touching the gang; spares beyond spec.spares go
// (the newest first); new ones are named on from status.sparesCreated (past any spare seen).
// Under a gang scheduler spares are created only with the gang's pods (into its group), so one
// that failed is replaced when the gang is next created. A finished or suspended job's spares are
// deleted. Sets status.spares, readySpares and slots.
void KeepSpares(DecisionPass& pass);

}  // namespace cohort::op
