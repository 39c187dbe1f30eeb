#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/job_settings.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/grpc_service.h"
#include "coordination/server/reply_budget.h"
#include "coordination/server/rpc_handler.h"
#include "coordination/server/service_port.h"

namespace cohort::coordination {

struct ServerOptions {
  // "host:port"; port 0 picks a free one (see CoordinationServer::port()).
  std::string listen_address = "0.0.0.0:0";
  ServiceConfig service;
  std::string token;  // Empty: no authentication.
  // A second port over the same service, started once the service exists and stopped with it:
  // the sidecar's JAX port (StartJaxPort in jax_compat_service.h, docs/jax.md). Empty: none.
  ServicePortStarter attached_port;
};

// The server that process 0 of the job `settings` describe hosts: on `bind_address`, at the port
// of the coordinator address. InvalidArgument when that address is missing or has no port.
absl::StatusOr<ServerOptions> ServerOptionsFor(const JobSettings& settings,
                                               absl::string_view bind_address);

// The coordination service on a gRPC port, plus its one deadline-checker thread.
//
// Lifecycle: Start() -> serving -> Stop(bound) waits until every task shut down or failed, or
// the job failed (every live task was told; ranks that never registered get kFailureLinger to
// hear of it), or the bound passes; then it stops accepting calls and fails the ones still
// waiting. Destruction
// stops at once. Thread-safe: a Stop() that finds another in progress waits for it and returns
// its result.
// After a job failure, how long Stop() keeps the port open for ranks that never registered, so
// that their next registration attempt hears of the failure.
inline constexpr absl::Duration kFailureLinger = absl::Seconds(1);

class CoordinationServer {
 public:
  // Errors: Unavailable when the address cannot be bound (in use, not local).
  static absl::StatusOr<std::unique_ptr<CoordinationServer>> Start(ServerOptions options,
                                                                   Clock* clock = Clock::Real());
  ~CoordinationServer();
  CoordinationServer(const CoordinationServer&) = delete;
  CoordinationServer& operator=(const CoordinationServer&) = delete;

  int port() const { return port_; }
  // The port ServerOptions::attached_port started, or null when none was asked for.
  ServicePort* attached_port() const { return attached_port_.get(); }
  CoordinationService& service() { return *service_; }
  // The bound on built-but-unsent directory replies, shared by every transport.
  ReplyBudget& reply_budget() { return handler_->reply_budget(); }
  // Notified when Stop() (or destruction) begins; Stop() may still be waiting for tasks.
  const absl::Notification& stopping() const { return stopping_; }

  // Returns whether the job ended (every task done, or the job failed) before the bound passed.
  bool Stop(absl::Duration bound);

 private:
  CoordinationServer(ServerOptions options, Clock* clock);
  void CheckerLoop();
  // Stops serving and joins the checker; `grace` lets in-flight replies go out first.
  void ShutDownLocked(absl::Duration grace) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_);

  ServerOptions options_;
  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<CoordinationRpcHandler> handler_;
  std::unique_ptr<CoordinationGrpcService> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<ServicePort> attached_port_;
  absl::Notification stop_checker_;
  std::thread checker_;

  absl::Notification stopping_;
  absl::Mutex stop_mu_;
  std::optional<bool> stop_result_ ABSL_GUARDED_BY(stop_mu_);  // Set once stopped.
};

}  // namespace cohort::coordination
