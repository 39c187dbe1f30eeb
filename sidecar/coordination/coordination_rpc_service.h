#pragma once

#include <string>

#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "sidecar/coordination/coordination_service.h"
#include "sidecar/coordination/reply_budget.h"

namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

// Maps the wire protocol onto CoordinationService with gRPC's callback API: a call that waits
// (registration, barrier, blocking get, shutdown, the event stream) holds a reactor, not a
// thread, so 10,000 tasks blocked in one barrier cost memory only. A client that goes away
// cancels its waiting call in the core. Every call is checked against the job token first.
//
// Thread-safe; handlers never block.
class CoordinationRpcService final : public pb::CoordinationService::CallbackService {
 public:
  CoordinationRpcService(CoordinationService* core, std::string token)
      : core_(core), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const pb::RegisterTaskRequest* req,
                                         pb::RegisterTaskResponse* resp) override;
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
  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const pb::BarrierRequest* req,
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
  CoordinationService* const core_;
  const std::string token_;
  // Shared with the session streams, which may outlive this object by a little.
  const std::shared_ptr<ReplyBudget> reply_budget_ = std::make_shared<ReplyBudget>();
};

// Conversions between the core's types and the wire's.
pb::FailureCause ToProto(FailureCause cause);
FailureCause FromProto(pb::FailureCause cause);
pb::JobEvent ToProto(const JobEvent& event);

}  // namespace cohort::coordination
