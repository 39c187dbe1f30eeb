#include "operator/reconciler/observed_pod.h"

#include <climits>

#include "absl/strings/numbers.h"
#include "common/rfc3339.h"
#include "kube/json_fields.h"
#include "operator/reconciler/children.h"

namespace cohort::op {
namespace {

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

}  // namespace cohort::op
