#include "sidecar/coordination/coordination_rpc_service.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "common/grpc_event_stream.h"
#include "common/grpc_util.h"

namespace cohort::coordination {
namespace {

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// A unary reactor for a call that waits in the core. It is referenced by gRPC (until OnDone) and
// by the handler (until it has handed the OpId over), so that a completion that races with the
// handler can never free it early. OnCancel (client gone, deadline, server shutdown) cancels the
// op in the core, which completes the call with CANCELLED.
class WaitingReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit WaitingReactor(CoordinationService* core) : core_(core) {}

  void Complete(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(ToGrpcStatus(status));
  }

  // Hands over the op that now waits in the core, and drops the handler's reference.
  void Started(OpId op) {
    bool cancel_now = false;
    {
      absl::MutexLock lock(&mu_);
      op_ = op;
      cancel_now = cancelled_ && !finished_ && op != 0;
    }
    if (cancel_now) core_->CancelOp(op);
    Unref();
  }

  void OnCancel() override {
    OpId op = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      op = op_;
    }
    if (op != 0) core_->CancelOp(op);
  }
  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }
  CoordinationService* const core_;
  std::atomic<int> refs_{2};
  absl::Mutex mu_;
  OpId op_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

pb::FailureCause ToProto(FailureCause cause) {
  switch (cause) {
    case FailureCause::kProcessExited: return pb::FAILURE_CAUSE_PROCESS_EXITED;
    case FailureCause::kHeartbeatTimeout: return pb::FAILURE_CAUSE_HEARTBEAT_TIMEOUT;
    case FailureCause::kPreempted: return pb::FAILURE_CAUSE_PREEMPTED;
    case FailureCause::kRestarted: return pb::FAILURE_CAUSE_RESTARTED;
    case FailureCause::kReportedError: return pb::FAILURE_CAUSE_REPORTED_ERROR;
    case FailureCause::kRegistrationTimeout: return pb::FAILURE_CAUSE_REGISTRATION_TIMEOUT;
    case FailureCause::kShutdownTimeout: return pb::FAILURE_CAUSE_SHUTDOWN_TIMEOUT;
    case FailureCause::kServiceUnreachable: return pb::FAILURE_CAUSE_SERVICE_UNREACHABLE;
    case FailureCause::kUnspecified: break;
  }
  return pb::FAILURE_CAUSE_UNSPECIFIED;
}

FailureCause FromProto(pb::FailureCause cause) {
  switch (cause) {
    case pb::FAILURE_CAUSE_PROCESS_EXITED: return FailureCause::kProcessExited;
    case pb::FAILURE_CAUSE_HEARTBEAT_TIMEOUT: return FailureCause::kHeartbeatTimeout;
    case pb::FAILURE_CAUSE_PREEMPTED: return FailureCause::kPreempted;
    case pb::FAILURE_CAUSE_RESTARTED: return FailureCause::kRestarted;
    case pb::FAILURE_CAUSE_REPORTED_ERROR: return FailureCause::kReportedError;
    case pb::FAILURE_CAUSE_REGISTRATION_TIMEOUT: return FailureCause::kRegistrationTimeout;
    case pb::FAILURE_CAUSE_SHUTDOWN_TIMEOUT: return FailureCause::kShutdownTimeout;
    case pb::FAILURE_CAUSE_SERVICE_UNREACHABLE: return FailureCause::kServiceUnreachable;
    default: break;
  }
  return FailureCause::kUnspecified;
}

pb::JobEvent ToProto(const JobEvent& event) {
  pb::JobEvent out;
  if (const auto* f = std::get_if<TaskFailure>(&event)) {
    auto* tf = out.mutable_task_failure();
    tf->set_task_id(f->task);
    tf->set_cause(ToProto(f->cause));
    tf->set_message(f->message);
  } else if (const auto* p = std::get_if<PreemptionNotice>(&event)) {
    auto* pn = out.mutable_preemption();
    pn->set_task_id(p->task);
    pn->set_notice_unix_ms(absl::ToUnixMillis(p->time));
  }
  return out;
}

#define COHORT_CHECK_TOKEN(ctx)                                          \
  if (absl::Status auth = CheckToken(*(ctx), token_); !auth.ok()) {      \
    return FinishNow((ctx), auth);                                       \
  }

grpc::ServerUnaryReactor* CoordinationRpcService::RegisterTask(grpc::CallbackServerContext* ctx,
                                                               const pb::RegisterTaskRequest* req,
                                                               pb::RegisterTaskResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  auto* reactor = new WaitingReactor(core_);
  RegisterArgs args{req->task_id(), req->incarnation(), req->num_tasks(), req->hostname(),
                    req->pid()};
  OpId op = core_->RegisterTask(args, [this, reactor, resp](absl::Status s) {
    if (s.ok()) {
      resp->set_service_incarnation(core_->service_incarnation());
      resp->set_num_tasks(core_->config().num_tasks);
    }
    reactor->Complete(s);
  });
  reactor->Started(op);
  return reactor;
}

grpc::ServerUnaryReactor* CoordinationRpcService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                            const pb::HeartbeatRequest* req,
                                                            pb::HeartbeatResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  absl::Status s = core_->Heartbeat(req->task_id(), req->incarnation());
  resp->set_service_incarnation(core_->service_incarnation());
  return FinishNow(ctx, s);
}

grpc::ServerWriteReactor<pb::JobEvent>* CoordinationRpcService::WatchJob(
    grpc::CallbackServerContext* ctx, const pb::WatchJobRequest* req) {
  auto* stream = new EventStream<pb::JobEvent>();
  auto sink = stream->sink();
  if (absl::Status auth = CheckToken(*ctx, token_); !auth.ok()) {
    sink->FinishWith(auth);
    return stream;
  }
  absl::StatusOr<OpId> op = core_->Watch(req->task_id(), req->incarnation(),
                                         [sink](const JobEvent& e) { sink->Push(ToProto(e)); });
  if (!op.ok()) {
    sink->FinishWith(op.status());
    return stream;
  }
  stream->set_on_end([core = core_, op = *op] { core->CancelOp(op); });
  return stream;
}

grpc::ServerUnaryReactor* CoordinationRpcService::ReportError(grpc::CallbackServerContext* ctx,
                                                              const pb::ReportErrorRequest* req,
                                                              pb::ReportErrorResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  return FinishNow(ctx, core_->ReportError(req->task_id(), req->incarnation(),
                                           FromProto(req->cause()), req->message()));
}

grpc::ServerUnaryReactor* CoordinationRpcService::ShutdownTask(grpc::CallbackServerContext* ctx,
                                                               const pb::ShutdownTaskRequest* req,
                                                               pb::ShutdownTaskResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  auto* reactor = new WaitingReactor(core_);
  OpId op = core_->ShutdownTask(req->task_id(), req->incarnation(),
                                [reactor](absl::Status s) { reactor->Complete(s); });
  reactor->Started(op);
  return reactor;
}

grpc::ServerUnaryReactor* CoordinationRpcService::InsertKeyValue(
    grpc::CallbackServerContext* ctx, const pb::InsertKeyValueRequest* req,
    pb::InsertKeyValueResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  return FinishNow(ctx, core_->InsertKeyValue(req->task_id(), req->incarnation(), req->kv().key(),
                                              req->kv().value(), req->allow_overwrite()));
}

grpc::ServerUnaryReactor* CoordinationRpcService::GetKeyValue(grpc::CallbackServerContext* ctx,
                                                              const pb::GetKeyValueRequest* req,
                                                              pb::GetKeyValueResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  auto* reactor = new WaitingReactor(core_);
  OpId op = core_->GetKeyValue(req->task_id(), req->incarnation(), req->key(),
                               absl::Milliseconds(req->timeout_ms()),
                               [reactor, resp, key = req->key()](absl::StatusOr<std::string> v) {
                                 if (v.ok()) {
                                   resp->mutable_kv()->set_key(key);
                                   resp->mutable_kv()->set_value(std::move(*v));
                                 }
                                 reactor->Complete(v.status());
                               });
  reactor->Started(op);
  return reactor;
}

grpc::ServerUnaryReactor* CoordinationRpcService::TryGetKeyValue(
    grpc::CallbackServerContext* ctx, const pb::TryGetKeyValueRequest* req,
    pb::TryGetKeyValueResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  absl::StatusOr<std::string> v = core_->TryGetKeyValue(req->task_id(), req->incarnation(), req->key());
  if (v.ok()) {
    resp->mutable_kv()->set_key(req->key());
    resp->mutable_kv()->set_value(std::move(*v));
  }
  return FinishNow(ctx, v.status());
}

grpc::ServerUnaryReactor* CoordinationRpcService::GetKeyValueDir(
    grpc::CallbackServerContext* ctx, const pb::GetKeyValueDirRequest* req,
    pb::GetKeyValueDirResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  auto entries = core_->GetKeyValueDir(req->task_id(), req->incarnation(), req->directory());
  if (entries.ok()) {
    for (auto& [key, value] : *entries) {
      pb::KeyValue* kv = resp->add_kvs();
      kv->set_key(key);
      kv->set_value(std::move(value));
    }
  }
  return FinishNow(ctx, entries.status());
}

grpc::ServerUnaryReactor* CoordinationRpcService::DeleteKeyValue(
    grpc::CallbackServerContext* ctx, const pb::DeleteKeyValueRequest* req,
    pb::DeleteKeyValueResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  return FinishNow(ctx, core_->DeleteKeyValue(req->task_id(), req->incarnation(), req->key()));
}

grpc::ServerUnaryReactor* CoordinationRpcService::IncrementKeyValue(
    grpc::CallbackServerContext* ctx, const pb::IncrementKeyValueRequest* req,
    pb::IncrementKeyValueResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  absl::StatusOr<int64_t> v =
      core_->IncrementKeyValue(req->task_id(), req->incarnation(), req->key(), req->increment());
  if (v.ok()) resp->set_value(*v);
  return FinishNow(ctx, v.status());
}

grpc::ServerUnaryReactor* CoordinationRpcService::Barrier(grpc::CallbackServerContext* ctx,
                                                          const pb::BarrierRequest* req,
                                                          pb::BarrierResponse* resp) {
  COHORT_CHECK_TOKEN(ctx);
  auto* reactor = new WaitingReactor(core_);
  BarrierArgs args{req->task_id(),
                   req->incarnation(),
                   req->barrier_id(),
                   req->counter(),
                   absl::Milliseconds(req->timeout_ms()),
                   {req->task_ids().begin(), req->task_ids().end()}};
  resp->set_counter(req->counter());
  OpId op = core_->Barrier(args, [reactor](absl::Status s) { reactor->Complete(s); });
  reactor->Started(op);
  return reactor;
}

grpc::ServerUnaryReactor* CoordinationRpcService::CancelBarrier(
    grpc::CallbackServerContext* ctx, const pb::CancelBarrierRequest* req,
    pb::CancelBarrierResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  return FinishNow(ctx, core_->CancelBarrier(req->task_id(), req->incarnation(), req->barrier_id(),
                                             req->counter()));
}

grpc::ServerUnaryReactor* CoordinationRpcService::ReportPreemption(
    grpc::CallbackServerContext* ctx, const pb::ReportPreemptionRequest* req,
    pb::ReportPreemptionResponse*) {
  COHORT_CHECK_TOKEN(ctx);
  return FinishNow(ctx, core_->ReportPreemption(req->task_id(), req->incarnation()));
}

#undef COHORT_CHECK_TOKEN

}  // namespace cohort::coordination
