#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

// Why a call of the coordination service failed, in fields, beside the core's own sentence. The
// core words its errors for Cohort's protocol; a transport that answers in another protocol's
// words (the JAX port answers in XLA's, coordination/server/xla_errors.h) builds its text from
// these fields, never by reading the sentence. They travel as a payload of the absl::Status.

enum class ErrorKind {
  kNone,
  kKeyExists,                // key: a set-once key is set.
  kNotAnInteger,             // key, value: an increment of a key that holds no integer.
  kBarrierTimedOut,          // barrier.
  kBarrierNonParticipant,    // barrier, task: a task outside the named participants called it.
  kBarrierUnknownTask,       // barrier, task: a named participant is not in the job.
  kBarrierConflictingTasks,  // barrier, caller_named_every_task: callers named other participants.
  kBarrierCounterMismatch,   // barrier (the service's instance), counter (the caller's).
  kBarrierCancelled,         // barrier, task: cancelled by that task.
  kBarrierParticipantGone,   // barrier, task: a participant already shut down.
  kCancelNotInProgress,   // barrier (the service's instance; id only when there is none), counter.
  kCancelAlreadyPassed,   // barrier, code: the code the instance passed with.
  kShutdownTimedOut,      // barrier: the shutdown barrier.
  kRegistrationTimedOut,  // barrier: the registration barrier.
};

struct ErrorDetails {
  ErrorKind kind = ErrorKind::kNone;
  BarrierReport barrier = {};
  TaskId task = -1;
  std::string key = {};
  std::string value = {};
  int64_t counter = 0;
  int32_t code = 0;
  // The call that failed a barrier for conflicting participants named none (every task).
  bool caller_named_every_task = false;
};

// `status` with `details` attached (status must be an error).
absl::Status WithDetails(absl::Status status, const ErrorDetails& details);
// The details attached to `status`, if any.
std::optional<ErrorDetails> DetailsOf(const absl::Status& status);

}  // namespace cohort::coordination
