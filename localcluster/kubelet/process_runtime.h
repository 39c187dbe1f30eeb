#pragma once

#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/pod_runtime.h"

namespace cohort::local {

// ContainerRuntime::kProcess: a pod's containers as local processes. The image names the program
// (".../cohort-sidecar:0.1" runs cohort-sidecar, found in the build's bin/ directories first).
// There is no sandbox: the pod-network library (LD_PRELOAD) gives each process the pod's address
// and the cluster's names, and paths under the containers' mount paths are rewritten to the pod's
// volume directories, in the environment and the arguments alike.
class ProcessRuntime : public PodRuntime {
 public:
  ProcessRuntime(const KubeletOptions& options, RuntimePod pod);

  absl::Status CreateSandbox() override { return absl::OkStatus(); }
  void UpdateSandbox() override {
  }  // The pod-network library reads the cluster's hosts file itself.
  void RemoveSandbox() override {}
  std::map<std::string, std::string> BaseEnvironment() const override;
  void CompleteEnvironment(const nlohmann::json& container,
                           std::map<std::string, std::string>& env) const override;
  absl::Status StartContainer(const nlohmann::json& container,
                              std::map<std::string, std::string> env, const std::string& log_path,
                              RuntimeContainer& c) override;
  void Signal(RuntimeContainer& c, int sig) override;
  std::optional<ContainerExit> Reap(RuntimeContainer& c) override;
  pid_t RootPid(RuntimeContainer& c) override { return c.process.pid(); }
  std::string ContainerId(const RuntimeContainer& c) const override;

 private:
  // A path under one of the container's mount paths, moved under the pod's directory.
  std::string Remap(const nlohmann::json& container, const std::string& value) const;

  const KubeletOptions& options_;
  const RuntimePod pod_;
};

}  // namespace cohort::local
