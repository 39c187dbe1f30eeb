#pragma once

// XLA's words for what the core answers on the JAX port: the status code, message and error
// payloads that jaxlib's own coordination service (xla/pjrt/distributed/coordination/
// coordination_service.cc and its RPC handler) answers in the same case, built from the call and
// the core's ErrorDetails (coordination/core/error_details.h), never from the core's sentence.
// Where Cohort knows more than XLA says (which ranks a barrier misses, what failed the job), its
// sentence follows XLA's text on a line of its own that starts with "Cohort: ". docs/jax.md
// ("What the port answers") lists each case, and tests/frameworks/jax_differential_test.py
// compares them with jaxlib's own service.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

// What a call asked, as far as XLA's messages quote it.
struct XlaCall {
  absl::string_view method;         // The RPC's name: "Barrier", "TryGetKeyValue", ...
  TaskId task = kUnidentifiedTask;  // The caller, when the call names it.
  int32_t num_tasks = 0;
  std::string key;                      // Key-value calls: the key as the caller spelled it.
  std::string barrier_id;               // Barrier, CancelBarrier.
  int64_t counter = 0;                  // Barrier, CancelBarrier: the caller's counter.
  Incarnation service_incarnation = 0;  // Names the shutdown barrier.
};

// An answer in XLA's words, with what its payloads must say.
struct XlaError {
  absl::Status status;
  // It carries a CoordinationServiceError payload (XLA's MakeCoordinationError), which tells the
  // client the service answered; naming `source_task` (-1: none) and `reported`.
  bool coordination_error = true;
  TaskId source_task = -1;
  bool reported = false;
  // It carries a BarrierError payload naming the instance the service holds.
  std::optional<std::pair<std::string, int64_t>> barrier = std::nullopt;
};

// The answer to `call` for the core's `status` (OK stays OK, with no payloads).
XlaError ToXlaError(const absl::Status& status, const XlaCall& call);

// How XLA's service answers every task's PollForError when the job fails for `failure` (and
// reports the failed task's state in WatchTasks): a heartbeat timeout, a failed shutdown barrier,
// an error a task reported (`reported`, as it reported it) and a restarted task in XLA's words
// followed by Cohort's sentence; causes XLA's service never sees (a process that died, a node
// lost, a preemption) in Cohort's sentence alone.
XlaError JobFailureError(const TaskFailure& failure, Incarnation service_incarnation,
                         const std::optional<absl::Status>& reported);
// The state XLA's WatchTasks reports for the failed task itself.
absl::Status TaskStateError(const TaskFailure& failure, Incarnation service_incarnation,
                            const std::optional<absl::Status>& reported);

// absl's text of a status with the payloads XLA puts on a barrier's error, as XLA quotes a
// failed barrier's status inside another message ("Barrier result: '...").
// (absl prints payloads in an order that varies from status to status; XLA's text does too.)
std::string BarrierStatusText(const absl::Status& status, absl::string_view barrier_id,
                              int64_t counter);

}  // namespace cohort::coordination
