// XLA's words for the core's answers (coordination/server/xla_errors.h), case by case: each
// expected text is what jaxlib's own service answers in the same case (xla/pjrt/distributed/
// coordination/coordination_service.cc); tests/frameworks/jax_differential_test.py checks the
// same against a real jaxlib.

#include "coordination/server/xla_errors.h"

#include <string>
#include <vector>

#include "coordination/core/error_details.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Case {
  std::string name;
  absl::Status core;  // What the core answered.
  XlaCall call;
  absl::StatusCode code;
  std::string message;       // XLA's text: the whole message, or
  bool prefix_only = false;  // its start (Cohort's sentence follows on a line "Cohort: ...").
  bool coordination_error = true;
  std::optional<std::pair<std::string, int64_t>> barrier = std::nullopt;
};

XlaCall Call(absl::string_view method, TaskId task = 2) {
  XlaCall call;
  call.method = method;
  call.task = task;
  call.num_tasks = 4;
  call.service_incarnation = 77;
  return call;
}
XlaCall KeyCall(absl::string_view method, std::string key) {
  XlaCall call = Call(method);
  call.key = std::move(key);
  return call;
}
XlaCall BarrierCall(std::string id, int64_t counter, TaskId task = 2) {
  XlaCall call = Call("Barrier", task);
  call.barrier_id = std::move(id);
  call.counter = counter;
  return call;
}
BarrierReport Report(std::string id, int64_t counter, TaskId first, int32_t arrived, int32_t of,
                     std::vector<TaskId> missing) {
  return BarrierReport{std::move(id), counter, first, arrived, of, std::move(missing)};
}
absl::Status With(absl::Status s, ErrorDetails d) { return WithDetails(std::move(s), d); }

std::vector<Case> Cases() {
  const absl::Status cohort_says = absl::UnknownError("Cohort's sentence");
  return {
      {"TryGetMissing", absl::NotFoundError("key 'a/b' is not set"),
       KeyCall("TryGetKeyValue", "/a//b"), absl::StatusCode::kNotFound,
       "Config key /a//b not found."},
      {"InsertExisting",
       With(absl::AlreadyExistsError("x"), {.kind = ErrorKind::kKeyExists, .key = "a/b"}),
       KeyCall("InsertKeyValue", "//a/b"), absl::StatusCode::kAlreadyExists,
       "key a/b already exists.", false, /*coordination_error=*/false},
      {"IncrementText",
       With(absl::InvalidArgumentError("x"),
            {.kind = ErrorKind::kNotAnInteger, .key = "n", .value = "seven"}),
       KeyCall("IncrementKeyValue", "n"), absl::StatusCode::kFailedPrecondition,
       "Failed to parse value \"seven\" as an integer."},
      {"BarrierTimedOut",
       With(absl::DeadlineExceededError("barrier 'b' (call #1) timed out"),
            {.kind = ErrorKind::kBarrierTimedOut, .barrier = Report("b", 0, 2, 1, 4, {0, 1, 3})}),
       BarrierCall("b", 0), absl::StatusCode::kDeadlineExceeded,
       "Barrier timed out. Id: b::0. This usually happens because a task triggered the barrier too "
       "early or too slowly. Please look at the task logs (both timed out and first task) to debug "
       "further.\n# of tasks that reached the barrier: 1/4.\nThe first task at the barrier: 2. "
       "Some "
       "timed out task names:\n0\n1\n\nCohort: barrier 'b' (call #1) timed out",
       false, true, std::make_pair("b", 0)},
      {"BarrierNonParticipant",
       With(absl::InvalidArgumentError("x"), {.kind = ErrorKind::kBarrierNonParticipant,
                                              .barrier = Report("np", 3, 2, 0, 2, {0, 1}),
                                              .task = 2}),
       BarrierCall("np", 3, 0), absl::StatusCode::kInvalidArgument,
       "A non-participating task (2) called the barrier: np::3", false, true,
       std::make_pair("np", 3)},
      {"BarrierUnknownTask",
       With(absl::InvalidArgumentError("x"), {.kind = ErrorKind::kBarrierUnknownTask,
                                              .barrier = Report("u", 0, 0, 0, 2, {}),
                                              .task = 7}),
       BarrierCall("u", 0, 0), absl::StatusCode::kInvalidArgument,
       "Unexpected task (7) that is not in the cluster called the barrier. Barrier Id: u::0", false,
       true, std::make_pair("u", 0)},
      {"BarrierConflicting",
       With(absl::InvalidArgumentError("x"),
            {.kind = ErrorKind::kBarrierConflictingTasks, .barrier = Report("c", 1, 0, 1, 2, {1})}),
       BarrierCall("c", 1), absl::StatusCode::kInvalidArgument,
       "Conflicting tasks specified by different processes for the same barrier: c::1. Check that "
       "the "
       "callers are invoking the barrier with the same arguments.",
       false, true, std::make_pair("c", 1)},
      {"BarrierConflictingCallerNamedNone",
       With(absl::InvalidArgumentError("x"), {.kind = ErrorKind::kBarrierConflictingTasks,
                                              .barrier = Report("c", 0, 0, 1, 2, {1}),
                                              .caller_named_every_task = true}),
       BarrierCall("c", 0), absl::StatusCode::kInvalidArgument,
       "c::0: No tasks were specified by the client, which implies that the entire cluster is "
       "participating in the barrier. However, the service disagrees. Check that the callers are "
       "invoking the barrier with the same arguments.",
       false, true, std::make_pair("c", 0)},
      {"BarrierCounterMismatch_Restart",
       With(absl::FailedPreconditionError("x"), {.kind = ErrorKind::kBarrierCounterMismatch,
                                                 .barrier = Report("s", 4, 0, 1, 2, {1}),
                                                 .counter = 0}),
       BarrierCall("s", 0), absl::StatusCode::kInternal,
       "Barrier (s::0) is invoked by the task, but the service thinks it is the 4-th instance. The "
       "service or task probably restarted, check the earlier logs to debug further. Usually, a "
       "restart on the stale tasks will resolve the issue.",
       false, true, std::make_pair("s", 4)},
      {"BarrierCounterMismatch_OutOfStep",
       With(absl::FailedPreconditionError("x"), {.kind = ErrorKind::kBarrierCounterMismatch,
                                                 .barrier = Report("s", 1, 0, 1, 2, {1}),
                                                 .counter = 3}),
       BarrierCall("s", 3), absl::StatusCode::kInternal,
       "Barrier (s::3) is invoked by the task, but the service thinks it is the 1-th instance. One "
       "task "
       "is probably way too quick / slow in its execution. For example, one task started a barrier "
       "early, which timed out, and started a second barrier before the late task even joined "
       "once.",
       false, true, std::make_pair("s", 1)},
      {"BarrierCancelled",
       With(absl::CancelledError("x"), {.kind = ErrorKind::kBarrierCancelled,
                                        .barrier = Report("p", 0, 0, 1, 2, {1}),
                                        .task = 1}),
       BarrierCall("p", 0), absl::StatusCode::kCancelled, "Barrier (p::0) is cancelled by task: 1",
       false, true, std::make_pair("p", 0)},
      {"BarrierJobFailed_KeepsTheCoresWords", absl::AbortedError("rank 3 failed because ..."),
       BarrierCall("b", 2), absl::StatusCode::kAborted, "rank 3 failed because ...", false, true,
       std::make_pair("b", 2)},
      {"CancelNotStarted",
       With(absl::NotFoundError("x"), {.kind = ErrorKind::kCancelNotInProgress,
                                       .barrier = Report("p", 0, -1, 0, 0, {}),
                                       .counter = 1}),
       [] {
         XlaCall c = BarrierCall("p", 1);
         c.method = "CancelBarrier";
         return c;
       }(),
       absl::StatusCode::kFailedPrecondition,
       "Barrier (p::1) is cancelled by task, but the service thinks it is the 0-th instance. This "
       "is "
       "likely due to a restart in the task or service.",
       false, true, std::make_pair("p", 0)},
      {"CancelPassed",
       With(absl::FailedPreconditionError("x"), {.kind = ErrorKind::kCancelAlreadyPassed,
                                                 .barrier = Report("p", 0, 0, 2, 2, {}),
                                                 .code = 4}),
       [] {
         XlaCall c = BarrierCall("p", 0);
         c.method = "CancelBarrier";
         return c;
       }(),
       absl::StatusCode::kFailedPrecondition,
       "Barrier (p::0) has already been passed with status code: 4", false, true,
       std::make_pair("p", 0)},
      {"AliveTasksWithoutTheCaller", absl::InvalidArgumentError("x"), Call("GetAliveTasks", 2),
       absl::StatusCode::kInvalidArgument,
       "Requesting task 2 is not one of the tasks specified in a GetAliveTasks request.", false,
       /*coordination_error=*/false},
      {"ShutdownTimedOut",
       With(absl::DeadlineExceededError("shutdown barrier timed out after 2s"),
            {.kind = ErrorKind::kShutdownTimedOut, .barrier = Report("", 0, 1, 3, 4, {3})}),
       Call("ShutdownTask"), absl::StatusCode::kInternal,
       "Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier timed out. Id: "
       "Shutdown::77::0. This usually happens because a task triggered the barrier too early or "
       "too "
       "slowly. Please look at the task logs (both timed out and first task) to debug further.\n# "
       "of "
       "tasks that reached the barrier: 3/4.\nThe first task at the barrier: 1. Some timed out "
       "task "
       "names:\n3\n [type.googleapis.com/tensorflow.CoordinationServiceError=''] "
       "[type.googleapis.com/tensorflow.BarrierError='\\n\\x0cShutdown::77']\nCohort: shutdown "
       "barrier "
       "timed out after 2s"},
      {"RegistrationTimedOut",
       With(absl::DeadlineExceededError("registration timed out"),
            {.kind = ErrorKind::kRegistrationTimedOut, .barrier = Report("", 0, 0, 3, 4, {2})}),
       Call("RegisterTask"), absl::StatusCode::kDeadlineExceeded,
       "Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. This usually happens", true,
       true, std::make_pair("[Init]Wait_for_all_tasks_to_register", 0)},
      {"RegisterOutOfRange", absl::InvalidArgumentError("x"), Call("RegisterTask", 9),
       absl::StatusCode::kInvalidArgument, "Unexpected task registered with task=9"},
      {"HeartbeatOutOfRange", absl::InvalidArgumentError("x"), Call("Heartbeat", 9),
       absl::StatusCode::kInvalidArgument,
       "Unexpected heartbeat request from task: 9. This usually implies a configuration error."},
      {"HeartbeatBeforeRegistering", absl::FailedPreconditionError("x"), Call("Heartbeat", 1),
       absl::StatusCode::kInvalidArgument,
       "Task with task=1 must be registered before sending heartbeat messages.", true},
      {"PollBeforeRegistering", absl::FailedPreconditionError("x"), Call("PollForError", 1),
       absl::StatusCode::kFailedPrecondition,
       "Task (1) that has not been registered or has disconnected polling for errors."},
      {"AnythingElse_TheCoresWords", cohort_says, Call("DeleteKeyValue"),
       absl::StatusCode::kUnknown, "Cohort's sentence"},
  };
}

class XlaErrorsTest : public ::testing::TestWithParam<Case> {};

TEST_P(XlaErrorsTest, AnswersAsXlasService) {
  const Case& c = GetParam();
  XlaError e = ToXlaError(c.core, c.call);
  EXPECT_EQ(e.status.code(), c.code) << e.status;
  if (c.prefix_only) {
    EXPECT_THAT(std::string(e.status.message()), StartsWith(c.message));
  } else {
    EXPECT_EQ(e.status.message(), c.message);
  }
  EXPECT_EQ(e.coordination_error, c.coordination_error);
  EXPECT_EQ(e.source_task, -1) << "XLA names a source task only for a task's own failure";
  EXPECT_EQ(e.barrier, c.barrier);
}

INSTANTIATE_TEST_SUITE_P(EveryCase, XlaErrorsTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

TEST(XlaErrorsTest, Ok_StaysOkWithNoPayload) {
  XlaError e = ToXlaError(absl::OkStatus(), Call("Barrier"));
  EXPECT_TRUE(e.status.ok());
  EXPECT_FALSE(e.coordination_error);
  EXPECT_FALSE(e.barrier.has_value());
}

TEST(XlaErrorsTest, DetailsSurviveTheirPayload) {
  ErrorDetails d{.kind = ErrorKind::kBarrierTimedOut,
                 .barrier = Report("id with\nnewline=and,commas", 5, 3, 2, 4, {0, 1}),
                 .task = 3,
                 .key = "k\\ey",
                 .value = std::string("v\0x", 3),
                 .counter = -2,
                 .code = 9,
                 .caller_named_every_task = true};
  std::optional<ErrorDetails> back = DetailsOf(WithDetails(absl::InternalError("x"), d));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->kind, d.kind);
  EXPECT_EQ(back->barrier.id, d.barrier.id);
  EXPECT_EQ(back->barrier.counter, 5);
  EXPECT_EQ(back->barrier.first_task, 3);
  EXPECT_EQ(back->barrier.arrived, 2);
  EXPECT_EQ(back->barrier.participants, 4);
  EXPECT_EQ(back->barrier.missing, (std::vector<TaskId>{0, 1}));
  EXPECT_EQ(back->task, 3);
  EXPECT_EQ(back->key, d.key);
  EXPECT_EQ(back->value, d.value);
  EXPECT_EQ(back->counter, -2);
  EXPECT_EQ(back->code, 9);
  EXPECT_TRUE(back->caller_named_every_task);
  EXPECT_FALSE(DetailsOf(absl::InternalError("no details")).has_value());
}

// The job's failure as every PollForError hears of it.
TEST(XlaErrorsTest, JobFailure_XlasWordsWhereXlaHasThem_ThenCohortsSentence) {
  TaskFailure heartbeat{3, FailureCause::kHeartbeatTimeout, "rank 3 (host) failed because ..."};
  XlaError e = JobFailureError(heartbeat, 77, std::nullopt);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      e.status.message(),
      "The following tasks are unhealthy (stopped sending heartbeats):\n3\nThe tasks have crashed. "
      "Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) "
      "to debug further.\nCohort: rank 3 (host) failed because ...");
  EXPECT_EQ(e.source_task, -1);

  TaskFailure shutdown{3, FailureCause::kShutdownTimeout, "shutdown barrier timed out"};
  shutdown.barrier = Report("", 0, 0, 3, 4, {3});
  e = JobFailureError(shutdown, 77, std::nullopt);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(
      std::string(e.status.message()),
      StartsWith("Shutdown barrier has failed.\nBarrier result: 'DEADLINE_EXCEEDED: Barrier "
                 "timed out. Id: Shutdown::77::0."));

  TaskFailure reported{1, FailureCause::kReportedError,
                       "rank 1 failed because it reported an error"};
  e = JobFailureError(reported, 77, absl::DataLossError("checkpoint gone"));
  EXPECT_EQ(e.status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(e.status.message(),
            "checkpoint gone\nCohort: rank 1 failed because it reported an error");
  EXPECT_EQ(e.source_task, 1);
  EXPECT_TRUE(e.reported);

  TaskFailure restarted{2, FailureCause::kRestarted, "rank 2 registered again"};
  e = JobFailureError(restarted, 77, std::nullopt);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(e.status.message()),
              StartsWith("2 unexpectedly tried to connect with a different incarnation. It has "
                         "likely restarted."));

  TaskFailure died{1, FailureCause::kProcessExited,
                   "rank 1 (JAX process at 10.0.0.1:4) failed because its process died"};
  e = JobFailureError(died, 77, std::nullopt);
  EXPECT_EQ(e.status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(e.status.message(), "Cohort coordination service: " + died.message);
  EXPECT_EQ(e.source_task, 1);
}

TEST(XlaErrorsTest, TaskState_HeartbeatTimeoutNamesTheTask) {
  TaskFailure heartbeat{3, FailureCause::kHeartbeatTimeout, "rank 3 failed"};
  absl::Status s = TaskStateError(heartbeat, 77, std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()),
              StartsWith("Task 3 heartbeat timeout. This indicates that the remote task"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("\nCohort: rank 3 failed"));
}

}  // namespace
}  // namespace cohort::coordination
