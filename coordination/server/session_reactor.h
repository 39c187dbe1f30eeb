#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "coordination/server/rpc_handler.h"

namespace cohort::coordination {

// The server side of one agent's Session stream: reads calls one after another and hands each
// to the handler; each completion queues its response, written one at a time. Completions hold
// the stream's outbox (not the reactor), so one that races with the end of the stream is dropped
// instead of touching a freed reactor. When the client stops sending (or goes away) its calls
// still waiting in the service are cancelled, and the stream finishes once every queued response
// is written.
//
// `auth` is the transport's verdict on the caller's token: an error finishes the stream with it
// at once. The reactor deletes itself when gRPC is done with it.
grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* NewSessionReactor(
    CoordinationRpcHandler* handler, const absl::Status& auth);

}  // namespace cohort::coordination
