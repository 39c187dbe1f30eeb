#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/pod_runtime.h"
#include "localcluster/kubelet/podman.h"

namespace cohort::local {

// The label value that marks a node's podman pods (kNodeLabel), for its PodReaper.
std::string NodeLabelValue(const KubeletOptions& options);

// ContainerRuntime::kPodman: a pod's containers as podman containers (kubelet.h), through the
// podman command line (podman.h). The sandbox is a podman pod with the pod's address on the
// cluster's podman network and its hostname, plus the pod's /etc/hosts; each container is created
// from an image in the local store with the pod's volumes bind-mounted and its security context
// applied, then run by an attached podman client whose output goes to the container's log.
class PodmanRuntime : public PodRuntime {
 public:
  PodmanRuntime(const KubeletOptions& options, RuntimePod pod);

  absl::Status CreateSandbox() override;
  void UpdateSandbox() override { WriteHostsFile(); }  // When the cluster's names changed.
  void RemoveSandbox() override;
  // A container's image and podman give it PATH, HOME and HOSTNAME.
  std::map<std::string, std::string> BaseEnvironment() const override { return {}; }
  // Containers have the real mounts and the pod's own address: nothing to change.
  void CompleteEnvironment(const nlohmann::json&,
                           std::map<std::string, std::string>&) const override {}
  absl::Status StartContainer(const nlohmann::json& container,
                              std::map<std::string, std::string> env, const std::string& log_path,
                              RuntimeContainer& c) override;
  std::string StartErrorReason(const absl::Status& error) const override;
  void Signal(RuntimeContainer& c, int sig) override;
  std::optional<ContainerExit> Reap(RuntimeContainer& c) override;
  pid_t RootPid(RuntimeContainer& c) override;
  std::string ContainerId(const RuntimeContainer& c) const override;

 private:
  // The pod's /etc/hosts, as a kubelet writes it: localhost, the pod's own names, then the
  // cluster's hosts file (standing in for cluster DNS). Rewritten in place (the containers
  // bind-mount this very file) whenever the text changes: the new text over the old, then cut to
  // its length, so that a reader meanwhile never sees an empty file. The cluster's file is read
  // only when it was replaced (the scheduler renames a new file over it: a new inode), not on
  // every call of the pod's 50 ms loop.
  void WriteHostsFile();
  // The container's security context over the pod's (container fields win), as podman options.
  // FailedPrecondition where Kubernetes refuses to start it (runAsNonRoot and a root user).
  absl::Status ApplySecurityContext(const nlohmann::json& container, ContainerSpec& spec) const;

  const KubeletOptions& options_;
  const RuntimePod pod_;
  std::string sandbox_;  // The podman pod; empty: none (not created yet, or removed).
  std::string hosts_path_;
  std::string hosts_text_;  // What it holds.
  std::tuple<ino_t, off_t, int64_t>
      hosts_version_;  // The cluster file it copied: inode, size, mtime.
};

}  // namespace cohort::local
