#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "common/grpc_util.h"
#include "coordination/server/coordination_server.h"
#include "gtest/gtest.h"

namespace cohort::coordination::testing {

inline constexpr char kTestToken[] = "the-token";

// A coordination server for `tasks` tasks on a free loopback port, with kTestToken, and a stub
// to call it: the real service over real gRPC, for tests of the transport.
struct LoopbackServer {
  std::unique_ptr<CoordinationServer> server;
  std::unique_ptr<pb::CoordinationService::Stub> stub;

  // Fails the running test when the server cannot start.
  void Start(int tasks) {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.service.num_tasks = tasks;
    options.token = kTestToken;
    absl::StatusOr<std::unique_ptr<CoordinationServer>> started =
        CoordinationServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    stub = pb::CoordinationService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
  }

  // Registers `task` of a `num_tasks`-task job with a unary call; returns when every task did.
  grpc::Status Register(TaskId task, Incarnation incarnation, int num_tasks) {
    grpc::ClientContext ctx;
    AddToken(&ctx, kTestToken);
    pb::RegisterTaskRequest reg;
    reg.set_task_id(task);
    reg.set_incarnation(incarnation);
    reg.set_num_tasks(num_tasks);
    pb::RegisterTaskResponse resp;
    return stub->RegisterTask(&ctx, reg, &resp);
  }
};

}  // namespace cohort::coordination::testing
