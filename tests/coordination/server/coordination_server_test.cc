// The coordination service over real gRPC on loopback.

#include "coordination/server/coordination_server.h"

#include <future>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "coordination/client/session_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordination/server/loopback_server.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;

class CoordinationServerTest : public ::testing::Test {
 protected:
  void Start(int tasks) {
    loopback_.Start(tasks);
    server_ = loopback_.server.get();
    stub_ = loopback_.stub.get();
  }
  testing::LoopbackServer loopback_;
  CoordinationServer* server_ = nullptr;
  pb::CoordinationService::Stub* stub_ = nullptr;
};

TEST_F(CoordinationServerTest, WrongOrMissingToken_UnauthenticatedAndNothingChanges) {
  Start(1);
  pb::RegisterTaskRequest reg;
  reg.set_task_id(0);
  reg.set_incarnation(7);
  reg.set_num_tasks(1);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    pb::RegisterTaskResponse resp;
    grpc::Status s = stub_->RegisterTask(&ctx, reg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(s.error_message(), HasSubstr("wrong job token"));
  }
  {
    grpc::ClientContext ctx;
    pb::RegisterTaskResponse resp;
    grpc::Status s = stub_->RegisterTask(&ctx, reg, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(s.error_message(), HasSubstr("missing job token"));
  }
  EXPECT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kDisconnected);
  {
    grpc::ClientContext ctx;
    AddToken(&ctx, "the-token");
    pb::RegisterTaskResponse resp;
    ASSERT_TRUE(stub_->RegisterTask(&ctx, reg, &resp).ok());
  }
  pb::InsertKeyValueRequest set;
  set.set_task_id(0);
  set.set_incarnation(7);
  set.mutable_kv()->set_key("k");
  set.mutable_kv()->set_value("v");
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    pb::InsertKeyValueResponse resp;
    EXPECT_EQ(stub_->InsertKeyValue(&ctx, set, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(server_->service().GetSnapshot().kv_entries, 0u);
}

// The sidecar's signal thread and its main path may both stop the server. The second caller
// waits for the first and returns its result: here false, since task 0 never shut down within
// the first caller's bound. (A second Stop used to return true at once while the first still
// waited, and two at once could both join the checker thread.)
TEST_F(CoordinationServerTest, StopFromTwoThreads_TheSecondWaitsAndReturnsTheFirstsResult) {
  Start(1);
  ASSERT_TRUE(loopback_.Register(0, 7, 1).ok());
  std::future<bool> first =
      std::async(std::launch::async, [&] { return server_->Stop(absl::Seconds(1)); });
  server_->stopping().WaitForNotification();
  EXPECT_FALSE(server_->Stop(absl::Minutes(10)));
  EXPECT_FALSE(first.get());
  grpc::ClientContext ctx;
  AddToken(&ctx, "the-token");
  ctx.set_deadline(ToChronoDeadline(absl::Seconds(5)));
  pb::HeartbeatRequest hb;
  hb.set_task_id(0);
  hb.set_incarnation(7);
  pb::HeartbeatResponse hb_resp;
  EXPECT_FALSE(stub_->Heartbeat(&ctx, hb, &hb_resp).ok()) << "the server still serves";
}

// A registration retried by the same process (same incarnation) while the first still waits:
// the first is answered Aborted, marked superseded by a status payload that crosses real gRPC
// (the agent retries on the mark, never on the words); the retry is the one that completes.
TEST_F(CoordinationServerTest, RegistrationRetried_TheFirstCallIsMarkedSupersededOverTheWire) {
  Start(2);
  std::future<grpc::Status> first =
      std::async(std::launch::async, [&] { return loopback_.Register(0, 7, 2); });
  // The first call is in when task 0 is connecting (the service has no notification for it).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (server_->service().GetSnapshot().tasks[0].state != TaskState::kConnecting &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(server_->service().GetSnapshot().tasks[0].state, TaskState::kConnecting)
      << "the first call never arrived";
  std::future<grpc::Status> retry =
      std::async(std::launch::async, [&] { return loopback_.Register(0, 7, 2); });
  absl::Status superseded = FromGrpcStatus(first.get());
  EXPECT_TRUE(IsSuperseded(superseded)) << superseded;
  EXPECT_TRUE(absl::IsAborted(superseded));
  ASSERT_TRUE(loopback_.Register(1, 8, 2).ok());
  EXPECT_TRUE(retry.get().ok());
  // Any other Aborted carries no mark: a new incarnation of a connected task fails the job.
  absl::Status restarted = FromGrpcStatus(loopback_.Register(1, 9, 2));
  EXPECT_TRUE(absl::IsAborted(restarted)) << restarted;
  EXPECT_FALSE(IsSuperseded(restarted));
}

absl::Status CallAndWait(coordination::SessionClient& session, pb::SessionRequest req,
                         pb::SessionResponse* out = nullptr) {
  std::promise<absl::Status> done;
  session.Call(std::move(req), [&](absl::Status s, const pb::SessionResponse& r) {
    if (out) *out = r;
    done.set_value(s);
  });
  return done.get_future().get();
}

TEST_F(CoordinationServerTest, Session_CallsAsMessagesWithTheirOwnSemantics) {
  Start(1);
  ASSERT_TRUE(loopback_.Register(0, 7, 1).ok());
  coordination::SessionClient session(stub_, "the-token");
  pb::SessionRequest set;
  set.mutable_insert_key_value()->set_incarnation(7);
  set.mutable_insert_key_value()->mutable_kv()->set_key("k");
  set.mutable_insert_key_value()->mutable_kv()->set_value("v");
  ASSERT_TRUE(CallAndWait(session, set).ok());
  EXPECT_EQ(CallAndWait(session, set).code(), absl::StatusCode::kAlreadyExists);
  pb::SessionRequest get;
  get.mutable_get_key_value()->set_incarnation(7);
  get.mutable_get_key_value()->set_key("k");
  get.mutable_get_key_value()->set_timeout_ms(1000);
  pb::SessionResponse resp;
  ASSERT_TRUE(CallAndWait(session, get, &resp).ok());
  EXPECT_EQ(resp.get_key_value().kv().value(), "v");
  get.mutable_get_key_value()->set_key("missing");
  get.mutable_get_key_value()->set_timeout_ms(200);
  EXPECT_EQ(CallAndWait(session, get).code(), absl::StatusCode::kDeadlineExceeded);
  pb::SessionRequest barrier;
  barrier.mutable_barrier()->set_incarnation(7);
  barrier.mutable_barrier()->set_barrier_id("b");
  barrier.mutable_barrier()->set_timeout_ms(1000);
  EXPECT_TRUE(CallAndWait(session, barrier).ok());
}

TEST_F(CoordinationServerTest, Session_WrongToken_Unauthenticated) {
  Start(1);
  coordination::SessionClient session(stub_, "wrong");
  pb::SessionRequest set;
  set.mutable_insert_key_value()->mutable_kv()->set_key("k");
  absl::Status s = CallAndWait(session, set);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_EQ(server_->service().GetSnapshot().kv_entries, 0u);
}

// 4,096 tasks registered and blocked in one barrier over real gRPC: waiting calls hold no
// thread, so this works on a 2-core machine.
TEST_F(CoordinationServerTest, FourThousandTasksInOneBarrier_AllReleased) {
  constexpr int kTasks = 4096;
  Start(kTasks);
  struct Call {
    grpc::ClientContext ctx;
    pb::RegisterTaskRequest reg;
    pb::RegisterTaskResponse reg_resp;
    pb::BarrierRequest barrier;
    pb::BarrierResponse barrier_resp;
  };
  std::vector<std::unique_ptr<Call>> calls(kTasks);
  absl::BlockingCounter registered(kTasks);
  std::atomic<int> failures{0};
  for (int t = 0; t < kTasks; ++t) {
    calls[t] = std::make_unique<Call>();
    Call* c = calls[t].get();
    c->reg.set_task_id(t);
    c->reg.set_incarnation(1000 + t);
    c->reg.set_num_tasks(kTasks);
    AddToken(&c->ctx, "the-token");
    stub_->async()->RegisterTask(&c->ctx, &c->reg, &c->reg_resp, [&](grpc::Status s) {
      if (!s.ok()) ++failures;
      registered.DecrementCount();
    });
  }
  registered.Wait();
  ASSERT_EQ(failures.load(), 0);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(kTasks);
  absl::BlockingCounter released(kTasks);
  for (int t = 0; t < kTasks; ++t) {
    Call* c = calls[t].get();
    c->barrier.set_task_id(t);
    c->barrier.set_incarnation(1000 + t);
    c->barrier.set_barrier_id("everyone");
    c->barrier.set_timeout_ms(120'000);
    contexts[t] = std::make_unique<grpc::ClientContext>();
    AddToken(contexts[t].get(), "the-token");
    stub_->async()->Barrier(contexts[t].get(), &c->barrier, &c->barrier_resp, [&](grpc::Status s) {
      if (!s.ok()) ++failures;
      released.DecrementCount();
    });
  }
  released.Wait();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace cohort::coordination
