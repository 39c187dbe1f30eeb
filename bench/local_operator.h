#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/watched_process.h"
#include "kube/http_kube_client.h"

// What the operator benchmarks stand on: cohort-local-cluster in a fresh directory with the CRD
// applied, a real cohort-operator leading with synced informers, and a client of the API server.
namespace cohort::bench {

struct LocalOperator {
  std::string dir;  // The cluster's directory (pods' logs under pods/); removed with the object.
  std::unique_ptr<WatchedProcess> cluster;
  std::unique_ptr<WatchedProcess> op;
  std::unique_ptr<kube::HttpKubeClient> client;
  ~LocalOperator();
};

// `tool` names the benchmark (the directory's and the client's name); `cluster_flags` go to
// cohort-local-cluster, `operator_flags` to cohort-operator (beside --kubeconfig, --metrics-port 0
// and --leader-elect=false). Errors say which step failed, with the process's output.
absl::StatusOr<std::unique_ptr<LocalOperator>> StartLocalOperator(
    const std::string& tool, const std::vector<std::string>& cluster_flags,
    const std::vector<std::string>& operator_flags);

}  // namespace cohort::bench
