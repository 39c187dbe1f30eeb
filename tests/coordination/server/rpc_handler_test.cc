// The protocol handler in process: each call's request read, response filled and status passed
// on, without a transport.

#include "coordination/server/rpc_handler.h"

#include <memory>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;

// The one completion of a call.
struct Done {
  std::optional<absl::Status> status;
  CoordinationRpcHandler::StatusCallback callback() {
    return [this](absl::Status s) {
      ASSERT_FALSE(status.has_value()) << "done ran twice";
      status = std::move(s);
    };
  }
};

class RpcHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServiceConfig config;
    config.num_tasks = 2;
    service_ = std::make_unique<CoordinationService>(config, &clock_);
    budget_ = ReplyBudget::Create(1 << 20);
    handler_ = std::make_unique<CoordinationRpcHandler>(service_.get(), budget_);
    std::vector<Done> registered(2);
    std::vector<pb::RegisterTaskResponse> responses(2);
    for (int t = 0; t < 2; ++t) {
      pb::RegisterTaskRequest req;
      req.set_task_id(t);
      req.set_incarnation(Inc(t));
      req.set_num_tasks(2);
      handler_->RegisterTaskAsync(&req, &responses[t], registered[t].callback());
    }
    for (int t = 0; t < 2; ++t) {
      ASSERT_TRUE(registered[t].status && registered[t].status->ok());
      EXPECT_EQ(responses[t].service_incarnation(), service_->service_incarnation());
      EXPECT_EQ(responses[t].num_tasks(), 2);
    }
  }
  static Incarnation Inc(TaskId t) { return 500 + t; }
  template <typename Req>
  Req For(TaskId t) {
    Req req;
    req.set_task_id(t);
    req.set_incarnation(Inc(t));
    return req;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinationService> service_;
  std::shared_ptr<ReplyBudget> budget_;
  std::unique_ptr<CoordinationRpcHandler> handler_;
};

TEST_F(RpcHandlerTest, KeyValueCalls_FillTheirResponses) {
  auto set = For<pb::InsertKeyValueRequest>(0);
  set.mutable_kv()->set_key("a/b");
  set.mutable_kv()->set_value("v");
  pb::InsertKeyValueResponse set_resp;
  Done set_done;
  EXPECT_EQ(handler_->InsertKeyValueAsync(&set, &set_resp, set_done.callback()), 0u);
  ASSERT_TRUE(set_done.status->ok());

  auto try_get = For<pb::TryGetKeyValueRequest>(1);
  try_get.set_key("a/b");
  pb::TryGetKeyValueResponse try_resp;
  Done try_done;
  handler_->TryGetKeyValueAsync(&try_get, &try_resp, try_done.callback());
  ASSERT_TRUE(try_done.status->ok());
  EXPECT_EQ(try_resp.kv().key(), "a/b");
  EXPECT_EQ(try_resp.kv().value(), "v");
  try_get.set_key("missing");
  Done missing;
  pb::TryGetKeyValueResponse missing_resp;
  handler_->TryGetKeyValueAsync(&try_get, &missing_resp, missing.callback());
  EXPECT_EQ(missing.status->code(), absl::StatusCode::kNotFound);

  auto inc = For<pb::IncrementKeyValueRequest>(1);
  inc.set_key("n");
  inc.set_increment(3);
  pb::IncrementKeyValueResponse inc_resp;
  Done inc_done;
  handler_->IncrementKeyValueAsync(&inc, &inc_resp, inc_done.callback());
  EXPECT_EQ(inc_resp.value(), 3);
}

TEST_F(RpcHandlerTest, BlockingGet_WaitsForTheKeyAndCancelOpEndsIt) {
  auto get = For<pb::GetKeyValueRequest>(0);
  get.set_key("later");
  get.set_timeout_ms(60'000);
  pb::GetKeyValueResponse resp;
  Done done;
  OpId op = handler_->GetKeyValueAsync(&get, &resp, done.callback());
  EXPECT_NE(op, 0u);
  EXPECT_FALSE(done.status.has_value());
  auto set = For<pb::InsertKeyValueRequest>(1);
  set.mutable_kv()->set_key("later");
  set.mutable_kv()->set_value("here");
  pb::InsertKeyValueResponse set_resp;
  Done set_done;
  handler_->InsertKeyValueAsync(&set, &set_resp, set_done.callback());
  ASSERT_TRUE(done.status && done.status->ok());
  EXPECT_EQ(resp.kv().value(), "here");

  get.set_key("never");
  pb::GetKeyValueResponse never_resp;
  Done never;
  OpId waiting = handler_->GetKeyValueAsync(&get, &never_resp, never.callback());
  handler_->CancelOp(waiting);
  EXPECT_EQ(never.status->code(), absl::StatusCode::kCancelled);
}

TEST_F(RpcHandlerTest, DirectoryRead_ChargesItsReplyToTheBudgetUntilReleased) {
  for (int i = 0; i < 4; ++i) {
    auto set = For<pb::InsertKeyValueRequest>(0);
    set.mutable_kv()->set_key(absl::StrCat("d/", i));
    set.mutable_kv()->set_value("value");
    pb::InsertKeyValueResponse r;
    Done d;
    handler_->InsertKeyValueAsync(&set, &r, d.callback());
  }
  auto dir = For<pb::GetKeyValueDirRequest>(1);
  dir.set_directory("d");
  pb::GetKeyValueDirResponse resp;
  std::optional<absl::Status> status;
  ReplyBudget::Charge charge;
  handler_->GetKeyValueDirAsync(&dir, &resp, [&](absl::Status s, ReplyBudget::Charge c) {
    status = s;
    charge = std::move(c);
  });
  ASSERT_TRUE(status && status->ok());
  EXPECT_EQ(resp.kvs_size(), 4);
  EXPECT_EQ(resp.kvs(3).key(), "d/3");
  EXPECT_EQ(charge.bytes(), resp.ByteSizeLong());
  EXPECT_EQ(budget_->in_flight(), resp.ByteSizeLong());
  charge.Reset();  // The transport sent it.
  EXPECT_EQ(budget_->in_flight(), 0u);
}

TEST_F(RpcHandlerTest, Barrier_EchoesTheCounterAndCompletesWhenAllArrive) {
  std::vector<Done> done(2);
  std::vector<pb::BarrierResponse> resp(2);
  for (int t = 0; t < 2; ++t) {
    auto b = For<pb::BarrierRequest>(t);
    b.set_barrier_id("sync");
    b.set_timeout_ms(10'000);
    handler_->BarrierAsync(&b, &resp[t], done[t].callback());
  }
  for (int t = 0; t < 2; ++t) {
    ASSERT_TRUE(done[t].status && done[t].status->ok());
    EXPECT_EQ(resp[t].counter(), 0);
  }
}

// Cohort's protocol asks for a name and a positive timeout (the core, which also serves XLA's
// protocol, takes any).
TEST_F(RpcHandlerTest, Barrier_WithoutANameOrATimeout_Refused) {
  Done unnamed, untimed;
  pb::BarrierResponse resp;
  auto b = For<pb::BarrierRequest>(0);
  b.set_timeout_ms(10'000);
  handler_->BarrierAsync(&b, &resp, unnamed.callback());
  ASSERT_TRUE(unnamed.status.has_value());
  EXPECT_EQ(unnamed.status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unnamed.status->message()), HasSubstr("name the barrier"));
  b.set_barrier_id("sync");
  b.set_timeout_ms(0);
  handler_->BarrierAsync(&b, &resp, untimed.callback());
  ASSERT_TRUE(untimed.status.has_value());
  EXPECT_EQ(untimed.status->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(untimed.status->message()), HasSubstr("timeout must be positive"));
}

TEST_F(RpcHandlerTest, WatchJob_EventsArriveAsProtos) {
  auto watch = For<pb::WatchJobRequest>(0);
  std::vector<pb::JobEvent> events;
  absl::StatusOr<OpId> op =
      handler_->WatchJob(&watch, [&](const pb::JobEvent& e) { events.push_back(e); });
  ASSERT_TRUE(op.ok());
  auto report = For<pb::ReportErrorRequest>(1);
  report.set_cause(pb::FAILURE_CAUSE_REPORTED_ERROR);
  report.set_message("nan loss");
  pb::ReportErrorResponse r;
  Done d;
  handler_->ReportErrorAsync(&report, &r, d.callback());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].task_failure().task_id(), 1);
  EXPECT_EQ(events[0].task_failure().cause(), pb::FAILURE_CAUSE_REPORTED_ERROR);
  EXPECT_THAT(events[0].task_failure().message(), HasSubstr("nan loss"));
}

TEST_F(RpcHandlerTest, RegisterFromAnotherRestartAttempt_OlderRefusedNewerRetries) {
  ServiceConfig config;
  config.num_tasks = 1;
  config.restart_attempt = 3;
  CoordinationService service(config, &clock_);
  CoordinationRpcHandler handler(&service, ReplyBudget::Create());
  pb::RegisterTaskRequest req;
  req.set_task_id(0);
  req.set_incarnation(9);
  req.set_num_tasks(1);
  req.set_restart_attempt(2);
  pb::RegisterTaskResponse resp;
  Done stale;
  handler.RegisterTaskAsync(&req, &resp, stale.callback());
  EXPECT_EQ(stale.status->code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status->message(), HasSubstr("restart attempt 2"));
  EXPECT_THAT(stale.status->message(), HasSubstr("runs attempt 3"));
  EXPECT_THAT(stale.status->message(), HasSubstr("leftover of an earlier attempt"));
  // A task of a newer gang that reached this (older) service retries: its own is on the way.
  req.set_restart_attempt(4);
  Done early;
  handler.RegisterTaskAsync(&req, &resp, early.callback());
  EXPECT_EQ(early.status->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(early.status->message(), HasSubstr("waiting for attempt 4's service"));
  req.set_restart_attempt(3);
  Done current;
  handler.RegisterTaskAsync(&req, &resp, current.callback());
  EXPECT_TRUE(current.status->ok()) << *current.status;
}

}  // namespace
}  // namespace cohort::coordination
