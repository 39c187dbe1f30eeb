#pragma once

// Why a process of a job failed: one definition read by every place that names a cause, so the
// same event has the same name everywhere. What one process's exit means is decided in
// common/exit_codes.h (ClassifyExit), which maps onto these. The coordination core and its wire
// conversion (coordination/wire/proto_convert.cc checks the wire numbers against the proto),
// libdist's public dist::FailureCause (libdist/src/library.cc checks it enumerator by enumerator),
// the sidecar's and the operator's metric labels, the line libdist's default handler writes before
// it exits 75 (common/termination_message.h), and the coordination service's messages.

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace cohort {

enum class FailureCause : int32_t {
  kUnspecified = 0,
  kProcessExited,        // The process exited or was killed without shutting down.
  kHeartbeatTimeout,     // Its sidecar or host went silent.
  kPreempted,            // It died after a preemption notice.
  kRestarted,            // It came back with a new incarnation: it had died.
  kReportedError,        // The program reported an error.
  kRegistrationTimeout,  // It never joined.
  kShutdownTimeout,      // It never reached the shutdown barrier.
  kServiceUnreachable,   // (agent side) the coordination service, or this process's sidecar, went
                         // away.
  kCollectiveTimeout,    // A collective timed out or its ranks called different operations.
  kOutOfMemory,          // The kernel's OOM killer ended it (Kubernetes: OOMKilled).
  kKilledBySignal,       // A signal nobody in Cohort sent ended it (exit status 128 + N).
  kHung,                 // It made no progress for longer than its hang timeout (docs/faults.md).
};

struct FailureCauseInfo {
  FailureCause cause;
  int32_t wire;       // cohort.coordination.v1.FailureCause's number.
  const char* label;  // Metric label value (cohort_task_failures_total,
                      // cohort_operator_job_restarts_total).
  const char* words;  // dist::FailureCauseName, and the "[cause: <words>]" of the follower's line.
  const char* sentence;  // "<task> failed because <sentence>".
};

// In enumerator order (checked below): kFailureCauses[n] describes FailureCause(n).
inline constexpr FailureCauseInfo kFailureCauses[] = {
    {FailureCause::kUnspecified, 0, "unknown", "unknown", "it failed"},
    {FailureCause::kProcessExited, 1, "crash", "crash", "its process died"},
    {FailureCause::kHeartbeatTimeout, 2, "heartbeat_timeout", "heartbeat timeout",
     "it stopped sending heartbeats"},
    {FailureCause::kPreempted, 3, "preempted", "preemption", "it was preempted"},
    {FailureCause::kRestarted, 4, "restarted", "restart", "it restarted"},
    {FailureCause::kReportedError, 5, "reported_error", "reported error", "it reported an error"},
    {FailureCause::kRegistrationTimeout, 6, "registration_timeout", "registration timeout",
     "it never registered"},
    {FailureCause::kShutdownTimeout, 7, "shutdown_timeout", "shutdown timeout",
     "it never reached the shutdown barrier"},
    {FailureCause::kServiceUnreachable, 8, "service_lost", "coordination service lost",
     "it lost the coordination service"},
    {FailureCause::kCollectiveTimeout, 9, "collective_timeout", "collective timeout",
     "a collective timed out"},
    {FailureCause::kOutOfMemory, 10, "oom", "out of memory", "it ran out of memory"},
    {FailureCause::kKilledBySignal, 11, "signal", "killed by a signal",
     "it was killed by a signal"},
    {FailureCause::kHung, 12, "hung", "hang", "it hung (no progress for longer than its timeout)"},
};

constexpr bool FailureCausesInOrder() {
  for (size_t i = 0; i < std::size(kFailureCauses); ++i) {
    if (static_cast<size_t>(kFailureCauses[i].cause) != i) return false;
  }
  return true;
}
static_assert(FailureCausesInOrder(), "kFailureCauses must list every cause in enumerator order");

// The row of `cause` (an out-of-range value reads as kUnspecified's).
constexpr const FailureCauseInfo& InfoOf(FailureCause cause) {
  const size_t i = static_cast<size_t>(cause);
  return i < std::size(kFailureCauses) ? kFailureCauses[i] : kFailureCauses[0];
}

// The cause with this wire number, or with these words; nullopt for none.
constexpr std::optional<FailureCause> FailureCauseFromWire(int32_t wire) {
  for (const FailureCauseInfo& info : kFailureCauses) {
    if (info.wire == wire) return info.cause;
  }
  return std::nullopt;
}
constexpr std::optional<FailureCause> FailureCauseFromWords(absl::string_view words) {
  for (const FailureCauseInfo& info : kFailureCauses) {
    if (words == info.words) return info.cause;
  }
  return std::nullopt;
}

}  // namespace cohort
