#include "coordination/core/types.h"

#include "absl/random/random.h"

namespace cohort::coordination {

Incarnation RandomIncarnation() {
  absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen, 1, UINT64_MAX);
}

absl::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kDisconnected: return "disconnected";
    case TaskState::kConnecting: return "connecting";
    case TaskState::kConnected: return "connected";
    case TaskState::kFailed: return "failed";
    case TaskState::kShutDown: return "shut_down";
  }
  return "unknown";
}

absl::string_view FailureCauseName(FailureCause cause) {
  switch (cause) {
    case FailureCause::kUnspecified: return "unspecified";
    case FailureCause::kProcessExited: return "crash";
    case FailureCause::kHeartbeatTimeout: return "heartbeat_timeout";
    case FailureCause::kPreempted: return "preempted";
    case FailureCause::kRestarted: return "restarted";
    case FailureCause::kReportedError: return "reported_error";
    case FailureCause::kRegistrationTimeout: return "registration_timeout";
    case FailureCause::kShutdownTimeout: return "shutdown_timeout";
    case FailureCause::kServiceUnreachable: return "service_unreachable";
    case FailureCause::kCollectiveTimeout: return "collective_timeout";
  }
  return "unknown";
}

}  // namespace cohort::coordination
