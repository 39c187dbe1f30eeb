#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "localcluster/kubelet/container.h"
#include "localcluster/kubelet/pod_runtime.h"

namespace cohort::local {

// What the pod worker reports of its pod besides its containers.
struct PodState {
  std::string phase = "Pending";
  // Failed: status.reason and status.message; before the containers start, the reason they wait
  // for (ContainerCreating).
  std::string reason;
  std::string message;
  bool initialized = false;  // Every init container (but native sidecars) has succeeded.
  absl::Time start_time;
};

// status.(init)containerStatuses[] of one container: waiting (CrashLoopBackOff while its restart
// waits, else `pod_reason` or PodInitializing), running or terminated, with its containerID.
nlohmann::json ContainerStatus(const Container& c, const std::string& container_id,
                               const std::string& pod_reason);

// Writes the pod's status: phase, the conditions the kubelet owns (PodScheduled, Initialized,
// ContainersReady, Ready; others, such as DisruptionTarget, are kept), addresses, start time and
// container statuses. Only to the pod object of `pod`'s uid (a successor may have taken its
// name), and only when something changed. Errors are left for the next write to make up for.
void WritePodStatus(kube::KubeClient* client, const nlohmann::json& pod, const std::string& address,
                    const std::string& host_ip, const PodState& state,
                    const std::vector<Container>& containers, const PodRuntime& runtime);

}  // namespace cohort::local
