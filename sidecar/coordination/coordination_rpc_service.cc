#include "sidecar/coordination/coordination_rpc_service.h"

#include <atomic>
#include <deque>
#include <memory>

#include "absl/container/flat_hash_set.h"
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


// One agent's Session stream. Reads requests one after another and hands each to the core; each
// completion queues a response, written one at a time. Completions hold a shared_ptr to the
// Outbox, so one that races with the end of the stream is dropped instead of touching a freed
// reactor. When the client stops sending (or goes away) the calls still waiting are cancelled,
// and the stream finishes once every queued response is written.
class SessionReactor final
    : public grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse> {
 public:
  struct Reply {
    pb::SessionResponse resp;
    size_t charged = 0;  // Bytes held in the ReplyBudget until it is sent.
  };
  struct Outbox {
    explicit Outbox(std::shared_ptr<ReplyBudget> b) : budget(std::move(b)) {}
    const std::shared_ptr<ReplyBudget> budget;
    absl::Mutex mu;
    SessionReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    std::deque<Reply> queue ABSL_GUARDED_BY(mu);
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool reads_done ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_set<OpId> ops ABSL_GUARDED_BY(mu);  // Calls waiting in the core.

    void Send(pb::SessionResponse resp, size_t charged) {
      const pb::SessionResponse* next = nullptr;
      SessionReactor* r = nullptr;
      bool dropped = false;
      {
        absl::MutexLock lock(&mu);
        dropped = reactor == nullptr || finished;
        if (!dropped) {
          queue.push_back(Reply{std::move(resp), charged});
          if (!writing) {
            writing = true;
            next = &queue.front().resp;  // std::deque keeps addresses stable on push_back.
            r = reactor;
          }
        }
      }
      if (dropped) {
        if (charged > 0) budget->Release(charged);
        return;
      }
      if (next != nullptr) r->StartWrite(next);
    }
    void Done(uint64_t call_id, OpId op, const absl::Status& status, pb::SessionResponse resp,
              size_t charged = 0) {
      {
        absl::MutexLock lock(&mu);
        if (op != 0) ops.erase(op);
      }
      resp.set_call_id(call_id);
      if (!status.ok()) {
        resp.set_code(static_cast<int>(status.code()));
        resp.set_message(std::string(status.message()));
      }
      Send(std::move(resp), charged);
    }
  };

  SessionReactor(CoordinationService* core, std::shared_ptr<ReplyBudget> budget,
                 const absl::Status& auth)
      : core_(core), outbox_(std::make_shared<Outbox>(std::move(budget))) {
    {
      absl::MutexLock lock(&outbox_->mu);
      outbox_->reactor = this;
    }
    if (!auth.ok()) {
      {
        absl::MutexLock lock(&outbox_->mu);
        outbox_->finished = true;
      }
      Finish(ToGrpcStatus(auth));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      EndOfRequests();
      return;
    }
    Dispatch(request_);
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    const pb::SessionResponse* next = nullptr;
    bool finish = false;
    size_t released = 0;
    {
      absl::MutexLock lock(&outbox_->mu);
      released += outbox_->queue.front().charged;
      outbox_->queue.pop_front();
      if (ok && !outbox_->queue.empty()) {
        next = &outbox_->queue.front().resp;
      } else {
        outbox_->writing = false;
        if (!ok) {
          for (const Reply& r : outbox_->queue) released += r.charged;
          outbox_->queue.clear();
        }
        finish = (!ok || outbox_->reads_done) && !outbox_->finished;
        if (finish) outbox_->finished = true;
      }
    }
    if (released > 0) outbox_->budget->Release(released);
    if (next != nullptr) {
      StartWrite(next);
    } else if (finish) {
      CancelWaitingCalls();
      Finish(grpc::Status::OK);
    }
  }

  void OnCancel() override { EndOfRequests(); }

  void OnDone() override {
    {
      absl::MutexLock lock(&outbox_->mu);
      outbox_->reactor = nullptr;
    }
    CancelWaitingCalls();
    delete this;
  }

 private:
  // The client will send nothing more: cancel what still waits, finish once the queue drains.
  void EndOfRequests() {
    bool finish = false;
    {
      absl::MutexLock lock(&outbox_->mu);
      outbox_->reads_done = true;
      if (!outbox_->writing && !outbox_->finished) {
        outbox_->finished = true;
        finish = true;
      }
    }
    CancelWaitingCalls();
    if (finish) Finish(grpc::Status::OK);
  }

  void CancelWaitingCalls() {
    std::vector<OpId> ops;
    {
      absl::MutexLock lock(&outbox_->mu);
      ops.assign(outbox_->ops.begin(), outbox_->ops.end());
      outbox_->ops.clear();
    }
    for (OpId op : ops) core_->CancelOp(op);
  }

  // Records a waiting call so that the end of the stream can cancel it. A call that already
  // completed is harmless to cancel later: the core ignores unknown ops.
  void Track(OpId op) {
    if (op == 0) return;
    absl::MutexLock lock(&outbox_->mu);
    outbox_->ops.insert(op);
  }

  void Dispatch(const pb::SessionRequest& req) {
    const uint64_t id = req.call_id();
    std::shared_ptr<Outbox> out = outbox_;
    pb::SessionResponse resp;
    switch (req.call_case()) {
      case pb::SessionRequest::kInsertKeyValue: {
        const auto& r = req.insert_key_value();
        out->Done(id, 0,
                  core_->InsertKeyValue(r.task_id(), r.incarnation(), r.kv().key(), r.kv().value(),
                                        r.allow_overwrite()),
                  std::move(resp));
        return;
      }
      case pb::SessionRequest::kGetKeyValue: {
        const auto& r = req.get_key_value();
        auto op = std::make_shared<std::atomic<OpId>>(0);
        OpId started = core_->GetKeyValue(
            r.task_id(), r.incarnation(), r.key(), absl::Milliseconds(r.timeout_ms()),
            [out, id, op, key = r.key()](absl::StatusOr<std::string> v) {
              pb::SessionResponse resp;
              if (v.ok()) {
                resp.mutable_get_key_value()->mutable_kv()->set_key(key);
                resp.mutable_get_key_value()->mutable_kv()->set_value(std::move(*v));
              }
              out->Done(id, op->load(), v.status(), std::move(resp));
            });
        op->store(started);
        Track(started);
        return;
      }
      case pb::SessionRequest::kTryGetKeyValue: {
        const auto& r = req.try_get_key_value();
        absl::StatusOr<std::string> v = core_->TryGetKeyValue(r.task_id(), r.incarnation(), r.key());
        if (v.ok()) {
          resp.mutable_get_key_value()->mutable_kv()->set_key(r.key());
          resp.mutable_get_key_value()->mutable_kv()->set_value(std::move(*v));
        }
        out->Done(id, 0, v.status(), std::move(resp));
        return;
      }
      case pb::SessionRequest::kGetKeyValueDir: {
        // Directory replies can be large (all N keys): built under the reply budget.
        out->budget->Admit([core = core_, out, id, r = req.get_key_value_dir()] {
          pb::SessionResponse resp;
          auto entries = core->GetKeyValueDir(r.task_id(), r.incarnation(), r.directory());
          if (entries.ok()) {
            auto* kvs = resp.mutable_get_key_value_dir()->mutable_kvs();
            kvs->Reserve(static_cast<int>(entries->size()));
            for (auto& [key, value] : *entries) {
              pb::KeyValue* kv = kvs->Add();
              kv->set_key(std::move(key));
              kv->set_value(std::move(value));
            }
          }
          size_t bytes = resp.ByteSizeLong();
          out->budget->Charge(bytes);
          out->Done(id, 0, entries.status(), std::move(resp), bytes);
        });
        return;
      }
      case pb::SessionRequest::kDeleteKeyValue: {
        const auto& r = req.delete_key_value();
        out->Done(id, 0, core_->DeleteKeyValue(r.task_id(), r.incarnation(), r.key()),
                  std::move(resp));
        return;
      }
      case pb::SessionRequest::kIncrementKeyValue: {
        const auto& r = req.increment_key_value();
        absl::StatusOr<int64_t> v =
            core_->IncrementKeyValue(r.task_id(), r.incarnation(), r.key(), r.increment());
        if (v.ok()) resp.mutable_increment_key_value()->set_value(*v);
        out->Done(id, 0, v.status(), std::move(resp));
        return;
      }
      case pb::SessionRequest::kBarrier: {
        const auto& r = req.barrier();
        BarrierArgs args{r.task_id(),
                         r.incarnation(),
                         r.barrier_id(),
                         r.counter(),
                         absl::Milliseconds(r.timeout_ms()),
                         {r.task_ids().begin(), r.task_ids().end()}};
        auto op = std::make_shared<std::atomic<OpId>>(0);
        int64_t counter = r.counter();
        OpId started = core_->Barrier(args, [out, id, op, counter](absl::Status s) {
          pb::SessionResponse resp;
          resp.mutable_barrier()->set_counter(counter);
          out->Done(id, op->load(), s, std::move(resp));
        });
        op->store(started);
        Track(started);
        return;
      }
      case pb::SessionRequest::kCancelBarrier: {
        const auto& r = req.cancel_barrier();
        out->Done(id, 0,
                  core_->CancelBarrier(r.task_id(), r.incarnation(), r.barrier_id(), r.counter()),
                  std::move(resp));
        return;
      }
      case pb::SessionRequest::CALL_NOT_SET:
        break;
    }
    out->Done(id, 0,
              absl::InvalidArgumentError("session request carries no call; set one of its "
                                         "'call' fields"),
              std::move(resp));
  }

  CoordinationService* const core_;
  std::shared_ptr<Outbox> outbox_;
  pb::SessionRequest request_;
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

grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* CoordinationRpcService::Session(
    grpc::CallbackServerContext* ctx) {
  return new SessionReactor(core_, reply_budget_, CheckToken(*ctx, token_));
}

#undef COHORT_CHECK_TOKEN

}  // namespace cohort::coordination
