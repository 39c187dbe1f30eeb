#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/failure_cause.h"

namespace cohort::coordination {

using TaskId = int32_t;        // 0..N-1, equal to the process id / rank.
using Incarnation = uint64_t;  // Random per process start; a new one means the process restarted.
using OpId = uint64_t;         // Names a waiting call so that its transport can cancel it.

// The incarnation of an error report made by an observer of the process rather than the
// process itself (cohort-run, which sees its children die): RandomIncarnation() never returns it.
inline constexpr Incarnation kObserverIncarnation = 0;
// A fresh random incarnation, never 0 (0 means "none" on the wire).
Incarnation RandomIncarnation();

// The caller of a key-value call made over a protocol that does not say who calls (XLA's
// coordination protocol before jaxlib 0.10): only the job's state is checked.
inline constexpr int32_t kUnidentifiedTask = -1;

enum class TaskState { kDisconnected, kConnecting, kConnected, kFailed, kShutDown };

// Why a task failed: the one table in common/failure_cause.h.
using ::cohort::FailureCause;

absl::string_view TaskStateName(TaskState state);

// Aborted, for a call that a retry of the same process replaced (registration, shutdown, a
// barrier call): the retry is the one that counts, and a client that sees this on its own
// earlier attempt just goes on with the retry. The mark is a status payload, which travels over
// gRPC (common/grpc_util.h), so that clients test the mark, never the words.
absl::Status SupersededError(absl::string_view what);
bool IsSuperseded(const absl::Status& status);
// Unavailable, for a registration of a newer restart attempt than the service's: the service is
// about to be replaced by that attempt's at the same address (restarting in place, rank 0's
// sidecar starts it when the operator orders the attempt), so the caller retries, through the
// moment the old one goes. Marked like SupersededError.
absl::Status AwaitingAttemptError(absl::string_view message);
bool IsAwaitingAttempt(const absl::Status& status);
// The cause's metric label, also used in logs ("crash", "heartbeat_timeout", "service_lost", ...).
absl::string_view FailureCauseName(FailureCause cause);

// Who reached a barrier (or the registration or shutdown barrier) before it failed.
struct BarrierReport {
  std::string id = {};
  int64_t counter = 0;               // The instance the service holds (its call number - 1).
  TaskId first_task = -1;            // The first to arrive.
  int32_t arrived = 0;               // How many of the participants had arrived,
  int32_t participants = 0;          // of how many.
  std::vector<TaskId> missing = {};  // Those that had not, in rank order.
};

struct TaskFailure {
  TaskId task = -1;
  FailureCause cause = FailureCause::kUnspecified;
  std::string message;  // Full sentence naming the rank, the cause and what to do.
  // kShutdownTimeout: who had reached the shutdown barrier (for XLA's words on the JAX port).
  std::optional<BarrierReport> barrier = std::nullopt;
};

struct PreemptionNotice {
  TaskId task = -1;
  absl::Time time;
};

using JobEvent = std::variant<TaskFailure, PreemptionNotice>;

// Where one communicator of a process stands (libdist's collectives), as its heartbeats carry it.
struct CollectiveProgress {
  std::string communicator;  // The same id on every rank of the communicator.
  uint64_t last_started = 0;
  uint64_t last_completed = 0;
  std::string pending;             // The call in flight ("" when none), in words.
  uint64_t pending_signature = 0;  // Equal on two ranks exactly when they made the same call.
  absl::Duration pending_for;      // How long it has been in flight.
};

// The training step a process last reported (dist::ReportProgress), as a heartbeat carries it:
// the step and how long before the heartbeat the program reported it.
struct StepReport {
  int64_t step = 0;
  absl::Duration age;
};

// A task's health and collective progress as the service knows it (the watchdog's view).
struct TaskProgress {
  TaskId task = -1;
  TaskState state = TaskState::kDisconnected;
  std::optional<absl::Duration> since_heartbeat;  // nullopt: no heartbeat yet.
  std::optional<absl::Duration> since_report;     // Since its program last reported progress.
  std::vector<CollectiveProgress> communicators;
};

// Key-value pairs as a directory listing returns them: full keys, in key order.
using KeyValueEntries = std::vector<std::pair<std::string, std::string>>;

}  // namespace cohort::coordination
