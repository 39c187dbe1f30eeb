#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kube/informer.h"
#include "kube/kube_client.h"
#include "localcluster/kubelet/podman.h"

namespace cohort::local {

class PodWorker;  // pod_worker.h

// How the kubelet runs a pod's containers.
enum class ContainerRuntime {
  // Local processes on the pod's loopback address (127.0.x.y), given it by the pod-network
  // library; container images name the program to run.
  kProcess,
  // Real containers: one podman pod per Kubernetes pod on a podman network, from images in the
  // local store (podman.h).
  kPodman,
};

struct KubeletOptions {
  std::string node_name;
  ContainerRuntime runtime = ContainerRuntime::kProcess;
  // kPodman: the cluster's podman network, which also names its podman pods (labels in podman.h).
  std::string podman_network;
  // Pods the node takes (Node status.capacity/allocatable.pods, which the scheduler honours); 0:
  // no limit.
  int64_t max_pods = 0;
  // The node's address (the Node's InternalIP, each pod's status.hostIP).
  std::string node_address = "127.0.0.1";
  // The Lease kube-node-lease/<node> is renewed every quarter of this; the control plane marks
  // the node lost when it has not been renewed for this long.
  absl::Duration lease_duration = absl::Seconds(40);
  // Each pod's files: <root_dir>/<namespace>_<name>/ (volumes, container logs). The cluster's
  // hosts file, which the control plane writes, is <root_dir>/hosts.
  std::string root_dir;
  // Searched first for container commands (the build's bin/ directory).
  std::vector<std::string> bin_dirs;
  // The LD_PRELOAD library that gives a process its pod's address and DNS names; empty: none.
  std::string pod_network_library;
  // The API server as pods reach it (in-cluster config): its https URL and the CA to trust. With
  // kPodman, an address on the podman network's gateway.
  std::string api_server;
  std::string api_ca_pem;
};

// One node of the local control plane: runs the pods bound to it as local processes or, with the
// podman runtime, as containers, as a kubelet would:
// - registers its Node (Ready) and renews its Lease; a killed kubelet is a lost machine: its
//   containers are killed with it (SIGKILL), its Lease stops, and its pods never confirm their
//   deletion;
// - runs a pod once the scheduler has bound it here and given it its loopback address
//   (127.0.x.y, the annotation Scheduler::kPodAddressAnnotation);
// - lays out its volumes (emptyDir, secret, configMap, hostPath) under the pod's directory and
//   rewrites mount paths in the containers' environment and arguments to point there;
// - resolves env (value, fieldRef, secretKeyRef, configMapKeyRef) and adds the pod-network
//   variables, so wildcard binds use the pod's address and "<host>.<subdomain>.<ns>.svc"
//   names resolve through the control plane's hosts file;
// - starts native sidecars (init containers with restartPolicy Always) first and restarts them
//   if they exit, runs other init containers to completion, then the containers; a container
//   without a command runs the image's name (".../cohort-sidecar:0.1" runs cohort-sidecar);
// - probes httpGet readiness, and reports phase, conditions, container states, exit codes and
//   (from the log tail) termination messages;
// - on deletion or eviction sends SIGTERM, then SIGKILL after the grace period, reports the
//   final states and removes the pod.
// - mounts the pod's service account (serviceAccountName, else "default"; not with
//   automountServiceAccountToken: false): a token the API server issues for it (TokenRequest), the
//   API server's CA and the namespace, under the pod's directory, with KUBERNETES_SERVICE_HOST/
//   PORT set, so a program that loads in-cluster config reaches the API server as that account;
// - tells the pod-network library where the service account's mount path lies
//   (COHORT_LOCAL_MOUNTS), so a process reading /var/run/secrets/kubernetes.io/serviceaccount/token
//   reads the pod's copy;
// - restarts containers by the pod's restartPolicy (Always, the default, and OnFailure), at once
//   the first time, then after 10 s, 20 s, ... up to 5 minutes (CrashLoopBackOff meanwhile).
// With the podman runtime (ContainerRuntime::kPodman) a pod is a podman pod with the pod's address
// on the cluster's podman network and its hostname; its containers are created from the images
// in the local store (never pulled: ErrImageNeverPull otherwise), with the pod's volumes as bind
// mounts at their mount paths (read-only for secrets, config maps and the service account),
// command/args as Kubernetes maps them onto ENTRYPOINT/CMD, env, working directory and the
// security context (user, runAsNonRoot, read-only root, capabilities, no-new-privileges); each
// container's /etc/hosts is the pod's own names plus the cluster's hosts file, kept current.
// Signals go through `podman kill`; exit codes come from `podman inspect`; memory limits are
// enforced as for processes (no cgroup limit: not every kernel tells podman of its OOM kills);
// output goes to the same log files. A killed kubelet's podman pods are removed by a helper process
// (PodReaper), as a lost machine's containers die with it.
//
// Where it is done: each pod has a PodWorker (pod_worker.h: its life, restart back-off, memory
// limits) over a PodRuntime (pod_runtime.h), ProcessRuntime (process_runtime.h) or PodmanRuntime
// (podman_runtime.h, over podman.h's commands); volumes.h lays out volumes and the service
// account, probes.h probes readiness, pod_status.h writes the pod's status.
class Kubelet {
 public:
  Kubelet(kube::KubeClient* client, KubeletOptions options);
  ~Kubelet();  // Stops every pod's processes.

  // Registers the Node, starts renewing its Lease and watching pods.
  absl::Status Start();

  // A pod's files (volumes, container logs): <root_dir>/<namespace>_<pod>.
  static std::string PodDir(const std::string& root_dir, const std::string& ns,
                            const std::string& pod);
  // Where a container's output goes: <pod dir>/<container>.log.
  static std::string LogPath(const std::string& root_dir, const std::string& ns,
                             const std::string& pod, const std::string& container);

 private:
  void OnPod(const std::string& type, const nlohmann::json& pod);
  // Renews the Lease and reports Ready again if the control plane marked the node lost.
  void Heartbeat();

  kube::KubeClient* const client_;
  const KubeletOptions options_;
  std::unique_ptr<kube::Informer> informer_;
  PodReaper reaper_;  // kPodman only.
  absl::Notification stop_heartbeat_;
  std::thread heartbeat_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<PodWorker>> workers_ ABSL_GUARDED_BY(mu_);  // By uid.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::local
