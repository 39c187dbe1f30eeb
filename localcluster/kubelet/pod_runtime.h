#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/volumes.h"

namespace cohort::local {

// A container as its runtime runs it: what the pod worker holds of it between calls.
struct RuntimeContainer {
  bool running() const { return process.running(); }

  // The local process; kPodman: the podman client attached to the container, which exits with
  // it (so both runtimes learn of an exit by polling a child).
  Subprocess process;
  // kPodman: the podman container's name and ID, its first process (0: not looked up yet), and
  // when SIGKILL may be sent again (`podman kill` is a command, not a syscall: not every 20 ms).
  std::string name;
  std::string id;
  pid_t pid = 0;
  absl::Time next_kill = absl::InfinitePast();
};

// How a container ended, as its runtime tells it.
struct ContainerExit {
  int exit_code = 0;
  bool oom_killed = false;  // The runtime saw the kernel kill it for memory.
};

// The pod a runtime runs the containers of, as the pod worker has prepared it.
struct RuntimePod {
  nlohmann::json object;  // The pod as the worker got it.
  std::string ns;
  std::string name;
  std::string address;        // Its address (the scheduler's annotation).
  std::string dir;            // Its files (Kubelet::PodDir).
  const PodVolumes* volumes;  // Laid out before any container starts.
};

// spec.hostname, else the pod's name cut to 63 characters, as Kubernetes does.
std::string PodHostname(const nlohmann::json& pod);
// $(NAME) references in commands and arguments, from the container's environment.
std::string ExpandReferences(const std::string& text,
                             const std::map<std::string, std::string>& env);

// What the pod worker asks of the runtime that runs one pod's containers, as a kubelet asks the
// CRI: only what local processes and podman containers do differently. The worker keeps the
// pod's life (init containers, restarts, probes, termination, status); a runtime starts, signals
// and reaps containers, and keeps the pod's sandbox. Called on the pod worker's thread only.
class PodRuntime {
 public:
  virtual ~PodRuntime() = default;

  // Makes the pod's sandbox, once its volumes are laid out.
  virtual absl::Status CreateSandbox() = 0;
  // Called every 50 ms while containers run: keeps the sandbox current with the cluster.
  virtual void UpdateSandbox() = 0;
  // Removes the sandbox once every container has stopped, before the pod's final status says so.
  virtual void RemoveSandbox() = 0;

  // A container's environment before the pod's env entries (which may refer to it).
  virtual std::map<std::string, std::string> BaseEnvironment() const = 0;
  // A container's environment once its env entries are resolved: what the runtime changes or
  // adds (the pod's network, its mounts) over them.
  virtual void CompleteEnvironment(const nlohmann::json& container,
                                   std::map<std::string, std::string>& env) const = 0;

  // Starts `container` (its spec) with `env`, its output appended to `log_path`.
  virtual absl::Status StartContainer(const nlohmann::json& container,
                                      std::map<std::string, std::string> env,
                                      const std::string& log_path, RuntimeContainer& c) = 0;
  // Kubernetes' reason for a container that StartContainer could not start.
  virtual std::string StartErrorReason(const absl::Status& error) const;
  // Sends `sig` to the running container's processes.
  virtual void Signal(RuntimeContainer& c, int sig) = 0;
  // How the container ended, once it has just ended; nullopt while it runs (or ran no more).
  virtual std::optional<ContainerExit> Reap(RuntimeContainer& c) = 0;
  // The first process of the running container, as this machine numbers it (its memory is that
  // process's tree); 0 when not known yet.
  virtual pid_t RootPid(RuntimeContainer& c) = 0;
  // status.containerStatuses[].containerID; empty when never started.
  virtual std::string ContainerId(const RuntimeContainer& c) const = 0;
};

// The runtime options.runtime names, for `pod`.
std::unique_ptr<PodRuntime> NewPodRuntime(const KubeletOptions& options, RuntimePod pod);

}  // namespace cohort::local
