#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/jax_bridge.h"

namespace cohort::coordination {

// An unmodified jax.distributed.initialize() served by the job's own CoordinationService: XLA's
// coordination protocol in both of its generations as gRPC services (the wire contract is in
// proto/xla_compat/ and docs/jax.md), plus a catch-all that answers any other method at once
// with an error naming the supported jaxlib versions (a newer jaxlib would otherwise retry its
// registration until its initialization timeout).
//
// A JAX process is a task like any other: the same registration barrier, key-value store,
// barriers, shutdown barrier and failure broadcast. What differs:
// - its long PollForError call is its event stream: when it breaks before ShutdownTask the
//   process died and the job fails at once; when the job fails, every open poll is answered with
//   the failure (cause and rank in the message, the failed rank in the error payload) and JAX
//   terminates the process;
// - a preemption notice from anywhere (a rank's sidecar, cohort-run, another JAX process) sets
//   kJaxPreemptionNoticeKey, so JAX's reached_preemption_sync_point() agrees on a step; a JAX
//   process that sets that key itself (its SIGTERM handler) reports a preemption to the job;
// - errors carry the payload XLA's client expects (GrpcPayloadContainer in
//   grpc-status-details-bin), so a refused registration stops its retries at once.
//
// Register() on the builder of the JAX port; the services must outlive that server.
class JaxCompatServices {
 public:
  JaxCompatServices(CoordinationService* service, JaxPortOptions options);
  ~JaxCompatServices();
  JaxCompatServices(const JaxCompatServices&) = delete;
  JaxCompatServices& operator=(const JaxCompatServices&) = delete;

  void Register(grpc::ServerBuilder* builder);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::coordination
