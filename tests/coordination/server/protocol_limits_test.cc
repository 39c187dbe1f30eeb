// Every limit of the protocol holds on both ways in: the unary RPCs and the Session stream, over
// real gRPC on loopback. They share one handler (rpc_handler.h), so a limit enforced there cannot
// be skipped by one transport.

#include <future>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "coordination/client/session_client.h"
#include "coordination/core/key_value_store.h"
#include "coordination/server/coordination_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordination/server/loopback_server.h"

namespace cohort::coordination {
namespace {

using ::testing::HasSubstr;

enum class Path { kUnary, kSession };

constexpr Incarnation kIncarnation = 7;

class ProtocolLimitsTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    loopback_.Start(1);
    server_ = loopback_.server.get();
    stub_ = loopback_.stub.get();
    ASSERT_TRUE(loopback_.Register(0, kIncarnation, 1).ok());
  }

  // Sends one insert the way the test's path goes; returns its status.
  absl::Status Insert(const std::string& key, const std::string& value,
                      const std::string& token = "the-token") {
    pb::InsertKeyValueRequest req;
    req.set_task_id(0);
    req.set_incarnation(kIncarnation);
    req.mutable_kv()->set_key(key);
    req.mutable_kv()->set_value(value);
    if (GetParam() == Path::kUnary) {
      grpc::ClientContext ctx;
      AddToken(&ctx, token);
      pb::InsertKeyValueResponse resp;
      return FromGrpcStatus(stub_->InsertKeyValue(&ctx, req, &resp));
    }
    pb::SessionRequest call;
    *call.mutable_insert_key_value() = req;
    return OnSession(std::move(call), token).get().first;
  }

  // Starts a directory read on the test's path; the future holds its status and key count.
  std::future<std::pair<absl::Status, int>> ReadDirectory(const std::string& directory) {
    pb::GetKeyValueDirRequest req;
    req.set_task_id(0);
    req.set_incarnation(kIncarnation);
    req.set_directory(directory);
    if (GetParam() == Path::kUnary) {
      auto result = std::make_shared<std::promise<std::pair<absl::Status, int>>>();
      auto call = std::make_shared<std::pair<grpc::ClientContext, pb::GetKeyValueDirResponse>>();
      AddToken(&call->first, "the-token");
      stub_->async()->GetKeyValueDir(
          &call->first, &req, &call->second, [result, call](grpc::Status s) {
            result->set_value({FromGrpcStatus(s), call->second.kvs_size()});
          });
      return result->get_future();
    }
    pb::SessionRequest call;
    *call.mutable_get_key_value_dir() = req;
    return OnSession(std::move(call), "the-token");
  }

  std::future<std::pair<absl::Status, int>> OnSession(pb::SessionRequest call,
                                                      const std::string& token) {
    sessions_.push_back(std::make_unique<SessionClient>(stub_, token));
    auto result = std::make_shared<std::promise<std::pair<absl::Status, int>>>();
    sessions_.back()->Call(std::move(call), [result](absl::Status s, pb::SessionResponse& r) {
      result->set_value({s, r.get_key_value_dir().kvs_size()});
    });
    return result->get_future();
  }

  testing::LoopbackServer loopback_;
  CoordinationServer* server_ = nullptr;
  pb::CoordinationService::Stub* stub_ = nullptr;
  std::vector<std::unique_ptr<SessionClient>> sessions_;
};

TEST_P(ProtocolLimitsTest, WrongToken_UnauthenticatedAndNothingStored) {
  absl::Status s = Insert("k", "v", "not-the-token");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("wrong job token"));
  EXPECT_EQ(server_->service().GetSnapshot().kv_entries, 0u);
}

TEST_P(ProtocolLimitsTest, ValueOverOneMebibyte_InvalidArgumentAndNothingStored) {
  absl::Status s = Insert("big", std::string(KeyValueStore::kMaxValueBytes + 1, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("over the limit"));
  EXPECT_EQ(server_->service().GetSnapshot().kv_entries, 0u);
  EXPECT_TRUE(Insert("big", std::string(KeyValueStore::kMaxValueBytes, 'x')).ok());
}

TEST_P(ProtocolLimitsTest, KeyOverFourKibibytes_InvalidArgument) {
  absl::Status s = Insert(std::string(KeyValueStore::kMaxKeyBytes + 1, 'k'), "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(server_->service().GetSnapshot().kv_entries, 0u);
}

// With the reply budget used up, a directory read waits its turn instead of building its reply
// at once; when the budget frees up it completes, and its bytes are released once sent.
TEST_P(ProtocolLimitsTest, DirectoryRead_WaitsForTheReplyBudget) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Insert(absl::StrCat("dir/", i), "value").ok());
  ReplyBudget& budget = server_->reply_budget();
  ReplyBudget::Charge full = budget.Take(ReplyBudget::kDefaultCapBytes);  // Replies unsent.
  std::future<std::pair<absl::Status, int>> read = ReadDirectory("dir");
  ASSERT_TRUE(budget.AwaitWaiting(1, absl::Seconds(30)))
      << "the read was not queued behind the full budget";
  EXPECT_EQ(read.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  full.Reset();
  auto [status, keys] = read.get();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(keys, 3);
  EXPECT_TRUE(budget.AwaitIdle(absl::Seconds(30))) << "the reply's bytes were never released";
}

INSTANTIATE_TEST_SUITE_P(BothPaths, ProtocolLimitsTest,
                         ::testing::Values(Path::kUnary, Path::kSession),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return info.param == Path::kUnary ? "Unary" : "Session";
                         });

}  // namespace
}  // namespace cohort::coordination
