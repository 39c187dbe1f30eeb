#include "coordination/server/session_reactor.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "common/ordered_writer.h"
#include "coordination/wire/session_framing.h"

namespace cohort::coordination {
namespace {

class SessionReactor final
    : public grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse> {
 public:
  SessionReactor(CoordinationRpcHandler* handler, const absl::Status& auth)
      : handler_(handler), outbox_(std::make_shared<Outbox>()) {
    {
      absl::MutexLock lock(&outbox_->mu);
      outbox_->reactor = this;
      outbox_->finished = !auth.ok();
    }
    if (!auth.ok()) {
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
    // Released after unlocking: a release may run waiting directory reads, which take the lock.
    ReplyBudget::Charge sent;
    std::deque<Reply> dropped;
    const Reply* next = nullptr;
    bool finish = false;
    {
      absl::MutexLock lock(&outbox_->mu);
      if (ok) {
        sent = std::move(outbox_->writer.in_flight()->charge);
        next = outbox_->writer.WriteDone();
      } else {
        dropped = outbox_->writer.Clear();
      }
      if (next == nullptr) {
        finish = (!ok || outbox_->reads_done) && !outbox_->finished;
        if (finish) outbox_->finished = true;
      }
    }
    if (next != nullptr) {
      StartWrite(&next->resp);
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
  struct Reply {
    pb::SessionResponse resp;
    ReplyBudget::Charge charge;  // Bytes held in the reply budget until sent.
  };
  // A call in flight. `op` and `completed` are guarded by the outbox's mutex, so a call that
  // completes before its OpId is known is never tracked.
  struct CallState {
    OpId op = 0;
    bool completed = false;
  };
  template <typename Resp>
  struct Call : CallState {
    Resp resp;
  };

  // What completions share with the reactor; they may outlive it.
  struct Outbox {
    absl::Mutex mu;
    SessionReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    OrderedWriter<Reply> writer ABSL_GUARDED_BY(mu);
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool reads_done ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_set<OpId> waiting ABSL_GUARDED_BY(mu);  // Calls waiting in the service.

    void Complete(CallState* call, Reply reply) {
      const Reply* next = nullptr;
      SessionReactor* reactor_now = nullptr;
      {
        absl::MutexLock lock(&mu);
        call->completed = true;
        if (call->op != 0) waiting.erase(call->op);
        if (reactor != nullptr && !finished) {
          next = writer.Push(std::move(reply));
          reactor_now = reactor;
        }
      }
      // A dropped reply is destroyed here, outside the lock, releasing its charge.
      if (next != nullptr) reactor_now->StartWrite(&next->resp);
    }
  };

  static Reply MakeReply(uint64_t call_id, const absl::Status& status) {
    Reply reply;
    reply.resp.set_call_id(call_id);
    if (!status.ok()) {
      reply.resp.set_code(static_cast<int>(status.code()));
      reply.resp.set_message(std::string(status.message()));
    }
    return reply;
  }

  // Records a call that now waits in the service, so that the end of the stream can cancel it.
  void Track(CallState* call, OpId op) {
    if (op == 0) return;
    absl::MutexLock lock(&outbox_->mu);
    if (call->completed) return;
    call->op = op;
    outbox_->waiting.insert(op);
  }

  template <typename Req, typename Resp>
  void Start(uint64_t id, HandlerMethod<Req, Resp> method, const Req& req) {
    auto call = std::make_shared<Call<Resp>>();
    OpId op = (handler_->*method)(&req, &call->resp, [out = outbox_, call, id](absl::Status s) {
      Reply reply = MakeReply(id, s);
      PutResult(&reply.resp, std::move(call->resp));
      out->Complete(call.get(), std::move(reply));
    });
    Track(call.get(), op);
  }

  void StartDirectoryRead(uint64_t id, const pb::GetKeyValueDirRequest& req) {
    auto call = std::make_shared<Call<pb::GetKeyValueDirResponse>>();
    handler_->GetKeyValueDirAsync(
        &req, &call->resp, [out = outbox_, call, id](absl::Status s, ReplyBudget::Charge charge) {
          Reply reply = MakeReply(id, s);
          PutResult(&reply.resp, std::move(call->resp));
          reply.charge = std::move(charge);
          out->Complete(call.get(), std::move(reply));
        });
  }

  void Dispatch(const pb::SessionRequest& req) {
    using H = CoordinationRpcHandler;
    const uint64_t id = req.call_id();
    switch (req.call_case()) {
      case pb::SessionRequest::kInsertKeyValue:
        return Start(id, &H::InsertKeyValueAsync, req.insert_key_value());
      case pb::SessionRequest::kGetKeyValue:
        return Start(id, &H::GetKeyValueAsync, req.get_key_value());
      case pb::SessionRequest::kTryGetKeyValue:
        return Start(id, &H::TryGetKeyValueAsync, req.try_get_key_value());
      case pb::SessionRequest::kGetKeyValueDir:
        return StartDirectoryRead(id, req.get_key_value_dir());
      case pb::SessionRequest::kDeleteKeyValue:
        return Start(id, &H::DeleteKeyValueAsync, req.delete_key_value());
      case pb::SessionRequest::kIncrementKeyValue:
        return Start(id, &H::IncrementKeyValueAsync, req.increment_key_value());
      case pb::SessionRequest::kBarrier:
        return Start(id, &H::BarrierAsync, req.barrier());
      case pb::SessionRequest::kCancelBarrier:
        return Start(id, &H::CancelBarrierAsync, req.cancel_barrier());
      case pb::SessionRequest::CALL_NOT_SET:
        break;
    }
    CallState unknown;
    outbox_->Complete(&unknown, MakeReply(id, absl::InvalidArgumentError(
                                                  "session request carries no call; set one of "
                                                  "its 'call' fields")));
  }

  // The client will send nothing more: cancel what still waits, finish once the queue drains.
  void EndOfRequests() {
    bool finish = false;
    {
      absl::MutexLock lock(&outbox_->mu);
      outbox_->reads_done = true;
      if (!outbox_->writer.writing() && !outbox_->finished) {
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
      ops.assign(outbox_->waiting.begin(), outbox_->waiting.end());
      outbox_->waiting.clear();
    }
    for (OpId op : ops) handler_->CancelOp(op);
  }

  CoordinationRpcHandler* const handler_;
  const std::shared_ptr<Outbox> outbox_;
  pb::SessionRequest request_;
};

}  // namespace

grpc::ServerBidiReactor<pb::SessionRequest, pb::SessionResponse>* NewSessionReactor(
    CoordinationRpcHandler* handler, const absl::Status& auth) {
  return new SessionReactor(handler, auth);
}

}  // namespace cohort::coordination
