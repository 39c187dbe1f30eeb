// The sidecar's Agent service for one rank, between a trainer on its Unix socket and a real
// coordination service on a loopback port: what it tells the job when its trainer goes.

#include "sidecar/agent/agent_rpc_service.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cohort/agent/v1/agent.grpc.pb.h"
#include "coordination/server/coordination_server.h"
#include "gtest/gtest.h"

namespace cohort::sidecar {
namespace {

namespace agentpb = ::cohort::agent::v1;
using coordination::CoordinationService;
using coordination::TaskState;

// A bound on every wait, so that a broken service fails the test instead of hanging it.
constexpr absl::Duration kWait = absl::Seconds(20);

class AgentRpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/agent-rpc-service-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    if (agent_server_) agent_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    agent_server_.reset();
    service_.reset();
    coordinator_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A coordination service of `num_tasks` ranks, restart attempt `attempt`, and the sidecar's
  // Agent service of rank 1 in front of it.
  void Start(int num_tasks, int attempt) {
    StartService(num_tasks, attempt, "127.0.0.1:0");
    ASSERT_NE(coordinator_, nullptr);
    coordination::AgentOptions options;
    options.coordinator_address = absl::StrCat("127.0.0.1:", coordinator_->port());
    options.task = 1;
    options.num_tasks = num_tasks;
    options.initialization_timeout = absl::Minutes(1);
    options.restart_attempt = attempt;
    service_ = std::make_unique<AgentRpcService>(options, /*metrics=*/nullptr);
    socket_ = dir_ + "/agent.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    agent_server_ = builder.BuildAndStart();
    ASSERT_NE(agent_server_, nullptr);
  }

  void StartService(int num_tasks, int attempt, const std::string& address) {
    coordination::ServerOptions server;
    server.listen_address = address;
    server.service.num_tasks = num_tasks;
    server.service.restart_attempt = attempt;
    absl::StatusOr<std::unique_ptr<coordination::CoordinationServer>> started =
        coordination::CoordinationServer::Start(server);
    // As rank 0's sidecar restarting its service: the port is free a moment after the old one went.
    for (int tries = 1; !started.ok() && tries < 40; ++tries) {
      absl::SleepFor(absl::Milliseconds(50));
      started = coordination::CoordinationServer::Start(server);
    }
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = *std::move(started);
  }

  // What rank 0's sidecar does when the hub orders attempt `attempt`: the old service goes, a new
  // one of that attempt serves the same port.
  void ReplaceService(int attempt) {
    const int num_tasks = coordinator_->service().config().num_tasks;
    const std::string address = absl::StrCat("127.0.0.1:", coordinator_->port());
    coordinator_.reset();
    StartService(num_tasks, attempt, address);
  }

  CoordinationService& coordination() { return coordinator_->service(); }

  // Waits (bounded) until rank `task`'s state in the service is `state`.
  bool AwaitTaskState(int task, TaskState state) {
    const absl::Time deadline = absl::Now() + kWait;
    int64_t version = -1;
    while (absl::Now() < deadline) {
      absl::Notification changed;
      absl::StatusOr<CoordinationService::TaskStates> states;
      const coordination::OpId op = coordination().WatchTaskStates(
          version, [&](absl::StatusOr<CoordinationService::TaskStates> s) {
            states = std::move(s);
            changed.Notify();
          });
      if (!changed.WaitForNotificationWithTimeout(deadline - absl::Now())) {
        coordination().CancelOp(op);
        changed.WaitForNotification();
        return false;
      }
      if (!states.ok()) return false;
      if (states->tasks.at(task).state == state) return true;
      version = states->version;
    }
    return false;
  }

  // A trainer process of rank 1 attached to the Agent service: its attach stream is read to the
  // end on a thread of its own, whose join gives the stream's final status.
  struct Trainer {
    std::unique_ptr<agentpb::Agent::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<agentpb::AgentEvent>> reader;
    grpc::Status ended;
    std::thread thread;
    absl::Mutex mu;
    std::vector<agentpb::AgentEvent> events ABSL_GUARDED_BY(mu);  // Read so far.
  };
  std::unique_ptr<Trainer> Attach(int attempt) {
    auto t = std::make_unique<Trainer>();
    t->stub = agentpb::Agent::NewStub(
        grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
    agentpb::AttachRequest req;
    req.set_process_id(1);
    req.set_num_processes(coordinator_->service().config().num_tasks);
    req.set_restart_attempt(attempt);
    req.set_pid(getpid());
    t->reader = t->stub->Attach(&t->ctx, req);
    Trainer* raw = t.get();
    t->thread = std::thread([raw] {
      agentpb::AgentEvent event;
      while (raw->reader->Read(&event)) {
        absl::MutexLock lock(&raw->mu);
        raw->events.push_back(event);
      }
      raw->ended = raw->reader->Finish();
    });
    return t;
  }

  std::string dir_;
  std::string socket_;
  std::unique_ptr<coordination::CoordinationServer> coordinator_;
  std::unique_ptr<AgentRpcService> service_;
  std::unique_ptr<grpc::Server> agent_server_;
};

// Restarting in place, a trainer of attempt 0 still waiting in registration when attempt 1 begins
// is let go without a word to the job: by then the service at the same address is attempt 1's,
// where its going would read as a death of attempt 1's rank 1 (one more, counted, restart). The
// same trainer detached without Retire (the sidecar stopping) is reported.
TEST_F(AgentRpcServiceTest, Retire_TrainerWaitingInRegistration_ItsGoingIsNotReported) {
  for (const bool retire : {true, false}) {
    SCOPED_TRACE(retire ? "retired" : "detached");
    Start(/*num_tasks=*/2, /*attempt=*/0);
    std::unique_ptr<Trainer> trainer = Attach(/*attempt=*/0);
    // Rank 1 registered and waits for rank 0, which never comes.
    ASSERT_TRUE(AwaitTaskState(1, TaskState::kConnecting));

    ReplaceService(/*attempt=*/1);
    const absl::Status why =
        absl::AbortedError("restart attempt 1 began: this process belongs to an older one");
    if (retire) {
      service_->Retire(why);
    } else {
      service_->DetachTrainer(why);
    }
    trainer->thread.join();
    EXPECT_EQ(trainer->ended.error_code(), grpc::StatusCode::ABORTED)
        << trainer->ended.error_message();
    // The trainer's going is settled: reported (and answered) or let go.
    EXPECT_EQ(service_->WaitForTrainer(absl::Now() + kWait), TrainerOutcome::kFailed);
    const CoordinationService::Snapshot snapshot = coordination().GetSnapshot();
    if (retire) {
      EXPECT_NE(snapshot.tasks.at(1).state, TaskState::kFailed);
      EXPECT_TRUE(coordination().JobStatus().ok()) << coordination().JobStatus();
    } else {
      EXPECT_EQ(snapshot.tasks.at(1).state, TaskState::kFailed);
      EXPECT_FALSE(coordination().JobStatus().ok());
    }
    TearDown();
    SetUp();
  }
}

// A trainer that dies while its rank waits in registration, after the coordination service went
// (rank 0's sidecar killed): its going is reported with the patience of a call that waits for the
// service, but no process is attached any more, so the sidecar's SIGTERM (the pod deleted) does not
// wait for one until the grace period ends (a pod deleted thus held on for 30 s).
TEST_F(AgentRpcServiceTest,
       TrainerGoneWhileTheServiceIsUnreachable_NotAttachedAtOnce_ItsReportStillPending) {
  Start(/*num_tasks=*/2, /*attempt=*/0);
  std::unique_ptr<Trainer> trainer = Attach(/*attempt=*/0);
  ASSERT_TRUE(AwaitTaskState(1, TaskState::kConnecting));
  EXPECT_TRUE(service_->trainer_attached());

  coordinator_.reset();      // The service is gone; nothing listens on its port.
  trainer->ctx.TryCancel();  // The trainer dies.
  trainer->thread.join();
  const absl::Time deadline = absl::Now() + kWait;
  while (service_->trainer_attached() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(service_->trainer_attached());
  EXPECT_TRUE(service_->trainer_ever_attached());
  // Its end is not settled yet: the report waits for a service that is not there.
  EXPECT_EQ(service_->WaitForTrainer(absl::Now()), TrainerOutcome::kRunning);
  service_->StopWaiting();
}

// The hang detector's order for evidence goes down the trainer's attach stream, but never before
// the "connected" event the trainer waits for first.
TEST_F(AgentRpcServiceTest, RequestDump_OnlyAfterConnected_ThenDownTheAttachStream) {
  Start(/*num_tasks=*/2, /*attempt=*/0);
  EXPECT_FALSE(service_->RequestDump(7, dir_ + "/dumps")) << "no trainer attached";
  std::unique_ptr<Trainer> trainer = Attach(/*attempt=*/0);
  ASSERT_TRUE(AwaitTaskState(1, TaskState::kConnecting));
  EXPECT_FALSE(service_->RequestDump(7, dir_ + "/dumps"))
      << "the trainer still waits for 'connected'";

  // Rank 0 joins: every rank registered.
  coordination::AgentOptions rank0;
  rank0.coordinator_address = absl::StrCat("127.0.0.1:", coordinator_->port());
  rank0.task = 0;
  rank0.num_tasks = 2;
  rank0.restart_attempt = 0;
  coordination::Agent agent0(rank0);
  ASSERT_TRUE(agent0.Connect([](const coordination::JobEvent&) {}).ok());
  auto connected_heard = [&] {
    absl::MutexLock lock(&trainer->mu);
    return !trainer->events.empty();
  };
  const absl::Time deadline = absl::Now() + kWait;
  while (!connected_heard() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(connected_heard());
  // The flag is set just after the push: the first tries may still be refused.
  while (!service_->RequestDump(7, dir_ + "/dumps") && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));

  auto events = [&] {
    absl::MutexLock lock(&trainer->mu);
    return trainer->events;
  };
  while (events().size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  std::vector<agentpb::AgentEvent> got = events();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].has_connected());
  ASSERT_TRUE(got[1].has_dump());
  EXPECT_EQ(got[1].dump().id(), 7u);
  EXPECT_EQ(got[1].dump().directory(), dir_ + "/dumps");

  service_->DetachTrainer(absl::CancelledError("the test ends"));
  trainer->thread.join();
  const absl::Time gone_by = absl::Now() + kWait;
  while (service_->RequestDump(8, dir_ + "/dumps") && absl::Now() < gone_by)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_FALSE(service_->RequestDump(8, dir_ + "/dumps")) << "the trainer is gone";
}

}  // namespace
}  // namespace cohort::sidecar
