#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "operator/client/informer.h"
#include "operator/client/kube_client.h"

namespace cohort::local {

struct KubeletOptions {
  std::string node_name = "local";
  // Each pod's files: <root_dir>/<namespace>_<name>/ (volumes, container logs), and the cluster's
  // hosts file <root_dir>/hosts.
  std::string root_dir;
  // Searched first for container commands (the build's bin/ directory).
  std::vector<std::string> bin_dirs;
  // The LD_PRELOAD library that gives a process its pod's address and DNS names; empty: none.
  std::string pod_network_library;
  // Pod addresses are 127.0.<n>.<m>, from this third octet on.
  int first_subnet = 10;
};

// Runs the pods of the local control plane as local processes, as a kubelet would:
// - binds each new pod to this node and gives it its own loopback address (127.0.x.y);
// - lays out its volumes (emptyDir, secret, configMap, hostPath) under the pod's directory and
//   rewrites mount paths in the containers' environment and arguments to point there;
// - resolves env (value, fieldRef, secretKeyRef, configMapKeyRef) and adds the pod-network
//   variables, so wildcard binds use the pod's address and "<host>.<subdomain>.<ns>.svc"
//   names resolve through the shared hosts file;
// - starts native sidecars (init containers with restartPolicy Always) first and restarts them
//   if they exit, runs other init containers to completion, then the containers; a container
//   without a command runs the image's name (".../cohort-sidecar:0.1" runs cohort-sidecar);
// - probes httpGet readiness, and reports phase, conditions, container states, exit codes and
//   (from the log tail) termination messages;
// - on deletion or eviction sends SIGTERM, then SIGKILL after the grace period, reports the
//   final states and removes the pod.
// Pods must use restartPolicy Never (the only policy cohort-operator creates).
class Kubelet {
 public:
  Kubelet(op::KubeClient* client, KubeletOptions options);
  ~Kubelet();  // Stops every pod's processes.

  // Registers the Node and starts watching pods.
  absl::Status Start();

  // A pod's files (volumes, container logs): <root_dir>/<namespace>_<pod>.
  static std::string PodDir(const std::string& root_dir, const std::string& ns, const std::string& pod);
  // Where a container's output goes: <pod dir>/<container>.log.
  static std::string LogPath(const std::string& root_dir, const std::string& ns, const std::string& pod,
                             const std::string& container);

 private:
  class PodWorker;
  void OnPod(const std::string& type, const nlohmann::json& pod);
  std::string AllocateAddress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteHostsFile() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  op::KubeClient* const client_;
  const KubeletOptions options_;
  std::unique_ptr<op::Informer> informer_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<PodWorker>> workers_ ABSL_GUARDED_BY(mu_);  // By uid.
  std::set<std::string> used_addresses_ ABSL_GUARDED_BY(mu_);
  // Address -> DNS names, for the hosts file.
  std::map<std::string, std::vector<std::string>> names_ ABSL_GUARDED_BY(mu_);
  int next_address_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::local
