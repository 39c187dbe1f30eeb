#include "coordination/core/coordination_service.h"

#include <memory>
#include <optional>
#include <vector>

#include "coordination/core/error_details.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;

// Captures the one completion of a waiting call.
struct Result {
  std::optional<absl::Status> status;
  CoordinationService::DoneCallback Callback() {
    return [this](absl::Status s) {
      ASSERT_FALSE(status.has_value()) << "callback invoked twice";
      status = s;
    };
  }
  bool ok() const { return status.has_value() && status->ok(); }
  absl::StatusCode code() const { return status ? status->code() : absl::StatusCode::kUnknown; }
  std::string message() const { return status ? std::string(status->message()) : "<pending>"; }
};

// The status carries details of `kind` saying who reached the barrier: the first to arrive, how
// many of how many, and who is missing.
void ExpectBarrierReport(const std::optional<absl::Status>& status, ErrorKind kind, TaskId first,
                         int32_t arrived, int32_t participants, std::vector<TaskId> missing) {
  ASSERT_TRUE(status.has_value());
  std::optional<ErrorDetails> d = DetailsOf(*status);
  ASSERT_TRUE(d.has_value()) << *status;
  EXPECT_EQ(d->kind, kind);
  EXPECT_EQ(d->barrier.first_task, first);
  EXPECT_EQ(d->barrier.arrived, arrived);
  EXPECT_EQ(d->barrier.participants, participants);
  EXPECT_EQ(d->barrier.missing, missing);
}

class CoordinationServiceTest : public ::testing::Test {
 protected:
  void Start(int n, ServiceConfig config = {}) {
    config.num_tasks = n;
    service_ = std::make_unique<CoordinationService>(config, &clock_);
  }
  Incarnation Inc(TaskId t) const { return 1000 + t; }
  OpId Register(TaskId t, Result* r, Incarnation inc = 0) {
    return service_->RegisterTask(
        RegisterArgs{
            t, inc ? inc : Inc(t), service_->config().num_tasks, "host", 100 + t, {}, {}, {}},
        r->Callback());
  }
  void ConnectAll(int n) {
    std::vector<Result> results(n);
    for (int t = 0; t < n; ++t) Register(t, &results[t]);
    for (int t = 0; t < n; ++t) ASSERT_TRUE(results[t].ok()) << results[t].message();
  }
  OpId CallBarrier(TaskId t, const std::string& id, int64_t counter, Result* r,
                   std::vector<TaskId> participants = {},
                   absl::Duration timeout = absl::Seconds(10)) {
    return service_->Barrier(BarrierArgs{t, Inc(t), id, counter, timeout, participants},
                             r->Callback());
  }
  // Watches task t's job events; they collect in watched_ in the order of the calls.
  void WatchEvents(TaskId t) {
    auto events = std::make_shared<std::vector<JobEvent>>();
    watched_.push_back(events);
    EXPECT_TRUE(
        service_->Watch(t, Inc(t), [events](const JobEvent& e) { events->push_back(e); }).ok());
  }

  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::vector<std::shared_ptr<std::vector<JobEvent>>> watched_;
};

// --- Task states (XLA's WatchTasks) ----------------------------------------------------------

struct StatesResult {
  std::optional<absl::StatusOr<CoordinationService::TaskStates>> states;
  CoordinationService::TaskStatesCallback Callback() {
    return [this](absl::StatusOr<CoordinationService::TaskStates> s) {
      ASSERT_FALSE(states.has_value()) << "callback invoked twice";
      states = std::move(s);
    };
  }
};

TEST_F(CoordinationServiceTest, WatchTaskStates_AtOnceForAnotherVersion_ElseWhenAStateChanges) {
  Start(2);
  StatesResult initial;
  EXPECT_EQ(service_->WatchTaskStates(-1, initial.Callback()), 0u) << "answered at once";
  ASSERT_TRUE(initial.states.has_value() && initial.states->ok());
  const int64_t v0 = (*initial.states)->version;
  EXPECT_EQ((*initial.states)->tasks[0].state, TaskState::kDisconnected);

  StatesResult waiting;
  OpId op = service_->WatchTaskStates(v0, waiting.Callback());
  EXPECT_NE(op, 0u);
  EXPECT_FALSE(waiting.states.has_value()) << "nothing changed yet";
  Result r0;
  Register(0, &r0);
  ASSERT_TRUE(waiting.states.has_value() && waiting.states->ok());
  EXPECT_GT((*waiting.states)->version, v0);
  EXPECT_EQ((*waiting.states)->tasks[0].state, TaskState::kConnecting);
  EXPECT_EQ((*waiting.states)->tasks[0].incarnation, Inc(0));

  Result r1;
  Register(1, &r1);
  StatesResult failed;
  StatesResult now;
  service_->WatchTaskStates(-1, now.Callback());
  service_->WatchTaskStates((*now.states)->version, failed.Callback());
  ASSERT_TRUE(service_->ReportError(1, Inc(1), FailureCause::kReportedError, "loss is NaN").ok());
  ASSERT_TRUE(failed.states.has_value() && failed.states->ok());
  const auto& task1 = (*failed.states)->tasks[1];
  EXPECT_EQ(task1.state, TaskState::kFailed);
  ASSERT_TRUE(task1.failure.has_value());
  EXPECT_EQ(task1.failure->cause, FailureCause::kReportedError);
  EXPECT_THAT(task1.failure->message, HasSubstr("loss is NaN"));
}

TEST_F(CoordinationServiceTest, WatchTaskStates_CancelledOrServiceGone_AnsweredOnce) {
  Start(1);
  StatesResult now, cancelled, stopped;
  service_->WatchTaskStates(-1, now.Callback());
  const int64_t v = (*now.states)->version;
  service_->CancelOp(service_->WatchTaskStates(v, cancelled.Callback()));
  ASSERT_TRUE(cancelled.states.has_value());
  EXPECT_TRUE(absl::IsCancelled(cancelled.states->status()));
  EXPECT_TRUE(service_->JobStatus().ok()) << "a watcher going away is not a failure";
  service_->WatchTaskStates(v, stopped.Callback());
  service_.reset();
  ASSERT_TRUE(stopped.states.has_value());
  EXPECT_TRUE(absl::IsUnavailable(stopped.states->status()));
}

// --- Registration --------------------------------------------------------------------------

TEST_F(CoordinationServiceTest, Register_CompletesOnlyWhenAllTasksRegistered) {
  Start(3);
  Result r0, r1, r2;
  Register(0, &r0);
  Register(1, &r1);
  EXPECT_FALSE(r0.status.has_value());
  Register(2, &r2);
  EXPECT_TRUE(r0.ok());
  EXPECT_TRUE(r1.ok());
  EXPECT_TRUE(r2.ok());
  EXPECT_EQ(service_->GetSnapshot().tasks[1].state, TaskState::kConnected);
}

TEST_F(CoordinationServiceTest, Register_OutOfRange_InvalidArgumentNamesRange) {
  Start(4);
  Result r;
  Register(7, &r);
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.message(), HasSubstr("0..3"));
  EXPECT_THAT(r.message(), HasSubstr("COHORT_PROCESS_ID"));
}

TEST_F(CoordinationServiceTest, Register_NumTasksMismatch_InvalidArgument) {
  Start(4);
  Result r;
  service_->RegisterTask(RegisterArgs{1, Inc(1), 8, "h", 1, {}, {}, {}}, r.Callback());
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.message(), HasSubstr("num_processes mismatch"));
  EXPECT_THAT(r.message(), HasSubstr("8"));
}

TEST_F(CoordinationServiceTest, Register_DuplicateRank_SecondProcessRejectedFirstKeepsWaiting) {
  Start(2);
  Result first, second;
  Register(1, &first, 111);
  Register(1, &second, 222);
  EXPECT_EQ(second.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(second.message(), HasSubstr("distinct COHORT_PROCESS_ID"));
  EXPECT_FALSE(first.status.has_value());
  Result r0;
  Register(0, &r0);
  EXPECT_TRUE(first.ok());
}

TEST_F(CoordinationServiceTest, Register_RetrySameIncarnationAfterConnect_IsHarmless) {
  Start(2);
  ConnectAll(2);
  Result retry;
  Register(0, &retry);
  EXPECT_TRUE(retry.ok());
  EXPECT_TRUE(service_->JobStatus().ok());
}

TEST_F(CoordinationServiceTest, Register_NewIncarnationAfterConnect_FailsJobForEveryone) {
  Start(3);
  ConnectAll(3);
  WatchEvents(2);
  Result barrier;
  CallBarrier(2, "b", 0, &barrier);
  Result again;
  Register(1, &again, 999);
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(barrier.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(barrier.message(), HasSubstr("rank 1"));
  ASSERT_EQ(watched_[0]->size(), 1u);
  const auto& failure = std::get<TaskFailure>((*watched_[0])[0]);
  EXPECT_EQ(failure.task, 1);
  EXPECT_EQ(failure.cause, FailureCause::kRestarted);
}

TEST_F(CoordinationServiceTest, Register_ConnectionClosedWhileWaiting_FailsTheJobAtOnce) {
  // The process (or its sidecar) died in the connect barrier: the others stop waiting now, not
  // at the initialization timeout.
  Start(3);
  Result r0, r1;
  Register(0, &r0);
  OpId op = Register(1, &r1);
  service_->CancelOp(op);
  EXPECT_EQ(r1.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(r0.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(r0.message(), HasSubstr("rank 1"));
  EXPECT_THAT(r0.message(), HasSubstr("closed while it waited"));
  EXPECT_EQ(service_->GetSnapshot().tasks[1].state, TaskState::kFailed);
}

TEST_F(CoordinationServiceTest, Register_Timeout_NamesMissingRanksAndFailsJob) {
  ServiceConfig config;
  config.register_timeout = absl::Seconds(30);
  Start(5, config);
  Result r0, r2;
  Register(0, &r0);
  Register(2, &r2);
  clock_.Advance(absl::Seconds(29));
  service_->CheckDeadlines();
  EXPECT_FALSE(r0.status.has_value());
  clock_.Advance(absl::Seconds(1));
  service_->CheckDeadlines();
  EXPECT_EQ(r0.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r0.message(), HasSubstr("2/5 processes registered"));
  EXPECT_THAT(r0.message(), HasSubstr("missing rank(s) 1, 3, 4"));
  EXPECT_EQ(service_->JobStatus().code(), absl::StatusCode::kAborted);
  ExpectBarrierReport(r0.status, ErrorKind::kRegistrationTimedOut, 0, 2, 5, {1, 3, 4});
}

// --- Heartbeats and failure propagation -----------------------------------------------------

TEST_F(CoordinationServiceTest, Heartbeat_Timeout_PropagatesFailureNamingRank) {
  ServiceConfig config;
  config.heartbeat_timeout = absl::Seconds(3);
  Start(3, config);
  ConnectAll(3);
  WatchEvents(0);
  WatchEvents(1);
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(service_->Heartbeat(0, Inc(0)).ok());
    ASSERT_TRUE(service_->Heartbeat(1, Inc(1)).ok());
    EXPECT_TRUE(watched_[0]->empty()) << "failure declared before the timeout passed";
    service_->CheckDeadlines();
  }
  // Rank 2 never heartbeat: at t=4 s it is past the 3 s timeout; ranks 0 and 1 are 0 s old.
  for (const auto& events : watched_) {
    ASSERT_EQ(events->size(), 1u);
    const auto& failure = std::get<TaskFailure>((*events)[0]);
    EXPECT_EQ(failure.task, 2);
    EXPECT_EQ(failure.cause, FailureCause::kHeartbeatTimeout);
    EXPECT_THAT(failure.message, HasSubstr("rank 2"));
  }
  EXPECT_EQ(service_->Heartbeat(0, Inc(0)).code(), absl::StatusCode::kAborted);
}

TEST_F(CoordinationServiceTest, Heartbeat_CarriesProgress_JobProgressAgesItFromTheReport) {
  Start(2);
  ConnectAll(2);
  std::vector<CollectiveProgress> progress = {
      {"world#0", 183, 182, "all_reduce #183 (float32 sum, 8 elements)", 42, absl::Seconds(5)}};
  // Reported by the program 1 s before this heartbeat carried it.
  ASSERT_TRUE(service_->Heartbeat(0, Inc(0), &progress, absl::Seconds(1)).ok());
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(service_->Heartbeat(1, Inc(1)).ok());
  absl::StatusOr<std::vector<TaskProgress>> table = service_->GetJobProgress(1, Inc(1));
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->size(), 2u);
  const TaskProgress& zero = (*table)[0];
  EXPECT_EQ(zero.state, TaskState::kConnected);
  EXPECT_EQ(zero.since_heartbeat, absl::Seconds(2));
  EXPECT_EQ(zero.since_report, absl::Seconds(3));
  ASSERT_EQ(zero.communicators.size(), 1u);
  EXPECT_EQ(zero.communicators[0].last_started, 183u);
  EXPECT_EQ(zero.communicators[0].pending_signature, 42u);
  EXPECT_EQ(zero.communicators[0].pending_for, absl::Seconds(8));  // 5 s + 3 s since the report.
  const TaskProgress& one = (*table)[1];
  EXPECT_EQ(one.since_heartbeat, absl::ZeroDuration());
  EXPECT_FALSE(one.since_report.has_value());  // Its program never reported.
  EXPECT_TRUE(one.communicators.empty());
  // Only a registered task may ask.
  EXPECT_EQ(service_->GetJobProgress(0, Inc(0) + 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinationServiceTest, Heartbeat_WrongIncarnation_FailsJobAsRestart) {
  Start(2);
  ConnectAll(2);
  EXPECT_EQ(service_->Heartbeat(1, 4242).code(), absl::StatusCode::kAborted);
  EXPECT_THAT(service_->JobStatus().message(), HasSubstr("restarted"));
}

TEST_F(CoordinationServiceTest, ReportError_FirstFailureWinsAndLaterOnesAreNotBroadcast) {
  Start(3);
  ConnectAll(3);
  WatchEvents(0);
  ASSERT_TRUE(service_->ReportError(1, Inc(1), FailureCause::kProcessExited, "killed").ok());
  ASSERT_TRUE(service_->ReportError(2, Inc(2), FailureCause::kProcessExited, "exited").ok());
  ASSERT_EQ(watched_[0]->size(), 1u);
  EXPECT_EQ(std::get<TaskFailure>((*watched_[0])[0]).task, 1);
}

TEST_F(CoordinationServiceTest, Watch_ClosedWithoutShutdown_FailsTheTaskAndTellsTheOthers) {
  Start(2);
  ConnectAll(2);
  WatchEvents(0);
  absl::StatusOr<OpId> op = service_->Watch(1, Inc(1), [](const JobEvent&) {});
  ASSERT_TRUE(op.ok());
  service_->CancelOp(*op);  // Rank 1's connection closed: its process died.
  ASSERT_EQ(watched_[0]->size(), 1u);
  const TaskFailure& f = std::get<TaskFailure>((*watched_[0])[0]);
  EXPECT_EQ(f.task, 1);
  EXPECT_EQ(f.cause, FailureCause::kProcessExited);
  EXPECT_THAT(f.message, HasSubstr("closed without a shutdown"));
}

TEST_F(CoordinationServiceTest, Watch_ClosedAfterShutdown_IsNoFailure) {
  Start(1);
  ConnectAll(1);
  absl::StatusOr<OpId> op = service_->Watch(0, Inc(0), [](const JobEvent&) {});
  ASSERT_TRUE(op.ok());
  Result shut;
  service_->ShutdownTask(0, Inc(0), shut.Callback());
  ASSERT_TRUE(shut.ok()) << shut.message();
  service_->CancelOp(*op);
  EXPECT_TRUE(service_->JobStatus().ok()) << service_->JobStatus();
}

TEST_F(CoordinationServiceTest, ReportError_FromAnObserver_HoldsForARegisteredRank) {
  // cohort-run saw rank 1's process die right after it registered, before its event stream
  // opened: nothing else would tell the job until the heartbeat timeout.
  Start(2);
  ConnectAll(2);
  WatchEvents(0);
  ASSERT_TRUE(service_
                  ->ReportError(1, kObserverIncarnation, FailureCause::kProcessExited,
                                "sidecar 1 killed by signal 9 (seen by cohort-run)")
                  .ok());
  ASSERT_EQ(watched_[0]->size(), 1u);
  EXPECT_EQ(std::get<TaskFailure>((*watched_[0])[0]).task, 1);
  // A report from another incarnation of the process itself is still refused.
  Start(2);
  ConnectAll(2);
  EXPECT_TRUE(
      absl::IsAborted(service_->ReportError(1, Inc(1) + 7, FailureCause::kReportedError, "stale")));
  EXPECT_TRUE(service_->JobStatus().ok());
}

TEST_F(CoordinationServiceTest, Watch_AfterFailure_ReplaysFailure) {
  Start(2);
  ConnectAll(2);
  ASSERT_TRUE(service_->ReportError(1, Inc(1), FailureCause::kReportedError, "bad data").ok());
  WatchEvents(0);
  ASSERT_EQ(watched_[0]->size(), 1u);
  EXPECT_THAT(std::get<TaskFailure>((*watched_[0])[0]).message, HasSubstr("bad data"));
}

TEST_F(CoordinationServiceTest, JobFailure_FailsPendingBlockingGet) {
  Start(2);
  ConnectAll(2);
  std::optional<absl::StatusOr<std::string>> got;
  service_->GetKeyValue(0, Inc(0), "never", absl::Hours(1),
                        [&](absl::StatusOr<std::string> v) { got = v; });
  ASSERT_TRUE(service_->ReportError(1, Inc(1), FailureCause::kProcessExited, "kill -9").ok());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(got->status().message()), HasSubstr("rank 1"));
}

// --- Key-value store ------------------------------------------------------------------------

TEST_F(CoordinationServiceTest, KeyValue_BlockingGetWokenBySet) {
  Start(2);
  ConnectAll(2);
  std::optional<absl::StatusOr<std::string>> got;
  service_->GetKeyValue(1, Inc(1), "addr/0", absl::Seconds(5),
                        [&](absl::StatusOr<std::string> v) { got = v; });
  EXPECT_FALSE(got.has_value());
  ASSERT_TRUE(service_->InsertKeyValue(0, Inc(0), "/addr//0", "10.0.0.1", false).ok());
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(**got, "10.0.0.1");
}

TEST_F(CoordinationServiceTest, KeyValue_BlockingGetTimesOut) {
  Start(1);
  ConnectAll(1);
  std::optional<absl::StatusOr<std::string>> got;
  service_->GetKeyValue(0, Inc(0), "k", absl::Seconds(5),
                        [&](absl::StatusOr<std::string> v) { got = v; });
  clock_.Advance(absl::Seconds(5));
  service_->CheckDeadlines();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinationServiceTest, KeyValue_CancelledGetIsForgotten) {
  Start(1);
  ConnectAll(1);
  std::optional<absl::StatusOr<std::string>> got;
  OpId op = service_->GetKeyValue(0, Inc(0), "k", absl::Seconds(5),
                                  [&](absl::StatusOr<std::string> v) { got = v; });
  service_->CancelOp(op);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->GetSnapshot().kv_waiters, 0u);
}

TEST_F(CoordinationServiceTest, KeyValue_OperationsBeforeRegistration_FailedPrecondition) {
  Start(2);
  EXPECT_EQ(service_->InsertKeyValue(0, Inc(0), "k", "v", false).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinationServiceTest, KeyValue_TryGetDirDeleteIncrement) {
  Start(1);
  ConnectAll(1);
  EXPECT_EQ(service_->TryGetKeyValue(0, Inc(0), "x").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(service_->InsertKeyValue(0, Inc(0), "d/a", "1", false).ok());
  ASSERT_TRUE(service_->InsertKeyValue(0, Inc(0), "d/b", "2", false).ok());
  EXPECT_EQ(service_->GetKeyValueDir(0, Inc(0), "d")->size(), 2u);
  ASSERT_TRUE(service_->DeleteKeyValue(0, Inc(0), "d").ok());
  EXPECT_TRUE(service_->GetKeyValueDir(0, Inc(0), "d")->empty());
  EXPECT_EQ(*service_->IncrementKeyValue(0, Inc(0), "c", 3), 3);
  EXPECT_EQ(*service_->TryGetKeyValue(0, Inc(0), "c"), "3");
}

// --- Barriers -------------------------------------------------------------------------------

TEST_F(CoordinationServiceTest, Snapshot_OldestOpenBarrierAndWhoIsInIt) {
  Start(3);
  ConnectAll(3);
  EXPECT_EQ(service_->GetSnapshot().oldest_barrier_since, absl::InfiniteFuture());
  Result a0, a2, b1;
  CallBarrier(0, "a", 0, &a0);
  absl::Time a_opened = clock_.Now();
  clock_.Advance(absl::Seconds(5));
  CallBarrier(1, "b", 0, &b1);  // Younger: not the one reported.
  CallBarrier(2, "a", 0, &a2);
  auto snap = service_->GetSnapshot();
  EXPECT_EQ(snap.barriers_in_progress, 2u);
  EXPECT_EQ(snap.oldest_barrier_since, a_opened);
  EXPECT_TRUE(snap.tasks[0].in_oldest_barrier);
  EXPECT_FALSE(snap.tasks[1].in_oldest_barrier) << "rank 1 is the one barrier 'a' waits for";
  EXPECT_TRUE(snap.tasks[2].in_oldest_barrier);

  // Rank 1 arrives: "a" passes and "b", rank 1's, is the oldest open one.
  Result a1, b0, b2;
  CallBarrier(1, "a", 0, &a1);
  ASSERT_TRUE(a0.ok() && a1.ok() && a2.ok());
  snap = service_->GetSnapshot();
  EXPECT_EQ(snap.oldest_barrier_since, a_opened + absl::Seconds(5));
  EXPECT_TRUE(snap.tasks[1].in_oldest_barrier);
  EXPECT_FALSE(snap.tasks[0].in_oldest_barrier);
  CallBarrier(0, "b", 0, &b0);
  CallBarrier(2, "b", 0, &b2);
  ASSERT_TRUE(b0.ok() && b1.ok() && b2.ok());
  EXPECT_EQ(service_->GetSnapshot().oldest_barrier_since, absl::InfiniteFuture());
}

TEST_F(CoordinationServiceTest, Heartbeat_CarriesTheTrainingStepAndWhenItWasReported) {
  Start(2);
  ConnectAll(2);
  EXPECT_FALSE(service_->GetSnapshot().tasks[1].step.has_value());
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(
      service_
          ->Heartbeat(1, Inc(1), nullptr, absl::ZeroDuration(), StepReport{42, absl::Seconds(2)})
          .ok());
  auto snap = service_->GetSnapshot();
  EXPECT_EQ(snap.tasks[1].step, 42);
  EXPECT_EQ(snap.tasks[1].step_at, clock_.Now() - absl::Seconds(2));
  // A heartbeat without a step keeps the last one.
  ASSERT_TRUE(service_->Heartbeat(1, Inc(1)).ok());
  EXPECT_EQ(service_->GetSnapshot().tasks[1].step, 42);
  EXPECT_FALSE(service_->GetSnapshot().tasks[0].step.has_value());
}

TEST_F(CoordinationServiceTest, Barrier_PassesWhenAllArrive) {
  Start(3);
  ConnectAll(3);
  Result r0, r1, r2;
  CallBarrier(0, "b", 0, &r0);
  CallBarrier(1, "b", 0, &r1);
  EXPECT_FALSE(r0.status.has_value());
  CallBarrier(2, "b", 0, &r2);
  EXPECT_TRUE(r0.ok() && r1.ok() && r2.ok());
}

TEST_F(CoordinationServiceTest, Barrier_DeadlineSetByFirstArrival_TimeoutNamesMissing) {
  Start(4);
  ConnectAll(4);
  Result r0, r1;
  CallBarrier(0, "b", 0, &r0, {}, absl::Seconds(10));
  clock_.Advance(absl::Seconds(8));
  CallBarrier(1, "b", 0, &r1, {}, absl::Seconds(100));  // Does not extend the deadline.
  clock_.Advance(absl::Seconds(2));
  for (TaskId t = 0; t < 4; ++t) ASSERT_TRUE(service_->Heartbeat(t, Inc(t)).ok());
  service_->CheckDeadlines();
  EXPECT_EQ(r0.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r1.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r0.message(), HasSubstr("2/4 tasks arrived"));
  EXPECT_THAT(r0.message(), HasSubstr("missing rank(s) 2, 3"));
  // A late arrival with the same counter gets the same result.
  Result late;
  CallBarrier(2, "b", 0, &late);
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinationServiceTest, Barrier_SubsetOfTasks) {
  Start(4);
  ConnectAll(4);
  Result r1, r3;
  CallBarrier(1, "pair", 0, &r1, {3, 1});
  CallBarrier(3, "pair", 0, &r3, {1, 3});
  EXPECT_TRUE(r1.ok() && r3.ok());
}

// As XLA's service: a caller outside the named participants fails the barrier for them too, so
// the mistake shows on every process instead of only on the one that made it.
TEST_F(CoordinationServiceTest, Barrier_NonParticipant_FailsTheBarrierForItsParticipants) {
  Start(4);
  ConnectAll(4);
  Result waiting, outsider, late;
  CallBarrier(1, "pair", 0, &waiting, {1, 3});
  CallBarrier(0, "pair", 0, &outsider, {1, 3});
  EXPECT_EQ(outsider.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(waiting.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(waiting.message(), HasSubstr("rank 0 called barrier 'pair'"));
  CallBarrier(3, "pair", 0, &late, {1, 3});
  EXPECT_EQ(late.code(), absl::StatusCode::kInvalidArgument) << "the instance's result stands";
  std::optional<ErrorDetails> d = DetailsOf(*late.status);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->kind, ErrorKind::kBarrierNonParticipant);
  EXPECT_EQ(d->task, 0);
  // The next instance is a fresh one.
  Result again1, again3;
  CallBarrier(1, "pair", 1, &again1, {1, 3});
  CallBarrier(3, "pair", 1, &again3, {1, 3});
  EXPECT_TRUE(again1.ok() && again3.ok()) << again1.message();
}

TEST_F(CoordinationServiceTest, Barrier_NonParticipantFirst_ParticipantsGetItsError) {
  Start(3);
  ConnectAll(3);
  Result outsider, p0, p1;
  CallBarrier(2, "np", 0, &outsider, {0, 1});
  CallBarrier(0, "np", 0, &p0, {0, 1});
  CallBarrier(1, "np", 0, &p1, {1, 0});
  for (Result* r : {&outsider, &p0, &p1}) {
    EXPECT_EQ(r->code(), absl::StatusCode::kInvalidArgument) << r->message();
  }
}

TEST_F(CoordinationServiceTest, Barrier_ParticipantNotInTheJob_FailsTheInstance) {
  Start(4);
  ConnectAll(4);
  Result r, later;
  CallBarrier(0, "u", 0, &r, {0, 1, 2, 9});  // Four names, one unknown: not "every task".
  EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
  std::optional<ErrorDetails> d = DetailsOf(*r.status);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->kind, ErrorKind::kBarrierUnknownTask);
  EXPECT_EQ(d->task, 9);
  CallBarrier(1, "u", 0, &later, {0, 1, 2, 9});
  EXPECT_EQ(later.code(), absl::StatusCode::kInvalidArgument);
}

// XLA's service takes any timeout: zero fails the barrier at the next deadline check unless every
// participant arrived first. (Cohort's protocol refuses it before the core: rpc_handler_test.)
TEST_F(CoordinationServiceTest, Barrier_ZeroTimeout_PassesOnlyIfAllArriveBeforeTheCheck) {
  Start(2);
  ConnectAll(2);
  Result a0, a1;
  CallBarrier(0, "now", 0, &a0, {}, absl::ZeroDuration());
  CallBarrier(1, "now", 0, &a1, {}, absl::ZeroDuration());
  EXPECT_TRUE(a0.ok() && a1.ok());
  Result b0;
  CallBarrier(0, "late", 0, &b0, {}, absl::ZeroDuration());
  service_->CheckDeadlines();
  EXPECT_EQ(b0.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinationServiceTest, Barrier_Timeout_DetailsSayWhoArrivedFirstAndWhoIsMissing) {
  Start(4);
  ConnectAll(4);
  Result r2, r0;
  CallBarrier(2, "slow", 0, &r2, {}, absl::Seconds(1));
  CallBarrier(0, "slow", 0, &r0, {}, absl::Seconds(1));
  clock_.Advance(absl::Seconds(1));
  for (TaskId t = 0; t < 4; ++t) ASSERT_TRUE(service_->Heartbeat(t, Inc(t)).ok());
  service_->CheckDeadlines();
  ExpectBarrierReport(r0.status, ErrorKind::kBarrierTimedOut, 2, 2, 4, {1, 3});
  EXPECT_EQ(DetailsOf(*r0.status)->barrier.id, "slow");
}

TEST_F(CoordinationServiceTest, Barrier_EmptyId_IsAnIdLikeAnyOther) {
  Start(2);
  ConnectAll(2);
  Result a, b;
  CallBarrier(0, "", 0, &a);
  CallBarrier(1, "", 0, &b);
  EXPECT_TRUE(a.ok() && b.ok()) << a.message();
}

TEST_F(CoordinationServiceTest, Barrier_ConflictingParticipants_FailsForEveryone) {
  Start(4);
  ConnectAll(4);
  Result r1, r2;
  CallBarrier(1, "b", 0, &r1, {1, 2});
  CallBarrier(2, "b", 0, &r2, {1, 2, 3});
  EXPECT_EQ(r1.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r2.code(), absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz (coordination_service): a completed call repeated with other participants
// was taken for a retry and passed, although the other participants never called it.
TEST_F(CoordinationServiceTest,
       Barrier_CompletedCallRepeatedWithOtherParticipants_InvalidArgument) {
  Start(3);
  ConnectAll(3);
  Result alone, everyone, retry;
  CallBarrier(0, "sync", 0, &alone, {0});
  ASSERT_TRUE(alone.ok()) << alone.message();
  CallBarrier(0, "sync", 0, &everyone);
  EXPECT_EQ(everyone.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(everyone.message(), HasSubstr("other participants"));
  CallBarrier(0, "sync", 0, &retry, {0});  // A true retry still gets the stored result.
  EXPECT_TRUE(retry.ok()) << retry.message();
}

TEST_F(CoordinationServiceTest, Barrier_NegativeOrHugeCounter_RefusedWithoutOverflow) {
  Start(2);
  ConnectAll(2);
  Result negative, huge;
  CallBarrier(0, "b", -1, &negative);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("negative"));
  CallBarrier(0, "b", INT64_MAX, &huge);
  EXPECT_EQ(huge.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(huge.message(), HasSubstr("#9223372036854775808"));
  absl::Status cancel = service_->CancelBarrier(1, Inc(1), "b", INT64_MAX);
  EXPECT_EQ(cancel.code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinationServiceTest, Barrier_ReusableId_SameNumberOfCalls) {
  Start(2);
  ConnectAll(2);
  for (int64_t round = 0; round < 3; ++round) {
    Result a, b;
    CallBarrier(0, "step", round, &a);
    CallBarrier(1, "step", round, &b);
    ASSERT_TRUE(a.ok() && b.ok()) << round << ": " << a.message();
  }
}

TEST_F(CoordinationServiceTest, Barrier_OutOfStepCounter_FailedPrecondition) {
  Start(2);
  ConnectAll(2);
  Result a0, b0;
  CallBarrier(0, "step", 0, &a0);
  CallBarrier(1, "step", 0, &b0);
  Result a2;
  CallBarrier(0, "step", 2, &a2);  // Skipped call #2.
  EXPECT_EQ(a2.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(a2.message(), HasSubstr("same number of times"));
}

TEST_F(CoordinationServiceTest, Barrier_Cancel_FailsEveryWaiterWithCancelled) {
  Start(3);
  ConnectAll(3);
  Result r0, r1;
  CallBarrier(0, "b", 0, &r0);
  CallBarrier(1, "b", 0, &r1);
  ASSERT_TRUE(service_->CancelBarrier(1, Inc(1), "b", 0).ok());
  EXPECT_EQ(r0.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(r0.message(), HasSubstr("cancelled by rank 1"));
  EXPECT_EQ(service_->CancelBarrier(1, Inc(1), "b", 0).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinationServiceTest, Barrier_ParticipantFails_FailsAtOnceNamingRank) {
  Start(3);
  ConnectAll(3);
  Result r0;
  CallBarrier(0, "b", 0, &r0);
  ASSERT_TRUE(service_->ReportError(2, Inc(2), FailureCause::kProcessExited, "SIGKILL").ok());
  EXPECT_EQ(r0.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(r0.message(), HasSubstr("rank 2"));
  EXPECT_THAT(r0.message(), HasSubstr("SIGKILL"));
}

TEST_F(CoordinationServiceTest, Barrier_ManyTasks_AllReleasedTogether) {
  constexpr int kTasks = 4096;
  Start(kTasks);
  ConnectAll(kTasks);
  std::vector<Result> results(kTasks);
  for (int t = 0; t < kTasks; ++t) CallBarrier(t, "big", 0, &results[t]);
  for (int t = 0; t < kTasks; ++t) ASSERT_TRUE(results[t].ok()) << t;
}

// --- GetAliveTasks (XLA's) ------------------------------------------------------------------

struct AliveResult {
  std::optional<absl::StatusOr<CoordinationService::AliveTasks>> alive;
  CoordinationService::AliveTasksCallback Callback() {
    return [this](absl::StatusOr<CoordinationService::AliveTasks> a) {
      ASSERT_FALSE(alive.has_value()) << "callback invoked twice";
      alive = std::move(a);
    };
  }
  std::vector<TaskId> Tasks() const {
    std::vector<TaskId> out;
    if (alive && alive->ok()) {
      for (const auto& [task, incarnation] : **alive) out.push_back(task);
    }
    return out;
  }
};

TEST_F(CoordinationServiceTest, GetAliveTasks_AnsweredOnceEveryAliveTaskNamedCalled) {
  Start(4);
  ConnectAll(4);
  AliveResult a0, a3;
  EXPECT_NE(service_->GetAliveTasks(0, {3, 0}, a0.Callback()), 0u);
  EXPECT_FALSE(a0.alive.has_value()) << "waits for task 3";
  service_->GetAliveTasks(3, {0, 3}, a3.Callback());
  ASSERT_TRUE(a0.alive.has_value() && a3.alive.has_value());
  EXPECT_EQ(a0.Tasks(), (std::vector<TaskId>{0, 3}));
  EXPECT_EQ(a3.Tasks(), (std::vector<TaskId>{0, 3}));
  EXPECT_EQ((**a0.alive)[1].second, Inc(3));
}

TEST_F(CoordinationServiceTest, GetAliveTasks_ATaskThatFailsIsNoLongerWaitedFor) {
  Start(3);
  ConnectAll(3);
  AliveResult a0;
  service_->GetAliveTasks(0, {0, 1, 2}, a0.Callback());
  AliveResult a1;
  service_->GetAliveTasks(1, {0, 1, 2}, a1.Callback());
  EXPECT_FALSE(a0.alive.has_value());
  ASSERT_TRUE(service_->ReportError(2, Inc(2), FailureCause::kProcessExited, "gone").ok());
  ASSERT_TRUE(a0.alive.has_value());
  EXPECT_EQ(a0.Tasks(), (std::vector<TaskId>{0, 1}));
  EXPECT_EQ(a1.Tasks(), (std::vector<TaskId>{0, 1}));
}

TEST_F(CoordinationServiceTest,
       GetAliveTasks_CallerNotNamed_InvalidArgument_TasksNotInTheJobNeverAlive) {
  Start(3);
  ConnectAll(3);
  AliveResult outside, unknown;
  EXPECT_EQ(service_->GetAliveTasks(2, {0, 1}, outside.Callback()), 0u);
  ASSERT_TRUE(outside.alive.has_value());
  EXPECT_EQ(outside.alive->status().code(), absl::StatusCode::kInvalidArgument);
  service_->GetAliveTasks(0, {0, 7}, unknown.Callback());
  EXPECT_EQ(unknown.Tasks(), (std::vector<TaskId>{0}));
}

TEST_F(CoordinationServiceTest, GetAliveTasks_CallerGone_TheOthersWaitForItsNextCall) {
  Start(2);
  ConnectAll(2);
  AliveResult gone, a1, again;
  OpId op = service_->GetAliveTasks(0, {0, 1}, gone.Callback());
  service_->CancelOp(op);
  ASSERT_TRUE(gone.alive.has_value());
  EXPECT_EQ(gone.alive->status().code(), absl::StatusCode::kCancelled);
  service_->GetAliveTasks(1, {0, 1}, a1.Callback());
  EXPECT_FALSE(a1.alive.has_value()) << "task 0 left the barrier with its call";
  service_->GetAliveTasks(0, {0, 1}, again.Callback());
  EXPECT_EQ(a1.Tasks(), (std::vector<TaskId>{0, 1}));
}

// --- Shutdown -------------------------------------------------------------------------------

// Found by tests/fuzz (agent_protocol): a shutdown whose caller went away keeps its place with no
// callback, and the job's failure (or the service's destructor) called that empty callback:
// std::bad_function_call in a destructor, so std::terminate.
TEST_F(CoordinationServiceTest, Shutdown_CallerGoneThenJobFailsOrServiceStops_NoCrash) {
  Start(2);
  ConnectAll(2);
  Result a;
  OpId op = service_->ShutdownTask(0, Inc(0), a.Callback());
  ASSERT_NE(op, 0u);
  service_->CancelOp(op);
  EXPECT_EQ(a.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(service_->ReportError(1, Inc(1), FailureCause::kReportedError, "boom").ok());
  EXPECT_TRUE(absl::IsAborted(service_->JobStatus()));

  Start(2);
  ConnectAll(2);
  Result b;
  service_->CancelOp(service_->ShutdownTask(0, Inc(0), b.Callback()));
  service_.reset();
  EXPECT_EQ(b.code(), absl::StatusCode::kCancelled);
}

TEST_F(CoordinationServiceTest, Shutdown_WaitsForEveryTask) {
  Start(2);
  ConnectAll(2);
  Result a, b;
  service_->ShutdownTask(0, Inc(0), a.Callback());
  EXPECT_FALSE(a.status.has_value());
  EXPECT_FALSE(service_->AllTasksDone());
  service_->ShutdownTask(1, Inc(1), b.Callback());
  EXPECT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(service_->AllTasksDone());
  EXPECT_EQ(service_->InsertKeyValue(0, Inc(0), "k", "v", false).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinationServiceTest, AllTasksDone_IgnoresTasksThatNeverRegistered) {
  ServiceConfig config;
  config.register_timeout = absl::Seconds(5);
  Start(3, config);
  EXPECT_TRUE(service_->AllTasksDone());  // Nobody registered: nothing to strand.
  Result r0;
  Register(0, &r0);
  EXPECT_FALSE(service_->AllTasksDone());
  clock_.Advance(absl::Seconds(5));
  service_->CheckDeadlines();  // Registration fails; ranks 1 and 2 never came.
  ASSERT_EQ(r0.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(service_->AllTasksDone());  // Rank 0's registration failed too.
}

TEST_F(CoordinationServiceTest, Shutdown_Timeout_NamesStragglers) {
  ServiceConfig config;
  config.shutdown_timeout = absl::Seconds(5);
  config.heartbeat_timeout = absl::Hours(1);
  Start(3, config);
  ConnectAll(3);
  Result a;
  service_->ShutdownTask(0, Inc(0), a.Callback());
  clock_.Advance(absl::Seconds(5));
  service_->CheckDeadlines();
  EXPECT_EQ(a.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(a.message(), HasSubstr("missing rank(s) 1, 2"));
  ExpectBarrierReport(a.status, ErrorKind::kShutdownTimedOut, 0, 1, 3, {1, 2});
}

TEST_F(CoordinationServiceTest, Shutdown_Timeout_TheJobsFailureSaysWhoReachedTheBarrier) {
  ServiceConfig config;
  config.shutdown_timeout = absl::Seconds(5);
  config.heartbeat_timeout = absl::Hours(1);
  Start(3, config);
  ConnectAll(3);
  WatchEvents(2);
  Result a, b;
  service_->ShutdownTask(1, Inc(1), a.Callback());
  service_->ShutdownTask(0, Inc(0), b.Callback());
  clock_.Advance(absl::Seconds(5));
  service_->CheckDeadlines();
  ASSERT_EQ(watched_[0]->size(), 1u);
  const auto& failure = std::get<TaskFailure>((*watched_[0])[0]);
  EXPECT_EQ(failure.cause, FailureCause::kShutdownTimeout);
  ASSERT_TRUE(failure.barrier.has_value());
  EXPECT_EQ(failure.barrier->first_task, 1);
  EXPECT_EQ(failure.barrier->arrived, 2);
  EXPECT_EQ(failure.barrier->missing, (std::vector<TaskId>{2}));
}

// --- Preemption -----------------------------------------------------------------------------

TEST_F(CoordinationServiceTest, Preemption_BroadcastOnceAndReplayedToLateWatchers) {
  Start(2);
  ConnectAll(2);
  WatchEvents(0);
  ASSERT_TRUE(service_->ReportPreemption(1, Inc(1)).ok());
  ASSERT_TRUE(service_->ReportPreemption(0, Inc(0)).ok());
  ASSERT_EQ(watched_[0]->size(), 1u);
  EXPECT_EQ(std::get<PreemptionNotice>((*watched_[0])[0]).task, 1);
  WatchEvents(1);
  ASSERT_EQ(watched_[1]->size(), 1u);
  EXPECT_TRUE(service_->JobStatus().ok());  // A preemption is not a failure.
}

}  // namespace
}  // namespace cohort::coordination
