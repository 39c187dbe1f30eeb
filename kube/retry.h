#pragma once

// Writes that read, change and write an object again when someone else wrote it in between, as
// client-go's retry.RetryOnConflict.

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "kube/kube_client.h"

namespace cohort::kube {

// How many times a write is tried before a conflict is returned (client-go's retry.DefaultRetry
// tries 5 times).
inline constexpr int kConflictAttempts = 5;

// Runs `attempt` again while it fails with a conflict (Aborted: the object changed between its
// read and its write, so it must be read again), at most `attempts` times. Returns the first
// result that is not a conflict, or the last conflict.
absl::Status RetryOnConflict(const std::function<absl::Status()>& attempt,
                             int attempts = kConflictAttempts);

// Reads `name`, lets `change` edit it (returning false: nothing to write) and writes its status
// with the resourceVersion read, reading again on a conflict. OK when written or when there was
// nothing to write; the read's or write's error otherwise (Aborted naming the object when it kept
// changing).
absl::Status UpdateStatusWith(KubeClient* client, const Resource& r, const std::string& ns,
                              const std::string& name,
                              const std::function<bool(nlohmann::json& object)>& change);

}  // namespace cohort::kube
