// The JAX port (XLA's coordination protocol, both generations) over real gRPC on loopback, with
// stubs generated from the same .proto files a jaxlib client's wire format follows.

#include "coordination/server/jax_compat_service.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/grpc_util.h"
#include "coordination/server/coordination_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "xla_compat/error_payloads.pb.h"
#include "xla_compat/tsl_coordination.grpc.pb.h"
#include "xla_compat/xla_coordination.grpc.pb.h"

namespace cohort::coordination {
namespace {

namespace xpb = ::xla::coordination;
namespace tpb = ::tensorflow;
using ::testing::HasSubstr;

constexpr char kCoordinationErrorUrl[] = "type.googleapis.com/tensorflow.CoordinationServiceError";

// The payloads an error carries, as XLA's client reads them; empty when it carries none.
std::map<std::string, std::string> Payloads(const grpc::Status& status) {
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  if (status.error_details().empty() || !container.ParseFromString(status.error_details()))
    return {};
  return {container.payloads().begin(), container.payloads().end()};
}

class JaxPortTest : public ::testing::Test {
 protected:
  void Start(int tasks, absl::Duration jax_heartbeat_timeout = kJaxHeartbeatTimeout) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.service.num_tasks = tasks;
    options.service.heartbeat_timeout = absl::Seconds(10);
    JaxPortOptions jax;
    jax.heartbeat_timeout = jax_heartbeat_timeout;
    options.attached_port = JaxPortStarter("127.0.0.1:0", std::move(jax));
    options.token = "the-token";  // Cohort's port only: JAX sends none.
    absl::StatusOr<std::unique_ptr<CoordinationServer>> server =
        CoordinationServer::Start(options, &clock_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_NE(server_->attached_port(), nullptr);
    jax_port_ = server_->attached_port()->port();
    ASSERT_NE(jax_port_, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", jax_port_),
                                   grpc::InsecureChannelCredentials());
    xla_ = xpb::CoordinationService::NewStub(channel_);
    tsl_ = tpb::CoordinationService::NewStub(channel_);
  }

  // Registers every task through the xla protocol, concurrently (registration is a barrier).
  void RegisterAllXla(int tasks) {
    std::vector<std::future<grpc::Status>> done;
    for (int t = 0; t < tasks; ++t) {
      done.push_back(std::async(std::launch::async, [this, t] {
        grpc::ClientContext ctx;
        xpb::RegisterTaskRequest req;
        req.set_source_task_id(t);
        req.set_incarnation(Incarnation(t));
        xpb::RegisterTaskResponse resp;
        grpc::Status s = xla_->RegisterTask(&ctx, req, &resp);
        EXPECT_EQ(resp.service_incarnation(), server_->service().service_incarnation());
        return s;
      }));
    }
    for (auto& f : done) ASSERT_TRUE(f.get().ok());
  }
  static uint64_t Incarnation(int task) { return 1000 + task; }
  static xpb::Incarnations Caller(int task) {
    xpb::Incarnations inc;
    inc.set_task_incarnation(Incarnation(task));  // jaxlib leaves task_id 0.
    return inc;
  }

  // An open PollForError call of `task`, answered (with its status) when the job fails.
  struct Poll {
    grpc::ClientContext ctx;
    xpb::PollForErrorResponse resp;
    grpc::Status status;
    absl::Notification done;
  };
  std::unique_ptr<Poll> OpenPoll(int task) {
    auto poll = std::make_unique<Poll>();
    xpb::PollForErrorRequest req;
    *req.mutable_incarnations() = Caller(task);
    req.set_source_task_id(task);
    Poll* p = poll.get();
    xla_->async()->PollForError(&p->ctx, &req, &p->resp, [p](grpc::Status s) {
      p->status = std::move(s);
      p->done.Notify();
    });
    return poll;
  }
  // Waits (real time, bounded) until `n` event streams (here, polls) reached the service.
  void AwaitWatchers(size_t n) {
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (server_->service().GetSnapshot().event_watchers < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(server_->service().GetSnapshot().event_watchers, n);
  }

  FakeClock clock_;
  std::unique_ptr<CoordinationServer> server_;
  int jax_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<xpb::CoordinationService::Stub> xla_;
  std::unique_ptr<tpb::CoordinationService::Stub> tsl_;
};

TEST_F(JaxPortTest, XlaProtocol_KeyValueCallsIdentifiedByIncarnation) {
  Start(2);
  RegisterAllXla(2);
  {
    grpc::ClientContext ctx;
    xpb::InsertKeyValueRequest req;
    *req.mutable_incarnations() = Caller(1);
    req.mutable_kv()->set_key("cpu:local_topology/cpu/1");
    req.mutable_kv()->set_value(std::string("\x00\x01topology", 10));
    xpb::InsertKeyValueResponse resp;
    ASSERT_TRUE(xla_->InsertKeyValue(&ctx, req, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    xpb::GetKeyValueRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_key("cpu:local_topology/cpu/1");
    xpb::GetKeyValueResponse resp;
    ASSERT_TRUE(xla_->GetKeyValue(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.kv().value(), std::string("\x00\x01topology", 10));
  }
  {
    grpc::ClientContext ctx;
    xpb::IncrementKeyValueRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_key("counter");
    req.set_increment(41);
    xpb::IncrementKeyValueResponse resp;
    ASSERT_TRUE(xla_->IncrementKeyValue(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.kv().value(), "41");  // Decimal text, as XLA's client parses it.
  }
  {
    grpc::ClientContext ctx;
    xpb::GetKeyValueDirRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_directory_key("cpu:local_topology/");
    xpb::GetKeyValueDirResponse resp;
    ASSERT_TRUE(xla_->GetKeyValueDir(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.kv_size(), 1);
    EXPECT_EQ(resp.kv(0).key(), "cpu:local_topology/cpu/1");
  }
  CoordinationService::Snapshot snap = server_->service().GetSnapshot();
  EXPECT_EQ(snap.tasks[0].protocol, kXlaCoordinationProtocol);
  EXPECT_EQ(snap.tasks[1].state, TaskState::kConnected);
}

TEST_F(JaxPortTest, UnknownMethod_AnsweredAtOnceNamingTheSupportedVersionsWithThePayload) {
  Start(1);
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(cohort::ToChronoDeadline(absl::Seconds(10)));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&ctx, "/xla.coordination.CoordinationService/RegisterTaskV2",
                    grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("/xla.coordination.CoordinationService/RegisterTaskV2"));
  EXPECT_THAT(status.error_message(), HasSubstr(std::string(kSupportedJaxlibVersions)));
  // The payload is what stops XLA's client from retrying its registration until its timeout.
  EXPECT_EQ(Payloads(status).count(kCoordinationErrorUrl), 1u);
}

TEST_F(JaxPortTest, BadTaskId_InvalidArgumentInXlasWordsWithThePayload_AndTheServiceKeepsServing) {
  Start(2);
  {
    grpc::ClientContext ctx;
    xpb::RegisterTaskRequest req;
    req.set_source_task_id(7);
    req.set_incarnation(5);
    xpb::RegisterTaskResponse resp;
    grpc::Status s = xla_->RegisterTask(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "Unexpected task registered with task=7");
    EXPECT_EQ(Payloads(s).count(kCoordinationErrorUrl), 1u);
  }
  {
    grpc::ClientContext ctx;
    xpb::BarrierRequest req;
    req.set_barrier_id("");
    req.set_source_task_id(0);
    req.set_barrier_timeout_in_ms(1000);
    xpb::BarrierResponse resp;
    grpc::Status s = xla_->Barrier(&ctx, req, &resp);
    EXPECT_NE(s.error_code(), grpc::StatusCode::OK);
    EXPECT_EQ(Payloads(s).count(kCoordinationErrorUrl), 1u);
  }
  RegisterAllXla(2);  // Still serving.
  EXPECT_FALSE(server_->service().GetSnapshot().job_failed);
}

TEST_F(JaxPortTest, PollBrokenBeforeShutdown_TheOtherPollIsAnsweredNamingTheDeadTask) {
  Start(2);
  RegisterAllXla(2);
  std::unique_ptr<Poll> poll0 = OpenPoll(0);
  std::unique_ptr<Poll> poll1 = OpenPoll(1);
  AwaitWatchers(2);
  // Task 1's process dies: its connection (here, its call) goes away before ShutdownTask.
  poll1->ctx.TryCancel();
  ASSERT_TRUE(poll0->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(poll0->status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(poll0->status.error_message(), HasSubstr("rank 1 (JAX process at 127.0.0.1:"));
  EXPECT_THAT(poll0->status.error_message(), HasSubstr("its JAX process died or was killed"));
  std::map<std::string, std::string> payloads = Payloads(poll0->status);
  ASSERT_EQ(payloads.count(kCoordinationErrorUrl), 1u);
  xpb::CoordinationServiceError error;
  ASSERT_TRUE(error.ParseFromString(payloads[kCoordinationErrorUrl]));
  EXPECT_EQ(error.source_task_id(), 1);
}

// WatchTasks, as XLA's client calls it (a long poll from the version it has): at once with
// every task connected after registration; then it waits, and a task that dies answers it with
// that task in error (code, message, payload naming it) and a new version. WatchJobState, the
// earlier generation, answers from the same states.
TEST_F(JaxPortTest, WatchTasks_LongPollAnsweredWhenATaskFails) {
  Start(2);
  RegisterAllXla(2);
  xpb::WatchTasksResponse first;
  {
    grpc::ClientContext ctx;
    xpb::WatchTasksRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_version_number(-1);
    ASSERT_TRUE(xla_->WatchTasks(&ctx, req, &first).ok());
  }
  ASSERT_EQ(first.task_state_size(), 2);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(first.task_state(t).task_id(), t);
    EXPECT_EQ(first.task_state(t).state(), xpb::TASK_STATE_CONNECTED);
    EXPECT_EQ(first.task_state(t).incarnation(), Incarnation(t));
  }

  // From the version it has: no answer until something changes.
  struct Watch {
    grpc::ClientContext ctx;
    xpb::WatchTasksResponse resp;
    grpc::Status status;
    absl::Notification done;
  } watch;
  xpb::WatchTasksRequest req;
  *req.mutable_incarnations() = Caller(0);
  req.set_version_number(first.version_number());
  xla_->async()->WatchTasks(&watch.ctx, &req, &watch.resp, [&](grpc::Status s) {
    watch.status = std::move(s);
    watch.done.Notify();
  });
  EXPECT_FALSE(watch.done.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "answered with nothing new";
  // Task 1's process dies (its PollForError call goes away before ShutdownTask).
  std::unique_ptr<Poll> poll1 = OpenPoll(1);
  AwaitWatchers(1);
  poll1->ctx.TryCancel();
  ASSERT_TRUE(watch.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(watch.status.ok()) << watch.status.error_message();
  EXPECT_GT(watch.resp.version_number(), first.version_number());
  ASSERT_EQ(watch.resp.task_state_size(), 2);
  EXPECT_EQ(watch.resp.task_state(0).state(), xpb::TASK_STATE_CONNECTED);
  const xpb::TaskInfo& dead = watch.resp.task_state(1);
  EXPECT_EQ(dead.state(), xpb::TASK_STATE_ERROR);
  EXPECT_EQ(dead.error_code(), static_cast<int>(grpc::StatusCode::ABORTED));
  EXPECT_THAT(dead.error_message(), HasSubstr("rank 1 (JAX process at 127.0.0.1:"));
  EXPECT_EQ(dead.error_payload().source_task_id(), 1);

  grpc::ClientContext tsl_ctx;
  tpb::WatchJobStateRequest tsl_req;
  tsl_req.set_job_name("jax_worker");
  tsl_req.set_version_number(-1);
  tpb::WatchJobStateResponse tsl_resp;
  ASSERT_TRUE(tsl_->WatchJobState(&tsl_ctx, tsl_req, &tsl_resp).ok());
  EXPECT_EQ(tsl_resp.version_number(), watch.resp.version_number());
  ASSERT_EQ(tsl_resp.task_state_size(), 2);
  EXPECT_EQ(tsl_resp.task_state(1).state(), tpb::TASKSTATE_ERROR);
  EXPECT_EQ(tsl_resp.task_state(1).task().task_id(), 1);
}

// A waiting WatchTasks whose caller goes away leaves nothing behind in the service.
TEST_F(JaxPortTest, WatchTasks_CallerGone_TheWaitEnds) {
  Start(1);
  RegisterAllXla(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(ToChronoDeadline(absl::Milliseconds(200)));
  xpb::WatchTasksRequest req;
  *req.mutable_incarnations() = Caller(0);
  xpb::WatchTasksResponse resp;
  // The current version, read from an answer at once.
  {
    grpc::ClientContext now;
    xpb::WatchTasksRequest any;
    any.set_version_number(-1);
    ASSERT_TRUE(xla_->WatchTasks(&now, any, &resp).ok());
  }
  req.set_version_number(resp.version_number());
  grpc::Status s = xla_->WatchTasks(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(server_->service().JobStatus().ok()) << "a watcher going away is not a failure";
}

// The JAX port's directory reads are built under the reply budget the service's other
// transports share: with it used up, GetKeyValueDir waits its turn, then completes and releases
// its bytes.
TEST_F(JaxPortTest, GetKeyValueDir_WaitsForTheSharedReplyBudget) {
  Start(1);
  RegisterAllXla(1);
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    xpb::InsertKeyValueRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.mutable_kv()->set_key(absl::StrCat("dir/", i));
    req.mutable_kv()->set_value("value");
    xpb::InsertKeyValueResponse resp;
    ASSERT_TRUE(xla_->InsertKeyValue(&ctx, req, &resp).ok());
  }
  ReplyBudget& budget = server_->reply_budget();
  ReplyBudget::Charge full = budget.Take(ReplyBudget::kDefaultCapBytes);
  std::future<std::pair<grpc::Status, int>> read = std::async(std::launch::async, [this] {
    grpc::ClientContext ctx;
    xpb::GetKeyValueDirRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_directory_key("dir");
    xpb::GetKeyValueDirResponse resp;
    grpc::Status s = xla_->GetKeyValueDir(&ctx, req, &resp);
    return std::pair(s, resp.kv_size());
  });
  ASSERT_TRUE(budget.AwaitWaiting(1, absl::Seconds(30)))
      << "the read was not queued behind the full budget";
  EXPECT_EQ(read.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  full.Reset();
  auto [status, keys] = read.get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(keys, 3);
  EXPECT_TRUE(budget.AwaitIdle(absl::Seconds(30))) << "the reply's bytes were never released";
}

TEST_F(JaxPortTest, ShutdownThenPollCancelled_NoFailure) {
  Start(1);
  RegisterAllXla(1);
  std::unique_ptr<Poll> poll = OpenPoll(0);
  AwaitWatchers(1);
  {
    grpc::ClientContext ctx;
    xpb::ShutdownTaskRequest req;
    *req.mutable_incarnations() = Caller(0);
    req.set_source_task_id(0);
    xpb::ShutdownTaskResponse resp;
    ASSERT_TRUE(xla_->ShutdownTask(&ctx, req, &resp).ok());
  }
  poll->ctx.TryCancel();  // What XLA's agent does after its shutdown.
  ASSERT_TRUE(poll->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(poll->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(server_->service().GetSnapshot().job_failed);
  EXPECT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kShutDown);
}

// JAX heartbeats every 50 s: its tasks get the JAX port's timeout, not the service's 10 s.
TEST_F(JaxPortTest, JaxTasks_GetTheLongHeartbeatTimeout) {
  Start(1, absl::Seconds(100));
  RegisterAllXla(1);
  clock_.Advance(absl::Seconds(60));
  server_->service().CheckDeadlines();
  EXPECT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kConnected);
  {
    grpc::ClientContext ctx;
    xpb::HeartbeatRequest req;
    req.set_source_task_id(0);
    req.set_incarnation(Incarnation(0));
    xpb::HeartbeatResponse resp;
    ASSERT_TRUE(xla_->Heartbeat(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.service_incarnation(), server_->service().service_incarnation());
  }
  clock_.Advance(absl::Seconds(99));
  server_->service().CheckDeadlines();
  EXPECT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kConnected);
  clock_.Advance(absl::Seconds(2));
  server_->service().CheckDeadlines();
  EXPECT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kFailed);
  EXPECT_THAT(server_->service().JobStatus().message(), HasSubstr("no heartbeat for over 1m40s"));
}

TEST_F(JaxPortTest, PreemptionNoticeFromTheSidecar_SetsJaxsNoticeKey) {
  Start(2);
  RegisterAllXla(2);
  std::unique_ptr<Poll> poll0 = OpenPoll(0);
  // A watch replays past events, so the order of the poll's arrival and the notice is free.
  ASSERT_TRUE(server_->service().ReportPreemption(1, kObserverIncarnation).ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(cohort::ToChronoDeadline(absl::Seconds(10)));
  xpb::GetKeyValueRequest req;
  *req.mutable_incarnations() = Caller(0);
  req.set_key(std::string(kJaxPreemptionNoticeKey));
  xpb::GetKeyValueResponse resp;
  ASSERT_TRUE(xla_->GetKeyValue(&ctx, req, &resp).ok());  // Blocks until the key is set.
  absl::Time when;
  std::string err;
  EXPECT_TRUE(absl::ParseTime(absl::RFC3339_full, resp.kv().value(), &when, &err))
      << resp.kv().value();
  EXPECT_FALSE(server_->service().GetSnapshot().job_failed);
}

TEST_F(JaxPortTest, JaxSetsTheNoticeKey_TheJobRecordsAPreemption) {
  Start(2);
  RegisterAllXla(2);
  grpc::ClientContext ctx;
  xpb::InsertKeyValueRequest req;
  *req.mutable_incarnations() = Caller(1);
  req.mutable_kv()->set_key(std::string(kJaxPreemptionNoticeKey));
  req.mutable_kv()->set_value("2026-11-23T10:00:00Z");
  xpb::InsertKeyValueResponse resp;
  ASSERT_TRUE(xla_->InsertKeyValue(&ctx, req, &resp).ok());
  EXPECT_EQ(server_->service().GetSnapshot().preemption_notices, 1);
}

TEST_F(JaxPortTest, TensorflowProtocol_RegisterAnonymousKeyValueAndBarrier) {
  Start(2);
  std::vector<std::future<grpc::Status>> registered;
  for (int t = 0; t < 2; ++t) {
    registered.push_back(std::async(std::launch::async, [this, t] {
      grpc::ClientContext ctx;
      tpb::RegisterTaskRequest req;
      req.mutable_source_task()->set_job_name("jax_worker");
      req.mutable_source_task()->set_task_id(t);
      req.set_incarnation(Incarnation(t));
      tpb::RegisterTaskResponse resp;
      return tsl_->RegisterTask(&ctx, req, &resp);
    }));
  }
  for (auto& f : registered) ASSERT_TRUE(f.get().ok());
  {
    grpc::ClientContext ctx;
    tpb::InsertKeyValueRequest req;
    req.mutable_kv()->set_key("k");
    req.mutable_kv()->set_value("v");
    tpb::InsertKeyValueResponse resp;
    ASSERT_TRUE(tsl_->InsertKeyValue(&ctx, req, &resp).ok());
  }
  std::vector<std::future<grpc::Status>> barrier;
  for (int t = 0; t < 2; ++t) {
    barrier.push_back(std::async(std::launch::async, [this, t] {
      grpc::ClientContext ctx;
      tpb::BarrierRequest req;
      req.set_barrier_id("b");
      req.set_barrier_timeout_in_ms(10000);
      req.mutable_source_task()->set_task_id(t);
      tpb::BarrierResponse resp;
      return tsl_->Barrier(&ctx, req, &resp);
    }));
  }
  for (auto& f : barrier) EXPECT_TRUE(f.get().ok());
  grpc::ClientContext ctx;
  tpb::TryGetKeyValueRequest req;
  req.set_key("k");
  tpb::TryGetKeyValueResponse resp;
  ASSERT_TRUE(tsl_->TryGetKeyValue(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.kv().value(), "v");
  EXPECT_EQ(server_->service().GetSnapshot().tasks[1].protocol, kTensorflowCoordinationProtocol);
}

// A JAX process 0 without JAX_COORDINATOR_BIND_ADDRESS binds its own service to the same port
// with SO_REUSEPORT; the JAX port's listener does not allow it, so that bind fails loudly.
TEST_F(JaxPortTest, PortCannotBeSharedEvenWithReuseport) {
  Start(1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int one = 1;
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(jax_port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(errno, EADDRINUSE);
  close(fd);
}

}  // namespace
}  // namespace cohort::coordination
