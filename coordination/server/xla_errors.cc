#include "coordination/server/xla_errors.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordination/core/error_details.h"
#include "xla_compat/xla_coordination.pb.h"

namespace cohort::coordination {
namespace {

// XLA's names for the barriers it keeps itself, and how it names an instance.
constexpr absl::string_view kRegistrationBarrier = "[Init]Wait_for_all_tasks_to_register";
std::string ShutdownBarrier(Incarnation service) { return absl::StrCat("Shutdown::", service); }
std::string BarrierName(absl::string_view id, int64_t counter) {
  return absl::StrCat(id, "::", counter);
}

// XLA lists this many of a timed-out barrier's missing tasks (its kPendingStragglerLogLimit,
// counted so that the third is left out).
constexpr size_t kStragglersListed = 2;

std::string WithCohort(absl::string_view xla, absl::string_view cohort) {
  return absl::StrCat(xla, "\nCohort: ", cohort);
}

std::string BarrierTimedOut(absl::string_view name, const BarrierReport& report) {
  std::string stragglers;
  for (size_t i = 0; i < std::min(report.missing.size(), kStragglersListed); ++i) {
    absl::StrAppend(&stragglers, report.missing[i], "\n");
  }
  return absl::StrFormat(
      "Barrier timed out. Id: %s. This usually happens because a task triggered the barrier too "
      "early or too slowly. Please look at the task logs (both timed out and first task) to debug "
      "further.\n# of tasks that reached the barrier: %d/%d.\nThe first task at the barrier: %d. "
      "Some timed out task names:\n%s",
      name, report.arrived, report.participants, report.first_task, stragglers);
}

// The failed shutdown barrier, as every task hears of it (XLA's MakeShutdownBarrierError).
std::string ShutdownBarrierFailed(const BarrierReport& report, Incarnation service) {
  absl::Status timed_out = absl::DeadlineExceededError(
      BarrierTimedOut(BarrierName(ShutdownBarrier(service), 0), report));
  return absl::StrCat("Shutdown barrier has failed.\nBarrier result: '",
                      BarrierStatusText(timed_out, ShutdownBarrier(service), 0));
}

XlaError Answer(absl::StatusCode code, std::string message, bool coordination_error = true) {
  return XlaError{absl::Status(code, message), coordination_error};
}

XlaError BarrierAnswer(absl::StatusCode code, std::string message, const BarrierReport& held) {
  XlaError e = Answer(code, std::move(message));
  e.barrier = std::make_pair(held.id, held.counter);
  return e;
}

XlaError BarrierCallError(const absl::Status& status, const std::optional<ErrorDetails>& d,
                          const XlaCall& call) {
  if (!d) {
    XlaError e = Answer(status.code(), std::string(status.message()));
    e.barrier = std::make_pair(call.barrier_id, call.counter);
    return e;
  }
  const BarrierReport& b = d->barrier;
  const std::string name = BarrierName(b.id, b.counter);
  switch (d->kind) {
    case ErrorKind::kBarrierTimedOut:
      return BarrierAnswer(absl::StatusCode::kDeadlineExceeded,
                           WithCohort(BarrierTimedOut(name, b), status.message()), b);
    case ErrorKind::kBarrierNonParticipant:
      return BarrierAnswer(
          absl::StatusCode::kInvalidArgument,
          absl::StrFormat("A non-participating task (%d) called the barrier: %s", d->task, name),
          b);
    case ErrorKind::kBarrierUnknownTask:
      return BarrierAnswer(absl::StatusCode::kInvalidArgument,
                           absl::StrFormat("Unexpected task (%d) that is not in the cluster called "
                                           "the barrier. Barrier Id: %s",
                                           d->task, name),
                           b);
    case ErrorKind::kBarrierConflictingTasks:
      return BarrierAnswer(
          absl::StatusCode::kInvalidArgument,
          d->caller_named_every_task
              ? absl::StrCat(name,
                             ": No tasks were specified by the client, which implies that the "
                             "entire cluster is participating in the barrier. However, the "
                             "service disagrees. Check that the callers are invoking the barrier "
                             "with the same arguments.")
              : absl::StrCat("Conflicting tasks specified by different processes for the same "
                             "barrier: ",
                             name,
                             ". Check that the callers are invoking the barrier with the same "
                             "arguments."),
          b);
    case ErrorKind::kBarrierCounterMismatch:
      return BarrierAnswer(
          absl::StatusCode::kInternal,
          absl::StrFormat(
              "Barrier (%s) is invoked by the task, but the service thinks it is the %d-th "
              "instance. %s",
              BarrierName(b.id, d->counter), b.counter,
              d->counter == 0 || b.counter == 0
                  ? "The service or task probably restarted, check the earlier logs to debug "
                    "further. Usually, a restart on the stale tasks will resolve the issue."
                  : "One task is probably way too quick / slow in its execution. For example, one "
                    "task started a barrier early, which timed out, and started a second barrier "
                    "before the late task even joined once."),
          b);
    case ErrorKind::kBarrierCancelled:
      return BarrierAnswer(absl::StatusCode::kCancelled,
                           absl::StrFormat("Barrier (%s) is cancelled by task: %d", name, d->task),
                           b);
    case ErrorKind::kBarrierParticipantGone:
      return BarrierAnswer(absl::StatusCode::kInternal,
                           WithCohort(absl::StrFormat("Barrier failed because: task disconnected. "
                                                      "Barrier Id: %s, Task: %d",
                                                      name, d->task),
                                      status.message()),
                           b);
    default:
      break;
  }
  XlaError e = Answer(status.code(), std::string(status.message()));
  e.barrier = std::make_pair(call.barrier_id, call.counter);
  return e;
}

bool OutOfRange(const XlaCall& call) { return call.task < 0 || call.task >= call.num_tasks; }

}  // namespace

std::string BarrierStatusText(const absl::Status& status, absl::string_view barrier_id,
                              int64_t counter) {
  ::xla::coordination::BarrierError barrier;  // The same fields in both generations.
  barrier.set_barrier_id(std::string(barrier_id));
  barrier.set_counter(counter);
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message(),
                      " [type.googleapis.com/tensorflow.CoordinationServiceError='']"
                      " [type.googleapis.com/tensorflow.BarrierError='",
                      absl::CHexEscape(barrier.SerializeAsString()), "']");
}

XlaError ToXlaError(const absl::Status& status, const XlaCall& call) {
  if (status.ok()) return XlaError{absl::OkStatus(), false};
  const std::optional<ErrorDetails> d = DetailsOf(status);
  const ErrorKind kind = d ? d->kind : ErrorKind::kNone;
  const absl::string_view method = call.method;

  if (method == "Barrier") return BarrierCallError(status, d, call);
  if (method == "CancelBarrier" && kind == ErrorKind::kCancelNotInProgress) {
    return BarrierAnswer(
        absl::StatusCode::kFailedPrecondition,
        absl::StrFormat("Barrier (%s) is cancelled by task, but the service thinks "
                        "it is the %d-th instance. This is likely due to a restart "
                        "in the task or service.",
                        BarrierName(call.barrier_id, call.counter), d->barrier.counter),
        BarrierReport{call.barrier_id, d->barrier.counter});
  }
  if (method == "CancelBarrier" && kind == ErrorKind::kCancelAlreadyPassed) {
    return BarrierAnswer(
        absl::StatusCode::kFailedPrecondition,
        absl::StrFormat("Barrier (%s) has already been passed with status code: %d",
                        BarrierName(call.barrier_id, call.counter), d->code),
        d->barrier);
  }
  if (method == "TryGetKeyValue" && absl::IsNotFound(status)) {
    return Answer(absl::StatusCode::kNotFound,
                  absl::StrCat("Config key ", call.key, " not found."));
  }
  if (kind == ErrorKind::kKeyExists) {  // XLA's store answers without its service's payload.
    return Answer(absl::StatusCode::kAlreadyExists,
                  absl::StrCat("key ", d->key, " already exists."),
                  /*coordination_error=*/false);
  }
  if (kind == ErrorKind::kNotAnInteger) {
    return Answer(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat("Failed to parse value \"", d->value, "\" as an integer."));
  }
  if (method == "GetAliveTasks" && absl::IsInvalidArgument(status)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Requesting task ", call.task,
                               " is not one of the tasks specified in a GetAliveTasks request."),
                  /*coordination_error=*/false);
  }
  if (method == "ShutdownTask" && kind == ErrorKind::kShutdownTimedOut) {
    return Answer(
        absl::StatusCode::kInternal,
        WithCohort(ShutdownBarrierFailed(d->barrier, call.service_incarnation), status.message()));
  }
  if (method == "RegisterTask" && kind == ErrorKind::kRegistrationTimedOut) {
    return BarrierAnswer(
        absl::StatusCode::kDeadlineExceeded,
        WithCohort(BarrierTimedOut(BarrierName(kRegistrationBarrier, 0), d->barrier),
                   status.message()),
        BarrierReport{std::string(kRegistrationBarrier), 0});
  }
  if (method == "RegisterTask" && OutOfRange(call)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Unexpected task registered with task=", call.task));
  }
  if (method == "Heartbeat" && OutOfRange(call)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Unexpected heartbeat request from task: ", call.task,
                               ". This usually implies a configuration error."));
  }
  if (method == "Heartbeat" && absl::IsFailedPrecondition(status)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Task with task=", call.task,
                               " must be registered before sending heartbeat messages. The service "
                               "might have restarted, please restart / reset and register again."));
  }
  if (method == "PollForError" && OutOfRange(call)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Unexpected task (", call.task,
                               ") that is not in the cluster polling for errors."));
  }
  if (method == "PollForError" && absl::IsFailedPrecondition(status)) {
    return Answer(
        absl::StatusCode::kFailedPrecondition,
        absl::StrCat("Task (", call.task,
                     ") that has not been registered or has disconnected polling for errors."));
  }
  if (method == "ReportErrorToService" && OutOfRange(call)) {
    return Answer(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("Unexpected request from task ", call.task));
  }
  return Answer(status.code(), std::string(status.message()));
}

XlaError JobFailureError(const TaskFailure& failure, Incarnation service_incarnation,
                         const std::optional<absl::Status>& reported) {
  switch (failure.cause) {
    case FailureCause::kHeartbeatTimeout:
      return XlaError{absl::UnavailableError(WithCohort(
          absl::StrCat("The following tasks are unhealthy (stopped sending heartbeats):\n",
                       failure.task,
                       "\nThe tasks have crashed. Check the task logs for an earlier error, or "
                       "scheduler events (e.g. preemption, eviction) to debug further."),
          failure.message))};
    case FailureCause::kShutdownTimeout:
      if (!failure.barrier) break;
      return XlaError{absl::InternalError(WithCohort(
          ShutdownBarrierFailed(*failure.barrier, service_incarnation), failure.message))};
    case FailureCause::kReportedError:
      if (!reported) break;
      return XlaError{
          absl::Status(reported->code(), WithCohort(reported->message(), failure.message)), true,
          failure.task, /*reported=*/true};
    case FailureCause::kRestarted:
      return XlaError{absl::AbortedError(
                          WithCohort(absl::StrCat(failure.task,
                                                  " unexpectedly tried to connect with a different "
                                                  "incarnation. It has likely restarted."),
                                     failure.message)),
                      true, failure.task};
    default:
      break;
  }
  // A cause XLA's service never sees: Cohort's sentence alone.
  return XlaError{
      absl::AbortedError(absl::StrCat("Cohort coordination service: ", failure.message)), true,
      failure.task, failure.cause == FailureCause::kReportedError};
}

absl::Status TaskStateError(const TaskFailure& failure, Incarnation service_incarnation,
                            const std::optional<absl::Status>& reported) {
  if (failure.cause == FailureCause::kHeartbeatTimeout) {
    return absl::UnavailableError(WithCohort(
        absl::StrCat("Task ", failure.task,
                     " heartbeat timeout. This indicates that the remote task has failed, got "
                     "preempted, or crashed unexpectedly. Check the task logs for an earlier error "
                     "or scheduler events (e.g. preemption, eviction) to debug further."),
        failure.message));
  }
  return JobFailureError(failure, service_incarnation, reported).status;
}

}  // namespace cohort::coordination
