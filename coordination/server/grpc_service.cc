#include "coordination/server/grpc_service.h"

#include <atomic>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "common/grpc_event_stream.h"
#include "common/grpc_util.h"
#include "coordination/server/session_reactor.h"
#include "coordination/server/waiting_call_reactor.h"

namespace cohort::coordination {

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* CoordinationGrpcService::Serve(grpc::CallbackServerContext* ctx,
                                                         HandlerMethod<Req, Resp> method,
                                                         const Req* req, Resp* resp) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  auto* reactor = new WaitingCallReactor(&handler_->service());
  reactor->Started((handler_->*method)(
      req, resp, [reactor](absl::Status s) { reactor->Complete(ToGrpcStatus(s)); }));
  return reactor;
}

using H = CoordinationRpcHandler;

grpc::ServerUnaryReactor* CoordinationGrpcService::RegisterTask(grpc::CallbackServerContext* ctx,
                                                                const pb::RegisterTaskRequest* req,
                                                                pb::RegisterTaskResponse* resp) {
  return Serve(ctx, &H::RegisterTaskAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::GetJobProgress(
    grpc::CallbackServerContext* ctx, const pb::GetJobProgressRequest* req,
    pb::GetJobProgressResponse* resp) {
  return Serve(ctx, &H::GetJobProgressAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                             const pb::HeartbeatRequest* req,
                                                             pb::HeartbeatResponse* resp) {
  return Serve(ctx, &H::HeartbeatAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::ReportError(grpc::CallbackServerContext* ctx,
                                                               const pb::ReportErrorRequest* req,
                                                               pb::ReportErrorResponse* resp) {
  return Serve(ctx, &H::ReportErrorAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::ShutdownTask(grpc::CallbackServerContext* ctx,
                                                                const pb::ShutdownTaskRequest* req,
                                                                pb::ShutdownTaskResponse* resp) {
  return Serve(ctx, &H::ShutdownTaskAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::InsertKeyValue(
    grpc::CallbackServerContext* ctx, const pb::InsertKeyValueRequest* req,
    pb::InsertKeyValueResponse* resp) {
  return Serve(ctx, &H::InsertKeyValueAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::GetKeyValue(grpc::CallbackServerContext* ctx,
                                                               const pb::GetKeyValueRequest* req,
                                                               pb::GetKeyValueResponse* resp) {
  return Serve(ctx, &H::GetKeyValueAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::TryGetKeyValue(
    grpc::CallbackServerContext* ctx, const pb::TryGetKeyValueRequest* req,
    pb::TryGetKeyValueResponse* resp) {
  return Serve(ctx, &H::TryGetKeyValueAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::GetKeyValueDir(
    grpc::CallbackServerContext* ctx, const pb::GetKeyValueDirRequest* req,
    pb::GetKeyValueDirResponse* resp) {
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) return FinishUnary(ctx, auth);
  auto* reactor = new WaitingCallReactor(&handler_->service());
  reactor->Started(handler_->GetKeyValueDirAsync(
      req, resp, [reactor](absl::Status s, ReplyBudget::Charge charge) {
        reactor->Complete(ToGrpcStatus(s), std::move(charge));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* CoordinationGrpcService::DeleteKeyValue(
    grpc::CallbackServerContext* ctx, const pb::DeleteKeyValueRequest* req,
    pb::DeleteKeyValueResponse* resp) {
  return Serve(ctx, &H::DeleteKeyValueAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::IncrementKeyValue(
    grpc::CallbackServerContext* ctx, const pb::IncrementKeyValueRequest* req,
    pb::IncrementKeyValueResponse* resp) {
  return Serve(ctx, &H::IncrementKeyValueAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::Barrier(grpc::CallbackServerContext* ctx,
                                                           const pb::BarrierRequest* req,
                                                           pb::BarrierResponse* resp) {
  return Serve(ctx, &H::BarrierAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::CancelBarrier(
    grpc::CallbackServerContext* ctx, const pb::CancelBarrierRequest* req,
    pb::CancelBarrierResponse* resp) {
  return Serve(ctx, &H::CancelBarrierAsync, req, resp);
}

grpc::ServerUnaryReactor* CoordinationGrpcService::ReportPreemption(
    grpc::CallbackServerContext* ctx, const pb::ReportPreemptionRequest* req,
    pb::ReportPreemptionResponse* resp) {
  return Serve(ctx, &H::ReportPreemptionAsync, req, resp);
}

grpc::ServerWriteReactor<pb::JobEvent>* CoordinationGrpcService::WatchJob(
    grpc::CallbackServerContext* ctx, const pb::WatchJobRequest* req) {
  auto* stream = new EventStream<pb::JobEvent>();
  auto sink = stream->sink();
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) {
    sink->FinishWith(auth);
    return stream;
  }
  absl::StatusOr<OpId> op =
      handler_->WatchJob(req, [sink](const pb::JobEvent& e) { sink->Push(e); });
  if (!op.ok()) {
    sink->FinishWith(op.status());
    return stream;
  }
  stream->set_on_end([handler = handler_, op = *op] { handler->CancelOp(op); });
  return stream;
}

grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* CoordinationGrpcService::Session(
    grpc::CallbackServerContext* ctx) {
  return NewSessionReactor(handler_, CheckToken(*ctx, token_));
}

}  // namespace cohort::coordination
