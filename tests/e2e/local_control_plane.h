#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "operator/client/http_kube_client.h"

namespace cohort::testing {

// A process whose output a thread collects line by line (echoed to the test log with a label),
// so a test can wait for a line without polling.
class WatchedProcess {
 public:
  // Fails the current test (and returns nullptr) when the program cannot start.
  static std::unique_ptr<WatchedProcess> Start(const std::string& label, std::vector<std::string> argv,
                                               std::map<std::string, std::string> env = {});
  ~WatchedProcess();  // Kills the process group and joins the reader.

  // The first line containing `text` once it is printed; "" if the deadline passes or the
  // process closed its output first.
  std::string WaitForLine(const std::string& text, absl::Duration timeout);
  bool HasLine(const std::string& text);
  void Signal(int sig) { process_.Signal(sig); }
  // The wait status, or nullopt if it did not exit within `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout);
  pid_t pid() const { return process_.pid(); }

 private:
  WatchedProcess() = default;
  std::string FindLocked(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string label_;
  Subprocess process_;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// cohort-local-cluster (API server over HTTPS and kubelet) in a fresh directory, with the CRD
// applied by real kubectl, a client for assertions, and cohort-operator processes on demand.
class LocalControlPlane {
 public:
  // Fails the current test when the cluster does not come up.
  LocalControlPlane();
  ~LocalControlPlane();

  const std::string& dir() const { return dir_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  op::HttpKubeClient& client() { return *client_; }

  struct Result {
    int exit_code = -1;
    std::string output;  // stdout and stderr.
  };
  // Runs real kubectl against this cluster. `stdin_text` is written to a file passed as "-f".
  Result Kubectl(std::vector<std::string> args, const std::string& stdin_text = "");

  // A cohort-operator with its metrics on a free port; `label` names it in the log.
  std::unique_ptr<WatchedProcess> StartOperator(const std::string& label, std::vector<std::string> extra_flags = {});

  // Watches DistributedJob ns/name until `done` holds for it; returns the object (null on
  // timeout, with `timeout` reported by the caller's assertion).
  nlohmann::json WaitForJob(const std::string& ns, const std::string& name,
                            const std::function<bool(const nlohmann::json&)>& done, absl::Duration timeout);
  // Watches pods with `selector` until `done` holds for the list of their current objects.
  bool WaitForPods(const std::string& ns, const std::string& selector,
                   const std::function<bool(const std::vector<nlohmann::json>&)>& done, absl::Duration timeout);

  // The pid of the running container process whose command line contains `program` and whose
  // environment has every `VAR=value` in `env`; -1 if none.
  static pid_t FindProcess(const std::string& program, const std::vector<std::string>& env);

 private:
  std::string dir_;
  std::string kubeconfig_;
  std::unique_ptr<WatchedProcess> cluster_;
  std::unique_ptr<op::HttpKubeClient> client_;
};

// The status field `field` of a DistributedJob (0 when absent).
int64_t StatusInt(const nlohmann::json& job, const char* field);
std::string Phase(const nlohmann::json& job);

}  // namespace cohort::testing
