#pragma once

#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "sidecar/coordination/coordination_rpc_service.h"
#include "sidecar/coordination/coordination_service.h"

namespace cohort::coordination {

struct ServerOptions {
  // "host:port"; port 0 picks a free one (see CoordinationServer::port()).
  std::string listen_address = "0.0.0.0:0";
  ServiceConfig service;
  std::string token;  // Empty: no authentication.
};

// The coordination service on a gRPC port, plus its one deadline-checker thread.
//
// Lifecycle: Start() -> serving -> Stop(bound) waits until every task shut down or failed (or
// the bound passes), then stops accepting calls and fails the ones still waiting. Destruction
// stops at once. Thread-safe.
class CoordinationServer {
 public:
  // Errors: Unavailable when the address cannot be bound (in use, not local).
  static absl::StatusOr<std::unique_ptr<CoordinationServer>> Start(ServerOptions options,
                                                                   Clock* clock = Clock::Real());
  ~CoordinationServer();
  CoordinationServer(const CoordinationServer&) = delete;
  CoordinationServer& operator=(const CoordinationServer&) = delete;

  int port() const { return port_; }
  CoordinationService& service() { return *service_; }

  // Returns whether every task was done before the bound passed.
  bool Stop(absl::Duration bound);

 private:
  CoordinationServer(ServerOptions options, Clock* clock);
  void CheckerLoop();

  ServerOptions options_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinationRpcService> rpc_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification stop_checker_;
  std::thread checker_;
  bool stopped_ = false;
};

}  // namespace cohort::coordination
