#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "common/process/watched_process.h"
#include "kube/http_kube_client.h"

namespace cohort::testing {

// cohort-local-cluster (API server over HTTPS, scheduler, a kubelet process per node) in a fresh
// directory, with the CRD applied by real kubectl, a client for assertions, and cohort-operator
// processes on demand.
class LocalControlPlane {
 public:
  // Fails the current test when the cluster does not come up. `flags` go to cohort-local-cluster
  // (e.g. {"--nodes", "2"}).
  explicit LocalControlPlane(std::vector<std::string> flags = {});
  ~LocalControlPlane();

  const std::string& dir() const { return dir_; }
  // A file the process runtime keeps of pod `pod` in namespace default ("trainer.log",
  // "volumes/cohort-agent/..."); empty when there is none.
  std::string ReadPodFile(const std::string& pod, const std::string& path) const;
  const std::string& kubeconfig() const { return kubeconfig_; }
  kube::HttpKubeClient& client() { return *client_; }

  struct Result {
    int exit_code = -1;
    std::string output;  // stdout and stderr.
  };
  // Runs real kubectl against this cluster. `stdin_text` is written to a file passed as "-f".
  Result Kubectl(std::vector<std::string> args, const std::string& stdin_text = "");
  // Runs any command (helm, a script) to its end with KUBECONFIG pointing at this cluster.
  Result Command(const std::vector<std::string>& argv);
  // Runs a command to its end, `env` added to ours (no cluster needed, e.g. `podman info`).
  static Result Run(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env = {});
  // `kubectl create configmap NAME --from-file=F...` as a manifest's header tells a user to run
  // it, made with --dry-run=client and sent through apply (as JSON). The result of the apply (or
  // of the create when that failed).
  Result CreateConfigMap(const std::string& name, const std::vector<std::string>& from_files = {});
  // What `kubectl drain` does for a pod: a POST to its eviction subresource.
  Result Evict(const std::string& ns, const std::string& pod);

  // Loses a node the way a machine is lost: its kubelet process is killed (SIGKILL), which kills
  // its containers; its Lease stops and its pods never confirm their deletion. Returns once the
  // kubelet is gone; an error when it was not running.
  absl::Status LoseNode(const std::string& node);

  // A cohort-operator with its metrics on a free port; `label` names it in the log. Fails the
  // current test (and returns nullptr) when it cannot start.
  std::unique_ptr<WatchedProcess> StartOperator(const std::string& label,
                                                std::vector<std::string> extra_flags = {});

  // Watches the object `r` ns/name until `done` holds for it; returns the object (null on
  // timeout, with `timeout` reported by the caller's assertion, and the object last seen on
  // stderr).
  nlohmann::json WaitForObject(const kube::Resource& r, const std::string& ns,
                               const std::string& name,
                               const std::function<bool(const nlohmann::json&)>& done,
                               absl::Duration timeout);
  // WaitForObject of DistributedJob ns/name.
  nlohmann::json WaitForJob(const std::string& ns, const std::string& name,
                            const std::function<bool(const nlohmann::json&)>& done,
                            absl::Duration timeout);
  // Watches pods with `selector` until `done` holds for the list of their current objects.
  bool WaitForPods(const std::string& ns, const std::string& selector,
                   const std::function<bool(const std::vector<nlohmann::json>&)>& done,
                   absl::Duration timeout);

  // The pid of the running container process whose command line contains `program` and whose
  // environment has every `VAR=value` in `env` (not the cohort-launch that started it); -1 if none.
  static pid_t FindProcess(const std::string& program, const std::vector<std::string>& env);
  // FindProcess, looked for until it is there or `timeout` passed: a pod is Ready once its
  // containers run, and restarting in place cohort-launch starts the processes a moment later,
  // on its sidecar's word.
  static pid_t WaitForProcess(const std::string& program, const std::vector<std::string>& env,
                              absl::Duration timeout = absl::Seconds(30));

 private:
  std::string dir_;
  std::string kubeconfig_;
  std::unique_ptr<WatchedProcess> cluster_;
  std::unique_ptr<kube::HttpKubeClient> client_;
};

// The port named "metrics" of a pod's containers or init containers (the sidecar's), 0 if none.
int MetricsPort(const nlohmann::json& pod);

// The status field `field` of a DistributedJob (0 when absent).
int64_t StatusInt(const nlohmann::json& job, const char* field);
std::string Phase(const nlohmann::json& job);

// A file's whole text; "" when it cannot be read (a pod's log kept after the pod went, a
// process's output file).
std::string ReadFile(const std::filesystem::path& path);

}  // namespace cohort::testing
