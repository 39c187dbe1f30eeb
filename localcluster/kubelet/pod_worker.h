#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "localcluster/kubelet/container.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/pod_runtime.h"
#include "localcluster/kubelet/pod_status.h"
#include "localcluster/kubelet/volumes.h"

namespace cohort::local {

// One pod's life on this node, on its own thread (the Kubelet's behaviour, kubelet.h): lays out
// its volumes and sandbox, runs its init containers, sidecars and containers through its
// PodRuntime, restarts, probes and reports them, and stops them when the pod is deleted.
class PodWorker {
 public:
  // `options` outlives the worker.
  PodWorker(kube::KubeClient* client, const KubeletOptions& options, const nlohmann::json& pod,
            std::string address);
  ~PodWorker();  // Stops the pod's containers at once.

  // Called with every new version of the pod object.
  void Update(const nlohmann::json& pod);
  // The pod object is gone: stop at once.
  void Deleted();
  const std::string& address() const { return address_; }

 private:
  // Asks the pod to stop; true if it already has (the worker is done).
  bool Terminate(absl::Duration grace, bool remove);
  bool Terminating();
  // Waits up to `d`, returning early when termination is requested.
  void Pause(absl::Duration d);

  void Run();
  absl::Status Prepare();
  void Execute();
  // SIGTERM to the containers, then the sidecars once the containers are gone (the order of
  // native sidecars), SIGKILL to whatever is left at the deadline.
  void StopAll(absl::Duration grace);

  std::map<std::string, std::string> Environment(const nlohmann::json& c);
  void StartContainer(Container& c);
  // Sends `sig` to the container's processes.
  void SignalContainer(Container& c, int sig);
  // Records an exit; true if the container has just terminated.
  bool Reap(Container& c);
  void EnforceMemoryLimit(Container& c);
  void WriteStatus();

  bool IsOurs(const nlohmann::json& pod) const;
  // Removes this worker's pod object, and never a successor that took its name. OK when it is
  // gone (or is a successor); the API's error otherwise.
  absl::Status DeleteOurPod();
  // The final delete of a pod whose containers all stopped: only this kubelet confirms it, and no
  // later event of the pod would ask again, so an API error (an API server busy with many
  // teardowns at once) must not leave the pod terminating for good. Tries with backoff for up to
  // kFinalDeleteFor, or until the worker is destroyed.
  void DeleteOurPodRetrying();

  kube::KubeClient* const client_;
  const KubeletOptions& options_;
  const nlohmann::json pod_;
  const std::string address_;
  const std::string ns_;
  const std::string name_;
  const std::string dir_;
  PodVolumes volumes_;
  std::unique_ptr<PodRuntime> runtime_;
  std::vector<Container> containers_;
  PodState state_;

  absl::Mutex mu_;
  bool terminate_ ABSL_GUARDED_BY(mu_) = false;
  bool remove_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time kill_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool deleting_ ABSL_GUARDED_BY(mu_) = false;       // The final delete is being confirmed.
  bool stop_retrying_ ABSL_GUARDED_BY(mu_) = false;  // Set by the destructor.
  std::thread thread_;
  std::thread deleter_;  // Confirms the final delete when Update() found the worker done.
};

}  // namespace cohort::local
