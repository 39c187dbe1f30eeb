#pragma once

// The line libdist's default peer-failure handler writes to stderr before it exits
// kPeerFailureExitCode (75): "cohort: the job failed: <message> [cause: <words>]. Exiting with
// code 75 (...)". In Kubernetes the kubelet keeps the log's tail as the container's termination
// message, and cohort-operator reads the cause from it (the restart's metric label): both sides
// use these two functions.

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/failure_cause.h"

namespace cohort {

// The whole line, newline included.
std::string FormatPeerFailureLine(absl::string_view message, FailureCause cause);

// The cause the last "[cause: ...]" in `text` names (text may hold several lines, and any
// message); nullopt without one, or when its words name no cause.
std::optional<FailureCause> ParsePeerFailureCause(absl::string_view text);

}  // namespace cohort
