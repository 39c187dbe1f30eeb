#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "coordination/server/rpc_handler.h"

namespace cohort::coordination {

// The coordination protocol on gRPC's callback API, over CoordinationRpcHandler: each unary RPC
// and the Session stream check the job token, then call the handler. A call that waits
// (registration, barrier, blocking get, shutdown, the event stream) holds a reactor, not a
// thread, so 10,000 tasks blocked in one barrier cost memory only; a client that goes away
// cancels its waiting call in the service.
//
// Thread-safe; handlers never block. `handler` must outlive every call (CoordinationServer
// waits for them before destroying it).
class CoordinationGrpcService final : public pb::CoordinationService::CallbackService {
 public:
  CoordinationGrpcService(CoordinationRpcHandler* handler, std::string token)
      : handler_(handler), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const pb::RegisterTaskRequest* req,
                                         pb::RegisterTaskResponse* resp) override;
  grpc::ServerUnaryReactor* GetJobProgress(grpc::CallbackServerContext* ctx,
                                           const pb::GetJobProgressRequest* req,
                                           pb::GetJobProgressResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const pb::HeartbeatRequest* req,
                                      pb::HeartbeatResponse* resp) override;
  grpc::ServerWriteReactor<pb::JobEvent>* WatchJob(grpc::CallbackServerContext* ctx,
                                                   const pb::WatchJobRequest* req) override;
  grpc::ServerUnaryReactor* ReportError(grpc::CallbackServerContext* ctx,
                                        const pb::ReportErrorRequest* req,
                                        pb::ReportErrorResponse* resp) override;
  grpc::ServerUnaryReactor* ShutdownTask(grpc::CallbackServerContext* ctx,
                                         const pb::ShutdownTaskRequest* req,
                                         pb::ShutdownTaskResponse* resp) override;
  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::InsertKeyValueRequest* req,
                                           pb::InsertKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const pb::GetKeyValueRequest* req,
                                        pb::GetKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::TryGetKeyValueRequest* req,
                                           pb::TryGetKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* GetKeyValueDir(grpc::CallbackServerContext* ctx,
                                           const pb::GetKeyValueDirRequest* req,
                                           pb::GetKeyValueDirResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                           const pb::DeleteKeyValueRequest* req,
                                           pb::DeleteKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* IncrementKeyValue(grpc::CallbackServerContext* ctx,
                                              const pb::IncrementKeyValueRequest* req,
                                              pb::IncrementKeyValueResponse* resp) override;
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx, const pb::BarrierRequest* req,
                                    pb::BarrierResponse* resp) override;
  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const pb::CancelBarrierRequest* req,
                                          pb::CancelBarrierResponse* resp) override;
  grpc::ServerUnaryReactor* ReportPreemption(grpc::CallbackServerContext* ctx,
                                             const pb::ReportPreemptionRequest* req,
                                             pb::ReportPreemptionResponse* resp) override;
  grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* Session(
      grpc::CallbackServerContext* ctx) override;

 private:
  // Checks the token, then runs one handler call on a unary reactor.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, HandlerMethod<Req, Resp> method,
                                  const Req* req, Resp* resp);

  CoordinationRpcHandler* const handler_;
  const std::string token_;
};

}  // namespace cohort::coordination
