#include "operator/reconciler/lifecycle_policy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rfc3339.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/old_pods_policy.h"

namespace cohort::op {

Verdict KeepFinished(DecisionPass& pass) {
  DistributedJobStatus& st = pass.status;
  if (st.phase != Phase::kSucceeded && st.phase != Phase::kFailed) return Verdict::kContinue;
  // Its pods stay (their logs), but not one stuck terminating on a lost node (a pod replaced
  // alone while it restarted in place).
  std::vector<const ObservedPod*> all = pass.current;
  all.insert(all.end(), pass.old.begin(), pass.old.end());
  all.insert(all.end(), pass.waiting.begin(), pass.waiting.end());
  ForceDeleteStuckPods(pass, all);
  if (const std::optional<int64_t>& ttl = pass.spec.ttl_seconds_after_finished) {
    absl::Time done = ParseRfc3339(st.completion_time).value_or(pass.now);
    absl::Time expiry = done + absl::Seconds(*ttl);
    if (pass.now >= expiry) {
      pass.decision.delete_job = true;
    } else {
      pass.Requeue(expiry - pass.now);
    }
  }
  return Verdict::kDecided;
}

Verdict CheckSpec(DecisionPass& pass) {
  std::vector<std::string> errors = Validate(pass.job);
  if (errors.empty()) {
    pass.SetCondition(condition::kSpecValid, true, reason::kValid, "");
    return Verdict::kContinue;
  }
  std::string message = absl::StrJoin(errors, "; ");
  const Condition* before = FindCondition(pass.status.conditions, condition::kSpecValid);
  if (before == nullptr || before->status != "False" || before->message != message) {
    pass.Emit(event_type::kWarning, reason::kInvalidSpec, message);
  }
  pass.SetCondition(condition::kSpecValid, false, reason::kInvalidSpec, message);
  return Verdict::kDecided;
}

Verdict SuspendOrResume(DecisionPass& pass) {
  DistributedJobStatus& st = pass.status;
  if (pass.spec.suspend) {
    pass.DeleteAll(pass.current);
    if (st.phase != Phase::kSuspended) {
      st.phase = Phase::kSuspended;
      pass.SetCondition(condition::kSuspended, true, reason::kSuspended,
                        "spec.suspend is true: the pods are deleted");
      pass.SetCondition(condition::kRunning, false, reason::kSuspended, "");
      pass.Emit(event_type::kNormal, reason::kSuspended,
                "deleted the pods; set spec.suspend to false to resume");
    }
    return Verdict::kDecided;
  }
  if (st.phase == Phase::kSuspended) {
    ++st.restart_attempt;
    st.phase = Phase::kPending;
    pass.SetCondition(condition::kSuspended, false, reason::kResumed, "");
    pass.Emit(event_type::kNormal, reason::kResumed,
              absl::StrCat("starting restart attempt ", st.restart_attempt));
    pass.DeleteAll(pass.current);
    pass.old.insert(pass.old.end(), pass.current.begin(), pass.current.end());
    pass.current.clear();
  }
  return Verdict::kContinue;
}

Verdict EnforceDeadline(DecisionPass& pass) {
  const std::optional<int64_t>& seconds = pass.spec.active_deadline_seconds;
  if (!seconds) return Verdict::kContinue;
  std::optional<absl::Time> start = ParseRfc3339(pass.status.start_time);
  if (!start) return Verdict::kContinue;
  absl::Time deadline = *start + absl::Seconds(*seconds);
  if (pass.now < deadline) {
    pass.Requeue(deadline - pass.now);
    return Verdict::kContinue;
  }
  pass.DeleteAll(pass.current);
  pass.Finish(Phase::kFailed, reason::kDeadlineExceeded,
              absl::StrCat("the job ran longer than activeDeadlineSeconds (", *seconds, ")"));
  return Verdict::kDecided;
}

}  // namespace cohort::op
