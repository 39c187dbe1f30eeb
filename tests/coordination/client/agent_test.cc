// The Agent over the service's real handler, in process (InProcessStub), on a FakeClock: every
// timed wait of the agent moves only when the test advances the clock.

#include "coordination/client/agent.h"

#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "coordination/client/await.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/rpc_handler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordination/client/in_process_stub.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;
using testing::InProcessStub;

// Records the job events an agent delivers.
struct Events {
  absl::Mutex mu;
  std::vector<JobEvent> events ABSL_GUARDED_BY(mu);
  absl::Notification first;

  Agent::EventCallback callback() {
    return [this](const JobEvent& e) {
      absl::MutexLock lock(&mu);
      events.push_back(e);
      if (!first.HasBeenNotified()) first.Notify();
    };
  }
  size_t size() {
    absl::MutexLock lock(&mu);
    return events.size();
  }
  TaskFailure failure() {
    absl::MutexLock lock(&mu);
    return std::get<TaskFailure>(events.at(0));
  }
};

class AgentTest : public ::testing::Test {
 protected:
  void StartService(int num_tasks, absl::Duration heartbeat_timeout = absl::Seconds(4)) {
    ServiceConfig config;
    config.num_tasks = num_tasks;
    config.heartbeat_timeout = heartbeat_timeout;
    service_ = std::make_unique<CoordinationService>(config, &clock_);
    handler_ = std::make_unique<CoordinationRpcHandler>(service_.get(), ReplyBudget::Create());
  }

  // An agent for `task`; its stub stays reachable through stubs_[task].
  // Its heartbeat timeout is 4 s by default: it heartbeats every 1 s.
  std::unique_ptr<Agent> MakeAgent(int task, absl::Duration heartbeat_timeout = absl::Seconds(4)) {
    AgentOptions options;
    options.coordinator_address = "coordinator.test:8476";
    options.task = task;
    options.num_tasks = service_->config().num_tasks;
    options.initialization_timeout = absl::Seconds(30);
    options.heartbeat_timeout = heartbeat_timeout;
    auto stub = std::make_unique<InProcessStub>(handler_.get());
    stubs_.resize(std::max<size_t>(stubs_.size(), task + 1));
    stubs_[task] = stub.get();
    return std::make_unique<Agent>(options, std::move(stub), &clock_);
  }

  // Makes an agent for each of the service's tasks and connects them all at once (registration
  // completes when all are there); their events collect in events_.
  void JoinAll() {
    const int n = service_->config().num_tasks;
    for (int t = 0; t < n; ++t) {
      agents_.push_back(MakeAgent(t));
      events_.emplace_back();
    }
    std::vector<std::future<absl::Status>> connected;
    for (int t = 0; t < n; ++t) {
      connected.push_back(std::async(
          std::launch::async, [this, t] { return agents_[t]->Connect(events_[t].callback()); }));
    }
    for (auto& c : connected) ASSERT_TRUE(c.get().ok());
  }

  // Lets the agent's heartbeat thread run `n` rounds: each time it is parked in its wait, the
  // clock moves by `step`. The last round may still be running on return; AwaitWaiters(1)
  // waits for its outcome (while the loop goes on).
  void HeartbeatRounds(int n, absl::Duration step) {
    for (int i = 0; i < n; ++i) {
      clock_.AwaitWaiters(1);
      clock_.Advance(step);
    }
  }

  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinationRpcHandler> handler_;
  std::vector<InProcessStub*> stubs_;
  std::deque<Events> events_;
  std::vector<std::unique_ptr<Agent>> agents_;  // Last: destroyed first.
};

TEST_F(AgentTest, Connect_EveryTaskRegisters_KeyValueAndReusableBarrierWork) {
  StartService(2);
  JoinAll();
  EXPECT_TRUE(agents_[0]->connected());
  EXPECT_EQ(service_->GetSnapshot().tasks[1].state, TaskState::kConnected);

  EXPECT_TRUE(Await<absl::Status>([&](auto done) {
                agents_[0]->InsertKeyValue("addr/0", "10.0.0.1", false, done);
              }).ok());
  absl::StatusOr<std::string> v = Await<absl::StatusOr<std::string>>(
      [&](auto done) { agents_[1]->GetKeyValue("addr/0", absl::Seconds(5), done); });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "10.0.0.1");
  absl::StatusOr<KeyValueEntries> dir = Await<absl::StatusOr<KeyValueEntries>>(
      [&](auto done) { agents_[1]->GetKeyValueDir("addr", done); });
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, (KeyValueEntries{{"addr/0", "10.0.0.1"}}));
  EXPECT_EQ(*Await<absl::StatusOr<int64_t>>(
                [&](auto done) { agents_[0]->IncrementKeyValue("count", 5, done); }),
            5);

  // The same id three times: each call carries the next counter and joins the next instance.
  for (int round = 0; round < 3; ++round) {
    std::promise<absl::Status> first;
    agents_[0]->Barrier("step", absl::Seconds(10), {},
                        [&first](absl::Status s) { first.set_value(s); });
    EXPECT_TRUE(Await<absl::Status>([&](auto done) {
                  agents_[1]->Barrier("step", absl::Seconds(10), {}, done);
                }).ok());
    EXPECT_TRUE(first.get_future().get().ok()) << "round " << round;
  }
  EXPECT_EQ(events_[0].size(), 0u);
}

TEST_F(AgentTest, Barrier_SameIdWhileWaiting_FailedPrecondition) {
  StartService(2);
  JoinAll();
  std::promise<absl::Status> waiting;
  agents_[0]->Barrier("b", absl::Seconds(10), {}, [&](absl::Status s) { waiting.set_value(s); });
  absl::Status again = Await<absl::Status>(
      [&](auto done) { agents_[0]->Barrier("b", absl::Seconds(10), {}, done); });
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("already in progress"));
  EXPECT_TRUE(Await<absl::Status>([&](auto done) { agents_[0]->CancelBarrier("b", done); }).ok());
  EXPECT_EQ(waiting.get_future().get().code(), absl::StatusCode::kCancelled);
}

TEST_F(AgentTest, Connect_ServiceNeverReachable_DeadlineExceededNamingTheAddress) {
  StartService(1);
  std::unique_ptr<Agent> agent = MakeAgent(0);
  stubs_[0]->FailRegistrations(absl::UnavailableError("connection refused"));
  clock_.set_auto_advance(true);  // The backoff waits pass at once, on this thread.
  absl::Time start = clock_.Now();
  absl::Status s = agent->Connect(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("could not reach the coordinator at coordinator.test:8476"));
  EXPECT_THAT(s.message(), HasSubstr("connection refused"));
  EXPECT_THAT(s.message(), HasSubstr("COHORT_COORDINATOR_ADDRESS"));
  // It retried with backoff for (almost) the whole initialization timeout, no longer.
  EXPECT_GT(clock_.Now() - start, absl::Seconds(20));
  EXPECT_LE(clock_.Now() - start, absl::Seconds(30));
}

// Restarting in place, a task of attempt n+1 (a replaced pod's) may reach rank 0's service while
// it still runs n: it is told to wait, and keeps asking, often, through the moment the service is
// replaced (refused connections are that, not a lost service) until attempt n+1's registers it.
TEST_F(AgentTest, Connect_NewerAttemptThanTheService_RetriesThroughItsReplacement) {
  ServiceConfig config;
  config.num_tasks = 1;
  config.restart_attempt = 0;
  service_ = std::make_unique<CoordinationService>(config, &clock_);
  handler_ = std::make_unique<CoordinationRpcHandler>(service_.get(), ReplyBudget::Create());
  config.restart_attempt = 1;
  CoordinationService next(config, &clock_);
  CoordinationRpcHandler next_handler(&next, ReplyBudget::Create());
  AgentOptions options;
  options.coordinator_address = "coordinator.test:8476";
  options.num_tasks = 1;
  options.restart_attempt = 1;
  options.initialization_timeout = absl::Seconds(30);
  auto stub = std::make_unique<InProcessStub>(handler_.get());
  stub->ReplaceService(&next_handler, 3);
  Agent agent(options, std::move(stub), &clock_);
  clock_.set_auto_advance(true);  // The retries' waits pass at once, on this thread.
  const absl::Time start = clock_.Now();
  absl::Status s = agent.Connect(nullptr);
  clock_.set_auto_advance(false);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next.GetSnapshot().tasks[0].state, TaskState::kConnected);
  // One answer "wait", three refusals, then registered: five tries, at most 200 ms apart.
  EXPECT_LE(clock_.Now() - start, absl::Milliseconds(800));
  agent.Cancel();
}

TEST_F(AgentTest, Connect_SizeMismatch_ServiceErrorWithoutRetry) {
  StartService(2);
  AgentOptions options;
  options.num_tasks = 3;
  Agent agent(options, std::make_unique<InProcessStub>(handler_.get()), &clock_);
  absl::Status s = agent.Connect(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("num_processes mismatch"));
}

TEST_F(AgentTest, Cancel_DuringConnect_FailsTheRankAndTheJob) {
  // A registration whose connection closes is a death (docs/faults.md): the others must not
  // wait for the rank until the initialization timeout.
  StartService(2);
  std::unique_ptr<Agent> agent = MakeAgent(0);
  std::future<absl::Status> connect =
      std::async(std::launch::async, [&] { return agent->Connect(nullptr); });
  stubs_[0]->registration_started().WaitForNotification();
  EXPECT_EQ(service_->GetSnapshot().tasks[0].state, TaskState::kConnecting);
  agent->Cancel();
  EXPECT_EQ(connect.get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(service_->GetSnapshot().tasks[0].state, TaskState::kFailed);
  EXPECT_THAT(service_->JobStatus().message(), HasSubstr("closed while it waited"));
}

TEST_F(AgentTest, Heartbeat_SilentServiceTolerated_ThenLostAtTheHeartbeatTimeout) {
  StartService(1, absl::Minutes(10));  // The service itself never times the task out here.
  JoinAll();
  HeartbeatRounds(2, absl::Seconds(1));
  clock_.AwaitWaiters(1);
  EXPECT_EQ(stubs_[0]->heartbeats(), 2);

  // Heartbeats that time out: the service is silent (a frozen or partitioned host), which one
  // dropped packet also looks like, so it is tolerated for a whole heartbeat timeout.
  stubs_[0]->FailHeartbeats(absl::DeadlineExceededError("Deadline Exceeded"));
  HeartbeatRounds(4, absl::Seconds(1));  // 4 s without a success: still tolerated.
  clock_.AwaitWaiters(1);
  EXPECT_EQ(events_[0].size(), 0u);
  clock_.AwaitWaiters(1);
  clock_.Advance(absl::Seconds(1));  // 5 s: past the heartbeat timeout.
  events_[0].first.WaitForNotification();
  TaskFailure f = events_[0].failure();
  EXPECT_EQ(f.cause, FailureCause::kServiceUnreachable);
  EXPECT_THAT(f.message, HasSubstr("no heartbeat succeeded for 4s"));
  EXPECT_THAT(f.message, HasSubstr("Deadline Exceeded"));
  // The heartbeat loop ended: nothing waits on the clock any more, and no second event comes.
  agents_[0]->Cancel();
  EXPECT_EQ(events_[0].size(), 1u);
}

TEST_F(AgentTest, Heartbeat_ConnectionRefused_ServiceLostAtOnce) {
  // Heartbeats do not wait for the channel, so Unavailable means refused or reset: the
  // service's process is gone, with the job's state. No heartbeat timeout is waited for.
  StartService(1, absl::Minutes(10));
  JoinAll();
  stubs_[0]->FailHeartbeats(absl::UnavailableError("Connection refused"));
  HeartbeatRounds(1, absl::Seconds(1));
  events_[0].first.WaitForNotification();
  TaskFailure f = events_[0].failure();
  EXPECT_EQ(f.cause, FailureCause::kServiceUnreachable);
  EXPECT_THAT(f.message, HasSubstr("refused or reset"));
  EXPECT_THAT(f.message, HasSubstr("Connection refused"));
  // Later calls fail at once, naming the loss, instead of waiting for a channel.
  absl::Status later =
      Await<absl::Status>([&](auto done) { agents_[0]->InsertKeyValue("k", "v", false, done); });
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(later.message(), HasSubstr("lost the coordination service"));
}

TEST_F(AgentTest, Heartbeat_ServiceRestarted_ReportsTheJobStateLost) {
  StartService(1);
  JoinAll();
  stubs_[0]->ReportServiceIncarnation(12345);
  clock_.AwaitWaiters(1);
  clock_.Advance(absl::Seconds(1));
  events_[0].first.WaitForNotification();
  EXPECT_EQ(events_[0].failure().cause, FailureCause::kServiceUnreachable);
  EXPECT_THAT(events_[0].failure().message, HasSubstr("restarted"));
}

TEST_F(AgentTest, ServiceLost_WaitingCallsFailAtOnceWithUnavailable) {
  StartService(1, absl::Minutes(10));
  JoinAll();
  std::promise<absl::StatusOr<std::string>> get;
  agents_[0]->GetKeyValue("never-set", absl::Minutes(10),
                          [&](absl::StatusOr<std::string> v) { get.set_value(std::move(v)); });
  stubs_[0]->FailHeartbeats(absl::UnavailableError("connection refused"));
  HeartbeatRounds(1, absl::Seconds(1));
  absl::StatusOr<std::string> v = get.get_future().get();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("lost the coordination service"));
}

TEST_F(AgentTest, JobFailure_DeliveredOnceWithTheFailedRank) {
  StartService(2);
  JoinAll();
  EXPECT_TRUE(Await<absl::Status>([&](auto done) {
                agents_[1]->ReportError(FailureCause::kReportedError, "bad batch", done);
              }).ok());
  events_[0].first.WaitForNotification();
  TaskFailure f = events_[0].failure();
  EXPECT_EQ(f.task, 1);
  EXPECT_EQ(f.cause, FailureCause::kReportedError);
  EXPECT_THAT(f.message, HasSubstr("bad batch"));
  EXPECT_TRUE(agents_[0]->job_failed());
}

TEST_F(AgentTest, Destructor_WaitsForEveryCallInFlightEvenPastAnyTimeout) {
  StartService(1);
  JoinAll();
  InProcessStub* stub = stubs_[0];
  stub->HoldShutdowns();  // A transport that is slow to complete, even once cancelled.
  std::atomic<int> callbacks{0};
  absl::Notification answered;
  absl::Status answer;
  agents_[0]->Shutdown([&](absl::Status s) {
    answer = s;
    ++callbacks;
    answered.Notify();
  });
  ASSERT_EQ(stub->held(), 1);

  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    agents_[0].reset();
    destroyed = true;
  });
  // The program hears at once that its call is over...
  answered.WaitForNotification();
  EXPECT_EQ(answer.code(), absl::StatusCode::kCancelled);
  // ...but the agent, whose completion is still to come, waits for it however long it takes.
  stub->cancelled().WaitForNotification();
  clock_.Advance(absl::Hours(1));
  EXPECT_FALSE(destroyed.load());
  stub->ReleaseHeld(absl::OkStatus());  // The late completion finds the agent alive.
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
  EXPECT_EQ(callbacks.load(), 1) << "the program's callback runs exactly once";
}

}  // namespace
}  // namespace cohort::coordination
