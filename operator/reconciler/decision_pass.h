#pragma once

// One Decide() in progress, shared by the policies it runs in turn (lifecycle_policy.h,
// old_pods_policy.h, startup_policy.h, preemption_policy.h, failure_policy.h, hang_policy.h): what
// each reads (the job, its pods split by restart attempt, the time, the operator's options), what
// each writes (the Decision), and the steps several of them take (finish the job, restart the
// gang).

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/attempt_view.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

// What a policy did: decided the pass (later policies do not run), or left it to the next.
enum class Verdict { kContinue, kDecided };

class DecisionPass {
 public:
  DecisionPass(const DistributedJob& job, const std::vector<ObservedPod>& pods, absl::Time now,
               const DecideOptions& options, const AttemptView* view = nullptr);

  const DistributedJob& job;
  const DistributedJobSpec& spec;
  const absl::Time now;
  const DecideOptions& options;
  Decision decision;
  DistributedJobStatus& status;  // decision.status, which starts as the job's.
  // What the job's attempt hub said last (restarting in place), or null.
  const AttemptView* view;
  // The pods of status.restart_attempt by rank, and those of earlier attempts; restarting in
  // place, the pods of the gang that wait for status.restart_attempt to start (by rank).
  std::vector<const ObservedPod*> current;
  std::vector<const ObservedPod*> old;
  std::vector<const ObservedPod*> waiting;
  // Hot spares: the spare pods that hold no slot (spare_policy.h). One given a slot in this pass
  // leaves the list.
  std::vector<const ObservedPod*> spares;

  // Whether the running attempt runs pod index `rank`: every slot of spec.replicas, but for an
  // elastic job whose attempt (the hub's layout) leaves it out (elastic_policy.h).
  bool Runs(int32_t rank) const;
  // The pods the running attempt runs (spec.replicas, or its layout's).
  int32_t RunningPods() const;

  void SetCondition(const char* type, bool is_true, const std::string& reason,
                    const std::string& message);
  void Emit(const char* type, const char* reason, const std::string& message);
  // Look again after `after` at the latest (the earliest of every request).
  void Requeue(absl::Duration after);
  // Deletes the pods not already terminating (each once in a pass).
  void DeleteAll(const std::vector<const ObservedPod*>& which);
  // Succeeded or Failed for good, with its condition and Event.
  void Finish(Phase phase, const char* reason, const std::string& message);
  // Ends this restart attempt and restarts the gang as the next one after `backoff`: in place
  // when PlanInPlace() finds no blocker, else by deleting the pods (through RecreateInstead(),
  // with a RecreatingGang Event, when the spec asked for InPlace; in_place_policy.h). `why` goes
  // into the conditions, `why` + `what_next` into the Event (RestartedInPlace in place, else
  // `event_reason`).
  void RestartGang(const char* kind, const char* condition_reason, const char* event_type,
                   const char* event_reason, const std::string& why, const std::string& what_next,
                   GangRestart cause, absl::Duration backoff);
  // A restart counted against maxRestarts, or Failed when none is left.
  void CountedRestart(const std::string& why, const char* condition_reason, GangRestart cause);
  // status.ready/active/succeeded/failed from the current pods; status.spares, readySpares and
  // slots from the spares and the pods of the gang.
  void Count();

 private:
  std::set<std::string> deleting_;  // Whom decision.delete_pods names.
};

// At most `max` bytes of `text`, cut at a character boundary: a status or Event with half a UTF-8
// character is not valid JSON text, and the API client cannot serialize it.
absl::string_view TruncateUtf8(absl::string_view text, size_t max);
// "rank 3 (pod demo-3)", or with several processes per pod "pod demo-1 (ranks 2-3)".
std::string Who(int32_t pod_index, const std::string& pod_name, int32_t per_pod);
// Who, and how its trainer ended: exit code, signal, the last line of its termination message.
std::string Describe(const ObservedPod& pod, int32_t per_pod);
// What its trainer's exit means (common/exit_codes.h); a pod that failed without an exit code
// failed by itself (kError), and one whose trainer has not ended is kSucceeded: no cause.
ExitKind ExitKindOf(const ObservedPod& pod);
// The pod among `pods` whose trainer's exit caused the failure (RootCause), or null.
const ObservedPod* RootCausePod(const std::vector<const ObservedPod*>& pods);
// Its trainer exited kPeerFailureExitCode (75): it only followed another rank's failure.
bool Follower(const ObservedPod& pod);
// Its trainer exited non-zero, or the pod failed without saying how.
bool Failed(const ObservedPod& pod);

}  // namespace cohort::op
