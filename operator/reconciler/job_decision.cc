#include "operator/reconciler/job_decision.h"

#include <algorithm>
#include <climits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/failure_cause.h"
#include "common/termination_message.h"
#include "kube/json_fields.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/failure_policy.h"
#include "operator/reconciler/hang_policy.h"
#include "operator/reconciler/in_place_policy.h"
#include "operator/reconciler/lifecycle_policy.h"
#include "operator/reconciler/old_pods_policy.h"
#include "operator/reconciler/preemption_policy.h"
#include "operator/reconciler/spare_policy.h"
#include "operator/reconciler/startup_policy.h"

namespace cohort::op {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Minutes(5);

using PodPhase = ObservedPod::Phase;

std::optional<int32_t> IntLabel(const nlohmann::json& labels, const char* key) {
  int32_t v;
  if (!absl::SimpleAtoi(kube::StringMember(labels, key), &v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ObservedPod> ObservePod(const nlohmann::json& pod, const std::string& trainer_name) {
  const nlohmann::json& meta = kube::Member(pod, "metadata");
  const nlohmann::json& labels = kube::Member(meta, "labels");
  std::optional<int32_t> rank = IntLabel(labels, kRankLabel);
  std::optional<int32_t> restart_attempt = IntLabel(labels, kRestartAttemptLabel);
  std::string spare = kube::StringMember(labels, kSpareLabel);
  std::string name = kube::StringMember(meta, "name");
  // A pod without a name cannot be acted on (deleting "" would address the whole collection).
  if ((!rank && spare.empty()) || (rank && *rank < 0) || !restart_attempt || name.empty())
    return std::nullopt;
  ObservedPod p;
  p.name = std::move(name);
  p.rank = rank.value_or(-1);
  p.spare = std::move(spare);
  p.restart_attempt = *restart_attempt;
  p.terminating = !kube::Member(meta, "deletionTimestamp").is_null();
  if (std::optional<absl::Time> at = ParseRfc3339(kube::StringMember(meta, "deletionTimestamp"))) {
    p.deletion_deadline = *at;
  }
  p.node = kube::StringMember(kube::Member(pod, "spec"), "nodeName");
  p.ip = kube::StringMember(kube::Member(pod, "status"), "podIP");
  p.gated = !kube::ArrayMember(kube::Member(pod, "spec"), "schedulingGates").empty();
  p.force_deleted =
      kube::IntMember(meta, "deletionGracePeriodSeconds") == std::optional<int64_t>(0);
  const nlohmann::json& status = kube::Member(pod, "status");
  if (std::optional<absl::Time> at = ParseRfc3339(kube::StringMember(status, "startTime")))
    p.started_at = *at;
  std::string phase = kube::StringMember(status, "phase", "Pending");
  p.phase = phase == "Running"     ? PodPhase::kRunning
            : phase == "Succeeded" ? PodPhase::kSucceeded
            : phase == "Failed"    ? PodPhase::kFailed
            : phase == "Pending"   ? PodPhase::kPending
                                   : PodPhase::kUnknown;
  for (const nlohmann::json& c : kube::ArrayMember(status, "conditions")) {
    bool is_true = kube::StringMember(c, "status") == "True";
    std::string type = kube::StringMember(c, "type");
    if (type == "Ready") p.ready = is_true;
    if (type == "DisruptionTarget") p.disruption_target = is_true;
    if (type == "PodScheduled" && kube::StringMember(c, "status") == "False")
      p.unscheduled_reason = kube::StringMember(c, "reason");
    if (!type.empty()) p.conditions.emplace_back(type, kube::StringMember(c, "status"));
  }
  for (const nlohmann::json& cs : kube::ArrayMember(status, "containerStatuses")) {
    if (kube::StringMember(cs, "name") == "cohort-sidecar") continue;
    const nlohmann::json& t = kube::Member(cs, "state", "terminated");
    ObservedPod::ContainerExit exit{kube::StringMember(cs, "name"), std::nullopt, ""};
    if (t.is_object()) {
      std::optional<int64_t> code = kube::IntMember(t, "exitCode");
      if (code && *code >= INT_MIN && *code <= INT_MAX) exit.exit_code = static_cast<int>(*code);
      exit.reason = kube::StringMember(t, "reason");
    }
    p.containers.push_back(std::move(exit));
  }
  for (const nlohmann::json& cs : kube::ArrayMember(status, "containerStatuses")) {
    if (kube::StringMember(cs, "name") == "cohort-sidecar") continue;
    // Kubelets list container statuses by name, not in the template's order.
    if (!trainer_name.empty() && kube::StringMember(cs, "name") != trainer_name) continue;
    p.trainer_name = kube::StringMember(cs, "name");
    const nlohmann::json& t = kube::Member(cs, "state", "terminated");
    if (t.is_object()) {
      std::optional<int64_t> code = kube::IntMember(t, "exitCode");
      if (code && *code >= INT_MIN && *code <= INT_MAX)
        p.trainer_exit_code = static_cast<int>(*code);
      if (std::optional<absl::Time> at = ParseRfc3339(kube::StringMember(t, "finishedAt"))) {
        p.finished_at = *at;
      }
      p.trainer_reason = kube::StringMember(t, "reason");
      p.trainer_message = kube::StringMember(t, "message");
      if (p.trainer_message.empty()) p.trainer_message = p.trainer_reason;
      while (!p.trainer_message.empty() && p.trainer_message.back() == '\n') {
        p.trainer_message.pop_back();
      }
    }
    break;
  }
  return p;
}

FailureCause RestartCause(const ObservedPod& root) {
  const ExitKind kind = ExitKindOf(root);
  if (kind == ExitKind::kFollowed) {
    // The cause libdist told it, from the line its default handler wrote (the log's tail).
    return ParsePeerFailureCause(root.trainer_message).value_or(FailureCause::kUnspecified);
  }
  // kSucceeded: a pod that failed without an exit code.
  return kind == ExitKind::kSucceeded ? FailureCause::kProcessExited : FailureCauseOf(kind);
}

absl::Duration RestartBackoff(const DistributedJobSpec& spec, int32_t restart) {
  return DoublingDelay(spec.restart_backoff, kMaxBackoff, restart);
}

Decision Decide(const DistributedJob& job, const std::vector<ObservedPod>& pods, absl::Time now,
                const DecideOptions& options, const AttemptView* view) {
  // Spares that hold no slot are judged apart (spare_policy.h): no policy of the gang sees them.
  std::vector<ObservedPod> seen, spares;
  for (const ObservedPod& p : pods) (p.rank < 0 ? spares : seen).push_back(p);
  if (view != nullptr && job.spec.restart_strategy == RestartStrategy::kInPlace)
    ApplyAttemptView(*view, seen);
  DecisionPass pass(job, seen, now, options, view);
  for (const ObservedPod& p : spares) pass.spares.push_back(&p);
  if (job.being_deleted)
    return std::move(pass.decision);  // Garbage collection removes the children.
  // In order; the first that decides ends the pass.
  using Policy = Verdict (*)(DecisionPass&);
  static constexpr Policy kPolicies[] = {
      KeepFinished,   // lifecycle: a finished job until its TTL
      CheckSpec,      // lifecycle: nothing runs on an invalid spec
      AwaitHub,       // in place: pods of a later attempt than their label, until the hub is heard
      DeleteOldPods,  // old restart attempts' pods, and those of lost nodes
      SuspendOrResume,     // lifecycle
      EnforceDeadline,     // lifecycle: activeDeadlineSeconds
      EndBackoff,          // startup: the backoff after a restart
      StartInPlace,        // in place: order the next attempt from the hub
      CreateMissingRanks,  // startup
      ReportScheduling,    // startup: waiting for admission or room
      HandlePreemption,    // preemption, or a rule about the pod taken
      HandleFailure,       // the root cause, failure rules, maxRestarts
      HandleHang,          // in place: the hub's hang detector, spec.hangPolicy (a real exit wins)
      CompleteOrMarkRunning,
  };
  for (Policy policy : kPolicies) {
    if (policy(pass) == Verdict::kDecided) break;
  }
  KeepSpares(pass);  // Whatever the gang's policies decided.
  pass.Count();
  return std::move(pass.decision);
}

}  // namespace cohort::op
