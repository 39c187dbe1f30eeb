#pragma once

// The words a DistributedJob's status and Events are made of (docs/operator.md, "Conditions"):
// one definition each, so that no policy spells one differently and no behaviour hangs on a
// reason's spelling.

namespace cohort::op {

// status.conditions[].type
namespace condition {
inline constexpr char kSpecValid[] = "SpecValid";
inline constexpr char kRunning[] = "Running";
inline constexpr char kRestarting[] = "Restarting";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kFailed[] = "Failed";
inline constexpr char kSuspended[] = "Suspended";
inline constexpr char kScheduled[] = "Scheduled";
// Ranks of the running attempt made no progress for longer than the hang timeout (the attempt
// hub's detector; docs/faults.md, "Hung ranks").
inline constexpr char kHung[] = "Hung";
// An elastic job (spec.elastic; elastic_policy.h): the running attempt has fewer replica groups
// than spec.replicas asks (True: PodsLost, or WaitingForPods while the next attempt waits for
// them; False: FullSize); a resize drains the running attempt (True: Draining; False: Resized).
inline constexpr char kShrunk[] = "Shrunk";
inline constexpr char kResizing[] = "Resizing";
}  // namespace condition

// status.conditions[].reason and Event reasons.
namespace reason {
inline constexpr char kValid[] = "Valid";
inline constexpr char kInvalidSpec[] = "InvalidSpec";
inline constexpr char kStarted[] = "Started";                  // Event: pods of an attempt created.
inline constexpr char kAllRanksRunning[] = "AllRanksRunning";  // Condition Running.
inline constexpr char kRunning[] = "Running";                  // Event: every rank runs.
inline constexpr char kCompleted[] = "Completed";
inline constexpr char kSuspended[] = "Suspended";
inline constexpr char kResumed[] = "Resumed";
inline constexpr char kDeadlineExceeded[] = "DeadlineExceeded";
inline constexpr char kRestarting[] = "Restarting";  // Condition Running while restarting.
inline constexpr char kRestarted[] = "Restarted";    // Condition Restarting once it ended.
inline constexpr char kFailure[] = "Failure";        // Condition Restarting: a counted restart.
inline constexpr char kPreemption[] = "Preemption";  // Condition Restarting: a preemption.
inline constexpr char kFailurePolicy[] = "FailurePolicy";
inline constexpr char kMaxRestartsExceeded[] = "MaxRestartsExceeded";
inline constexpr char kGangRestart[] = "GangRestart";  // Event: a failure restarts the gang.
inline constexpr char kPreempted[] = "Preempted";      // Event: a preemption restarts the gang.
// Event: a restart carried out in place (the pods stay); its message names the cause as
// GangRestart's and Preempted's do.
inline constexpr char kRestartedInPlace[] = "RestartedInPlace";
// Event (Warning): spec.restartStrategy is InPlace but this restart recreates the pods, and why.
inline constexpr char kRecreatingGang[] = "RecreatingGang";
// Event (Warning): restarting in place, a pod that went while the others waited for the next
// attempt is replaced alone.
inline constexpr char kReplacingPod[] = "ReplacingPod";
inline constexpr char kForceDeleted[] = "ForceDeleted";
// Hot spares (spare_policy.h), Events: a spare takes a lost pod's slot; a spare that failed or is
// no longer wanted is deleted (and replaced, when wanted).
inline constexpr char kSpareTakesSlot[] = "SpareTakesSlot";
inline constexpr char kReplacingSpare[] = "ReplacingSpare";
inline constexpr char kNoSpareForSlot[] = "NoSpareForSlot";
inline constexpr char kSchedulingGated[] = "SchedulingGated";  // Condition Scheduled: admission.
inline constexpr char kUnschedulable[] = "Unschedulable";      // Condition Scheduled: no room.
inline constexpr char kWaitingForScheduler[] = "WaitingForScheduler";  // Condition Scheduled.
inline constexpr char kAllPodsScheduled[] = "AllPodsScheduled";        // Condition Scheduled.
inline constexpr char kPodGroupUnavailable[] = "PodGroupUnavailable";  // Event: no PodGroup made.
// Condition Hung, and its Warning Event (once per hang): which ranks hang, and where each waits.
inline constexpr char kHangDetected[] = "HangDetected";
inline constexpr char kRecovered[] = "Recovered";  // Condition Hung: no rank of the attempt hangs.
// A hang ended the attempt: condition Failed (spec.hangPolicy Fail) or Restarting (Restart), and
// the termination reason spec.failurePolicy.rules see (onTerminationReasons: [Hung]).
inline constexpr char kHung[] = "Hung";
// Elastic replica groups (elastic_policy.h). Conditions Shrunk: PodsLost, WaitingForPods,
// FullSize; Resizing: Draining, Resized; Restarting: Resize. Events: Shrunk (Warning) and Grew
// name the groups; Resizing says why the attempt drains.
inline constexpr char kPodsLost[] = "PodsLost";
inline constexpr char kWaitingForPods[] = "WaitingForPods";
inline constexpr char kFullSize[] = "FullSize";
inline constexpr char kDraining[] = "Draining";
inline constexpr char kResized[] = "Resized";
inline constexpr char kResize[] = "Resize";
inline constexpr char kShrunk[] = "Shrunk";
inline constexpr char kGrew[] = "Grew";
inline constexpr char kResizing[] = "Resizing";
}  // namespace reason

// Event types.
namespace event_type {
inline constexpr char kNormal[] = "Normal";
inline constexpr char kWarning[] = "Warning";
}  // namespace event_type

// status.lastRestartKind: what the last gang restart was. Only a counted failure's backoff
// grows with status.restarts.
namespace restart_kind {
inline constexpr char kFailure[] = "Failure";
inline constexpr char kUncountedFailure[] = "UncountedFailure";
inline constexpr char kPreemption[] = "Preemption";
inline constexpr char kResize[] = "Resize";  // An elastic job's resize: no backoff, not counted.
}  // namespace restart_kind

// status.lastRestartStrategy: how the last gang restart was carried out.
namespace restart_strategy {
inline constexpr char kInPlace[] = "InPlace";
inline constexpr char kRecreate[] = "Recreate";
}  // namespace restart_strategy

}  // namespace cohort::op
