#pragma once

// What the reconciler should do for one DistributedJob, given the pods it observes: a pure
// function, so that every rule (phases, failure policy, preemption vs failure, suspend, deadline,
// TTL) is tested in a table without a cluster. Decide() runs the policies in turn
// (lifecycle_policy.h, old_pods_policy.h, startup_policy.h, preemption_policy.h,
// failure_policy.h, hang_policy.h), each with its own table test, until one decides.
//
//            create pods                  every rank Succeeded
//  Pending -------------> Running ------------------------------> Succeeded
//     ^                     |  a rank failed (restarts < max)
//     |   backoff passed,   v  or was preempted / evicted
//     +----- old pods --- Restarting
//            gone           |  a rank failed with restarts == max, deadline passed
//                           +------------------------------------> Failed
//  spec.suspend: pods deleted -> Suspended; resume -> Pending (a new restart attempt)
//
// Gang semantics: any rank failing ends the restart attempt; every pod of it is deleted and the
// next restart attempt (status.restart_attempt + 1) is created after the backoff. A preemption (the
// pod's DisruptionTarget condition, a pod deleted by someone else, or the trainer exiting with
// kPreemptedExitCode after its checkpoint) restarts the gang without counting against
// maxRestarts. spec.failurePolicy.rules (failure_policy.h) may decide otherwise for the pod that
// ended the attempt: the first rule that matches it fails the job, restarts it counted, or
// restarts it without counting.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "common/attempt_layout.h"
#include "common/exit_codes.h"
#include "common/rfc3339.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/observed_pod.h"

namespace cohort::op {

// The exit statuses libdist documents (common/exit_codes.h).
using ::cohort::kPeerFailureExitCode;
using ::cohort::kPreemptedExitCode;

struct Event {
  std::string type;  // "Normal" or "Warning".
  std::string reason;
  std::string message;
  bool operator==(const Event&) const = default;
};

// Why the gang restarted, for the operator's per-job metrics (docs/metrics.md): one of the failure
// causes (common/failure_cause.h), and when the failure happened (the failing container's finish
// time; InfinitePast when unknown, e.g. for an eviction).
struct GangRestart {
  FailureCause cause = FailureCause::kUnspecified;
  absl::Time failed_at = absl::InfinitePast();
  // What kind of restart (status.lastRestartKind): one of conditions.h's restart_kind.
  std::string kind;
  bool in_place = false;  // Carried out in place (status.lastRestartStrategy).
  // In place: the pods replaced alone (the others stay).
  std::vector<std::string> replaced = {};

  // The cause's metric label ("crash", "oom", "hung", ...: common/failure_cause.h).
  const char* cause_label() const { return InfoOf(cause).label; }
};

// The cause of a failure whose root is `root`: the rank that failed itself (oom, signal, crash),
// or a follower whose last log line names the cause libdist was told ("[cause: heartbeat
// timeout]").
FailureCause RestartCause(const ObservedPod& root);

struct Decision {
  std::vector<int32_t> create_ranks;  // Pods of status.restart_attempt to create.
  // Restarting in place, pods of status.restart_attempt to create for ranks whose pod was replaced
  // alone (the others stay): under a name of their own (ReplacementPodName), so that the pod they
  // replace may still be terminating.
  std::vector<int32_t> replace_ranks;
  // Restarting in place: order this attempt from the job's attempt hub (the pods stay).
  std::optional<int32_t> start_attempt;
  // With start_attempt: spares that take the slots of pods that are gone, from that attempt on
  // (pod index, spare pod name); and an elastic job's layout of it (the pods it runs).
  std::vector<std::pair<int32_t, std::string>> spare_assignments;
  std::optional<AttemptLayout> start_layout;
  // An elastic job's resize: ask the processes of this attempt (the running one) to stop at a
  // common step, with the reason for the log.
  std::optional<std::pair<int32_t, std::string>> drain_attempt;
  // Hot spares: spare pods to label as holding a slot (pod name -> pod index; their restart attempt
  // label becomes status.restart_attempt), before start_attempt is ordered; spare pods to create
  // (SparePodName(job, n) for each n).
  std::vector<std::pair<std::string, int32_t>> relabel_spares;
  std::vector<int32_t> create_spares;
  std::vector<std::string> delete_pods;  // Pods to delete.
  // Pods to delete with grace period 0: of an earlier restart attempt, still terminating long
  // after their grace period (their node is lost: nothing will confirm their deletion).
  std::vector<std::string> force_delete_pods;
  bool delete_job = false;  // ttlSecondsAfterFinished passed.
  std::optional<absl::Duration> requeue_after;
  DistributedJobStatus status;         // The status to write (once, at the end of the pass).
  std::vector<Event> events;           // To emit after the status write succeeded.
  std::optional<GangRestart> restart;  // Set when this pass restarts the gang.
};

// Backoff before restart number `restart` (1-based): restartBackoff doubling, capped at 5 min.
absl::Duration RestartBackoff(const DistributedJobSpec& spec, int32_t restart);

// The operator's settings that Decide() applies to every job.
struct DecideOptions {
  // A pod of an earlier restart attempt still terminating this long after its grace period
  // ended is force-deleted (cohort-operator --force-delete-after; a negative value: never).
  absl::Duration force_delete_after = absl::Seconds(60);
};

struct AttemptView;
// `view`: what the job's attempt hub said last (spec.restartStrategy: InPlace), or null when
// nothing was heard from it (then no restart is carried out in place).
Decision Decide(const DistributedJob& job, const std::vector<ObservedPod>& pods, absl::Time now,
                const DecideOptions& options = {}, const AttemptView* view = nullptr);

}  // namespace cohort::op
