#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/reply_budget.h"

namespace cohort::coordination {

// Protocol names, as metrics and logs label them.
inline constexpr absl::string_view kXlaCoordinationProtocol = "xla_coordination";
inline constexpr absl::string_view kTensorflowCoordinationProtocol = "tensorflow";
// What the JAX port understands: tensorflow.CoordinationService (jaxlib 0.8.0 to 0.9.x) and
// xla.coordination.CoordinationService (jaxlib 0.10.0 to 0.12.x).
inline constexpr absl::string_view kSupportedJaxlibVersions = "jaxlib 0.8.0 to 0.12.x";
// JAX heartbeats every heartbeat_timeout_seconds / 2 (50 s by default) and never tells the
// service its timeout: a JAX task is declared dead after this without a heartbeat. A dead JAX
// process is noticed much sooner, when its PollForError call breaks.
inline constexpr absl::Duration kJaxHeartbeatTimeout = absl::Seconds(100);
// The key whose value (an RFC 3339 time) tells JAX's preemption sync manager that the job is
// being preempted.
inline constexpr absl::string_view kJaxPreemptionNoticeKey = "RECEIVED_PREEMPTION_NOTICE";

struct JaxPortOptions {
  // Heartbeat timeout of the tasks that register through this port (never below the
  // service's own).
  absl::Duration heartbeat_timeout = kJaxHeartbeatTimeout;
  // Called once per answered call: protocol, method name, status code, and for the calls that
  // wait in the service (RegisterTask, Barrier, GetKeyValue, ShutdownTask) how long they waited.
  // May be empty.
  std::function<void(absl::string_view protocol, absl::string_view method, absl::StatusCode code,
                     std::optional<absl::Duration> waited)>
      on_rpc;
  // The budget directory replies are built under, shared with the service's other transports
  // (CoordinationServer passes its own); null: one of the port's own.
  std::shared_ptr<ReplyBudget> reply_budget;
};

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
