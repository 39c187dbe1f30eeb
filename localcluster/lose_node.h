#pragma once

#include <string>

#include "absl/status/status.h"

namespace cohort::local {

// Loses node `node` of the cohort-local-cluster in `cluster_dir` the way a machine is lost: its
// kubelet process is killed (SIGKILL), which kills its containers; its Lease stops and its pods
// never confirm their deletion. Returns once the kubelet is gone; an error when it was not running.
absl::Status LoseLocalNode(const std::string& cluster_dir, const std::string& node);

}  // namespace cohort::local
