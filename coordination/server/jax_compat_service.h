#pragma once

#include <string>

#include "coordination/server/jax_bridge.h"
#include "coordination/server/service_port.h"

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
// The port is a ServicePort: CoordinationServer starts it over its service and stops it with
// its own (ServerOptions::attached_port = JaxPortStarter(...)).
//
// `listen_address` is "host:port" (port 0 picks a free one). The port carries no authentication
// (JAX sends none) and refuses to share its port (no SO_REUSEPORT), so a JAX process 0 that tries
// to host its own service on it fails at once instead of splitting the job. Errors: Unavailable
// when it cannot listen, naming the likely cause.
ServicePortStarter JaxPortStarter(std::string listen_address, JaxPortOptions options);

}  // namespace cohort::coordination
