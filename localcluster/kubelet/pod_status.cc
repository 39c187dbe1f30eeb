#include "localcluster/kubelet/pod_status.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "kube/retry.h"

namespace cohort::local {

using json = nlohmann::json;

json ContainerStatus(const Container& c, const std::string& container_id,
                     const std::string& pod_reason) {
  json state;
  if (c.exit_code && c.restart_at) {
    state["waiting"] = {
        {"reason", "CrashLoopBackOff"},
        {"message",
         absl::StrCat("back-off restarting the failed container (exit code ", *c.exit_code, ")")}};
  } else if (c.exit_code) {
    state["terminated"] = {{"exitCode", *c.exit_code},
                           {"reason", c.reason},
                           {"startedAt", FormatRfc3339(c.started.value_or(absl::Now()))},
                           {"finishedAt", FormatRfc3339(c.finished.value_or(absl::Now()))}};
    if (!c.message.empty()) state["terminated"]["message"] = c.message;
  } else if (c.started) {
    state["running"] = {{"startedAt", FormatRfc3339(*c.started)}};
  } else {
    state["waiting"] = {{"reason", pod_reason.empty() ? "PodInitializing" : pod_reason}};
  }
  return {{"name", c.spec.value("name", "")},
          {"image", c.spec.value("image", "")},
          {"imageID", ""},
          {"containerID", container_id},
          {"ready", c.ready},
          {"started", c.started.has_value() && !c.exit_code},
          {"restartCount", c.restarts},
          {"state", state}};
}

void WritePodStatus(kube::KubeClient* client, const json& pod, const std::string& address,
                    const std::string& host_ip, const PodState& pod_state,
                    const std::vector<Container>& containers, const PodRuntime& runtime) {
  json init_statuses = json::array(), statuses = json::array();
  bool all_ready = !containers.empty();
  for (const Container& c : containers) {
    (c.init ? init_statuses : statuses)
        .push_back(ContainerStatus(c, runtime.ContainerId(c.run), pod_state.reason));
    if (!c.init || c.sidecar) all_ready &= c.ready;
  }
  if (containers.empty()) all_ready = false;
  const bool running = pod_state.phase == "Running";
  const std::pair<const char*, bool> ours[] = {{"PodScheduled", true},
                                               {"Initialized", pod_state.initialized},
                                               {"ContainersReady", running && all_ready},
                                               {"Ready", running && all_ready}};
  const std::string uid = pod["metadata"].value("uid", "");
  // Re-read, keep the conditions others own (DisruptionTarget), write with the version read
  // (again when someone else wrote the pod meanwhile: an eviction).
  auto update = [&](json& current) {
    // A gang restart reuses pod names: once this worker's pod is gone, the name may already
    // belong to its successor, whose status is not this worker's to write.
    if (std::as_const(current)["metadata"].value("uid", "") != uid) return false;
    json status = current.value("status", json::object());
    const absl::Time now = absl::Now();
    for (const auto& [type, value] : ours) {
      kube::SetCondition(status["conditions"],
                         kube::Condition(type, kube::TrueOrFalse(value), "", ""), now);
    }
    status["phase"] = pod_state.phase;
    status["podIP"] = address;
    status["podIPs"] = json::array({{{"ip", address}}});
    status["hostIP"] = host_ip;
    status["startTime"] = FormatRfc3339(pod_state.start_time);
    status["initContainerStatuses"] = init_statuses;
    status["containerStatuses"] = statuses;
    if (!pod_state.reason.empty() && pod_state.phase == "Failed") {
      status["reason"] = pod_state.reason;
      status["message"] = pod_state.message;
    }
    if (current.contains("status") && current["status"] == status) return false;
    current["status"] = status;
    return true;
  };
  // The pod is gone, or the API server unreachable: the next write says it.
  kube::UpdateStatusWith(client, kube::kPods, pod["metadata"].value("namespace", ""),
                         pod["metadata"].value("name", ""), update)
      .IgnoreError();
}

}  // namespace cohort::local
