// GrpcCoordinationStub over real gRPC on loopback: which calls wait for the channel.

#include "coordination/client/grpc_coordination_stub.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/subprocess.h"
#include "coordination/client/await.h"
#include "tests/coordination/server/loopback_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using testing::kTestToken;

absl::Status ReportError(GrpcCoordinationStub& stub, absl::Duration timeout) {
  pb::ReportErrorRequest req;
  req.set_task_id(0);
  req.set_incarnation(7);
  req.set_message("the trainer exited");
  pb::ReportErrorResponse resp;
  return Await<absl::Status>([&](auto done) { stub.ReportError(req, &resp, timeout, done); });
}

TEST(GrpcCoordinationStubTest, ReportError_BeforeTheServiceWasReached_WaitsForIt) {
  // Nothing listens yet: the service may still be starting, so the report waits for it (until
  // its timeout here) instead of failing with Unavailable at the first refused connection.
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  GrpcCoordinationStub stub(absl::StrCat("127.0.0.1:", *port), kTestToken);
  absl::Status s = ReportError(stub, absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(stub.ServiceReached());
}

// A stub that registered task 0 of a 1-task job with a loopback service, which is then stopped:
// its process is gone and its port refuses connections.
class ServiceDiedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loopback_.Start(1);
    stub_ = std::make_unique<GrpcCoordinationStub>(
        absl::StrCat("127.0.0.1:", loopback_.server->port()), kTestToken);
    pb::RegisterTaskRequest reg;
    reg.set_task_id(0);
    reg.set_incarnation(7);
    reg.set_num_tasks(1);
    pb::RegisterTaskResponse resp;
    absl::Status registered = Await<absl::Status>(
        [&](auto done) { stub_->RegisterTask(reg, &resp, absl::Seconds(30), done); });
    ASSERT_TRUE(registered.ok()) << registered;
    ASSERT_TRUE(stub_->ServiceReached());
    loopback_.server.reset();
  }

  testing::LoopbackServer loopback_;
  std::unique_ptr<GrpcCoordinationStub> stub_;
};

TEST_F(ServiceDiedTest, ReportError_FailsAtOnceWithUnavailable) {
  // A sidecar whose trainer died after the service's process died: its report must not wait for
  // a channel that will not come back (it used to wait until the next heartbeat noticed).
  absl::Status s = ReportError(*stub_, absl::Seconds(60));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

}  // namespace
}  // namespace cohort::coordination
