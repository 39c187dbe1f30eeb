#include "coordination/server/jax_compat_service.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/arena.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/message_allocator.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/core/key_value_store.h"
#include "coordination/server/waiting_call_reactor.h"
#include "xla_compat/error_payloads.pb.h"
#include "xla_compat/tsl_coordination.grpc.pb.h"
#include "xla_compat/xla_coordination.grpc.pb.h"

namespace cohort::coordination {
namespace {

namespace xpb = ::xla::coordination;
namespace tpb = ::tensorflow;

// Type URLs under which XLA's clients look for payloads (still "tensorflow." in jaxlib 0.12).
constexpr absl::string_view kCoordinationErrorUrl =
    "type.googleapis.com/tensorflow.CoordinationServiceError";
constexpr absl::string_view kBarrierErrorUrl = "type.googleapis.com/tensorflow.BarrierError";
constexpr absl::string_view kJaxJobName = "jax_worker";

// Payloads to attach to an error: the serialized CoordinationServiceError (always; its presence
// is what tells the client the service answered) and, for a barrier, its BarrierError.
struct ErrorPayloads {
  std::string coordination_error;
  std::string barrier_error;
};

grpc::Status WithPayloads(const absl::Status& status, const ErrorPayloads& payloads) {
  if (status.ok()) return grpc::Status::OK;
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  (*container.mutable_payloads())[std::string(kCoordinationErrorUrl)] = payloads.coordination_error;
  if (!payloads.barrier_error.empty()) {
    (*container.mutable_payloads())[std::string(kBarrierErrorUrl)] = payloads.barrier_error;
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      container.SerializeAsString());
}

ErrorPayloads XlaPayloads(TaskId source, bool reported = false) {
  xpb::CoordinationServiceError e;
  e.set_is_reported_error(reported);
  if (source >= 0) e.set_source_task_id(source);
  return ErrorPayloads{e.SerializeAsString(), ""};
}

tpb::CoordinatedTask TslTask(TaskId task) {
  tpb::CoordinatedTask t;
  t.set_job_name(std::string(kJaxJobName));
  t.set_task_id(task);
  return t;
}

ErrorPayloads TslPayloads(TaskId source, bool reported = false) {
  tpb::CoordinationServiceError e;
  e.set_is_reported_error(reported);
  if (source >= 0) *e.mutable_source_task() = TslTask(source);
  return ErrorPayloads{e.SerializeAsString(), ""};
}

template <typename BarrierErrorProto>
std::string BarrierErrorBytes(const std::string& id, int64_t counter) {
  BarrierErrorProto e;
  e.set_barrier_id(id);
  e.set_counter(counter);
  return e.SerializeAsString();
}

// Request and response of one call in one protobuf arena, freed at once when gRPC is done with
// them: a directory reply of a 1,024-task rendezvous holds 1,024 entries, which would otherwise be
// 3,072 separate allocations and frees per call.
template <typename Request, typename Response>
class ArenaMessageAllocator final : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override { return new Holder(); }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() {
      this->set_request(google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    google::protobuf::Arena arena_;
  };
};

// PollForError: one long unary call per process, held open for its whole run; its event stream.
// The service ends it with the job's failure; the client ends it (CANCELLED) after its
// ShutdownTask, or by dying, which is the process's death when it comes first.
//
// References: gRPC's (until OnDone), the starter's (until the watch's OpId is known) and the
// service's event callback's (until the service drops the callback), so that a callback copied
// out of the service just before the watch ended can still run safely.
class PollReactor final : public grpc::ServerUnaryReactor {
 public:
  using MakeStatus = std::function<grpc::Status(const TaskFailure&)>;
  PollReactor(std::shared_ptr<JaxBridge> bridge, absl::string_view protocol, MakeStatus make_status)
      : bridge_(std::move(bridge)), protocol_(protocol), make_status_(std::move(make_status)) {}

  // The event callback to hand to CoordinationService::Watch; it holds a reference.
  CoordinationService::EventCallback Callback() {
    refs_.fetch_add(1);
    std::shared_ptr<void> hold(nullptr, [this](void*) { Unref(); });
    return [this, hold](const JobEvent& event) {
      if (const auto* failure = std::get_if<TaskFailure>(&event)) {
        End(make_status_(*failure), /*by_service=*/true);
      } else if (const auto* notice = std::get_if<PreemptionNotice>(&event)) {
        bridge_->PublishPreemptionNotice(*notice);
      }
    };
  }

  void Started(absl::StatusOr<OpId> op, grpc::Status refused) {
    if (!op.ok()) {
      End(refused, /*by_service=*/false);
      Unref();
      return;
    }
    bool end_watch = false, cancel = false;
    {
      absl::MutexLock lock(&mu_);
      op_ = *op;
      end_watch = finished_;
      cancel = cancelled_ && !finished_;
    }
    if (end_watch) bridge_->core().EndWatch(*op);
    if (cancel) {
      bridge_->core().CancelOp(*op);
      End(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"), false);
    }
    Unref();
  }

  void OnCancel() override {
    OpId op = 0;
    bool finished = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      op = op_;
      finished = finished_;
    }
    if (finished) return;
    // Before ShutdownTask, this is the process's death (the service fails the job); after it,
    // the normal end of the poll.
    if (op != 0) {
      bridge_->core().CancelOp(op);
      End(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"), false);
    }
  }
  void OnDone() override { Unref(); }

 private:
  void End(grpc::Status status, bool by_service) {
    OpId op = 0;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      op = op_;
    }
    if (by_service && op != 0) bridge_->core().EndWatch(op);
    bridge_->Count(protocol_, "PollForError", static_cast<absl::StatusCode>(status.error_code()));
    Finish(std::move(status));
  }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  const std::shared_ptr<JaxBridge> bridge_;
  const absl::string_view protocol_;
  const MakeStatus make_status_;
  std::atomic<int> refs_{2};
  absl::Mutex mu_;
  OpId op_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Runs one call into the service on a WaitingCallReactor: `start(done)` returns the OpId of a
// call that waits (0 otherwise) and calls done(status) exactly once; the status goes out with
// `payloads` when it is an error.
template <typename Start>
grpc::ServerUnaryReactor* Serve(const std::shared_ptr<JaxBridge>& bridge, absl::string_view protocol,
                                absl::string_view method, ErrorPayloads payloads, Start start) {
  auto* reactor = new WaitingCallReactor(&bridge->core());
  reactor->Started(start([reactor, bridge, protocol, method, payloads = std::move(payloads),
                          started = absl::Now()](absl::Status s) {
    bridge->Count(protocol, method, s.code(), absl::Now() - started);
    reactor->Complete(WithPayloads(s, payloads));
  }));
  return reactor;
}

// A directory read, built only when the reply budget has room (as on every transport: a
// 1,024-task rendezvous reads 1,024 x 1,024 entries), straight from the store into the reply;
// `add(key, value)` appends one entry to it, `size(status)` finishes it and gives its size.
template <typename Add, typename Size>
grpc::ServerUnaryReactor* ServeDirectory(const std::shared_ptr<JaxBridge>& bridge, absl::string_view protocol,
                                         ErrorPayloads payloads, TaskId task, Incarnation incarnation,
                                         std::string directory, Add add, Size size) {
  auto* reactor = new WaitingCallReactor(&bridge->core());
  bridge->reply_budget()->Admit([reactor, bridge, protocol, payloads = std::move(payloads), task, incarnation,
                                 directory = std::move(directory), add, size]() mutable {
    absl::Status s = bridge->core().VisitKeyValueDir(task, incarnation, directory, add);
    bridge->Count(protocol, "GetKeyValueDir", s.code());
    reactor->Complete(WithPayloads(s, payloads), bridge->reply_budget()->Take(size(s)));
  });
  reactor->Started(0);
  return reactor;
}

// A call answered at once.
grpc::ServerUnaryReactor* Answer(const std::shared_ptr<JaxBridge>& bridge,
                                 absl::string_view protocol, absl::string_view method,
                                 const ErrorPayloads& payloads, grpc::CallbackServerContext* ctx,
                                 const absl::Status& status) {
  bridge->Count(protocol, method, status.code());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(WithPayloads(status, payloads));
  return reactor;
}

absl::Status Unsupported(absl::string_view method) {
  return absl::UnimplementedError(absl::StrCat(
      method, " is not served by Cohort's JAX coordination port (jax.distributed does not call it "
              "in ", kSupportedJaxlibVersions, "); see docs/jax.md"));
}


// ---------------------------------------------------------------------------------------------
// xla.coordination.CoordinationService (jaxlib 0.10+).

class XlaService final : public xpb::CoordinationService::CallbackService {
 public:
  explicit XlaService(std::shared_ptr<JaxBridge> bridge) : bridge_(std::move(bridge)) {
    SetMessageAllocatorFor_GetKeyValueDir(&dir_allocator_);
  }

  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const xpb::RegisterTaskRequest* req,
                                         xpb::RegisterTaskResponse* resp) override {
    TaskId task = req->source_task_id();
    resp->set_service_incarnation(bridge_->core().service_incarnation());
    return Serve(bridge_, kProto, "RegisterTask", XlaPayloads(task), [&](auto done) {
      return bridge_->Register(task, req->incarnation(), kProto, ctx->peer(), done);
    });
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const xpb::HeartbeatRequest* req,
                                      xpb::HeartbeatResponse* resp) override {
    resp->set_service_incarnation(bridge_->core().service_incarnation());
    Incarnation incarnation =
        req->incarnation() != 0 ? req->incarnation() : req->incarnations().task_incarnation();
    return Answer(bridge_, kProto, "Heartbeat", XlaPayloads(req->source_task_id()), ctx,
                  bridge_->core().Heartbeat(req->source_task_id(), incarnation));
  }

  grpc::ServerUnaryReactor* PollForError(grpc::CallbackServerContext* ctx,
                                         const xpb::PollForErrorRequest* req,
                                         xpb::PollForErrorResponse*) override {
    TaskId task = req->source_task_id();
    Incarnation incarnation = IncarnationFor(task, req->incarnations());
    auto* reactor = new PollReactor(bridge_, kProto, [](const TaskFailure& f) {
      return WithPayloads(absl::Status(FailureCode(f), FailureMessage(f)),
                          XlaPayloads(f.task, f.cause == FailureCause::kReportedError));
    });
    absl::StatusOr<OpId> op = bridge_->core().Watch(task, incarnation, reactor->Callback());
    reactor->Started(op, WithPayloads(op.status(), XlaPayloads(task)));
    return reactor;
  }

  grpc::ServerUnaryReactor* ShutdownTask(grpc::CallbackServerContext* ctx,
                                         const xpb::ShutdownTaskRequest* req,
                                         xpb::ShutdownTaskResponse*) override {
    TaskId task = req->source_task_id();
    Incarnation incarnation = IncarnationFor(task, req->incarnations());
    return Serve(bridge_, kProto, "ShutdownTask", XlaPayloads(task), [&](auto done) {
      return bridge_->core().ShutdownTask(task, incarnation, done);
    });
  }

  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const xpb::InsertKeyValueRequest* req,
                                           xpb::InsertKeyValueResponse*) override {
    const auto [task, incarnation] = Caller(req->incarnations());
    absl::Status s = bridge_->core().InsertKeyValue(task, incarnation, req->kv().key(),
                                                    req->kv().value(), req->allow_overwrite());
    if (s.ok()) bridge_->AfterInsert(task, req->kv().key());
    return Answer(bridge_, kProto, "InsertKeyValue", XlaPayloads(task), ctx, s);
  }

  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const xpb::GetKeyValueRequest* req,
                                        xpb::GetKeyValueResponse* resp) override {
    // Plain variables: the lambda below captures them (clang 14, which the fuzz build uses, cannot capture structured bindings).
    const std::pair<TaskId, Incarnation> caller = Caller(req->incarnations());
    const TaskId task = caller.first;
    const Incarnation incarnation = caller.second;
    // No timeout: JAX's blocking get waits until the key is set, the job fails or it cancels.
    return Serve(bridge_, kProto, "GetKeyValue", XlaPayloads(task), [&](auto done) {
      return bridge_->core().GetKeyValue(
          task, incarnation, req->key(), absl::InfiniteDuration(),
          [resp, key = req->key(), done](absl::StatusOr<std::string> v) {
            if (v.ok()) {
              resp->mutable_kv()->set_key(key);
              resp->mutable_kv()->set_value(std::move(*v));
            }
            done(v.status());
          });
    });
  }

  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const xpb::TryGetKeyValueRequest* req,
                                           xpb::TryGetKeyValueResponse* resp) override {
    const auto [task, incarnation] = Caller(req->incarnations());
    absl::StatusOr<std::string> v = bridge_->core().TryGetKeyValue(task, incarnation, req->key());
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(std::move(*v));
    }
    return Answer(bridge_, kProto, "TryGetKeyValue", XlaPayloads(task), ctx, v.status());
  }

  grpc::ServerUnaryReactor* IncrementKeyValue(grpc::CallbackServerContext* ctx,
                                              const xpb::IncrementKeyValueRequest* req,
                                              xpb::IncrementKeyValueResponse* resp) override {
    const auto [task, incarnation] = Caller(req->incarnations());
    absl::StatusOr<int64_t> v =
        bridge_->core().IncrementKeyValue(task, incarnation, req->key(), req->increment());
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(absl::StrCat(*v));  // Decimal text, as XLA's client parses it.
    }
    return Answer(bridge_, kProto, "IncrementKeyValue", XlaPayloads(task), ctx, v.status());
  }

  grpc::ServerUnaryReactor* GetKeyValueDir(grpc::CallbackServerContext* ctx,
                                           const xpb::GetKeyValueDirRequest* req,
                                           xpb::GetKeyValueDirResponse* resp) override {
    const auto [task, incarnation] = Caller(req->incarnations());
    return ServeDirectory(
        bridge_, kProto, XlaPayloads(task), task, incarnation, req->directory_key(),
        [resp](const std::string& key, const std::string& value) {
          xpb::KeyValueEntry* kv = resp->add_kv();
          kv->set_key(key);
          kv->set_value(value);
        },
        [resp, dir = req->directory_key()](const absl::Status& s) {
          if (s.ok()) resp->set_directory_key(dir);
          return resp->ByteSizeLong();
        });
  }

  grpc::ServerUnaryReactor* DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                           const xpb::DeleteKeyValueRequest* req,
                                           xpb::DeleteKeyValueResponse*) override {
    const auto [task, incarnation] = Caller(req->incarnations());
    // The key and everything under it, whatever is_directory says (XLA's client always sets it).
    return Answer(bridge_, kProto, "DeleteKeyValue", XlaPayloads(task), ctx,
                  bridge_->core().DeleteKeyValue(task, incarnation, req->key()));
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const xpb::BarrierRequest* req,
                                    xpb::BarrierResponse* resp) override {
    BarrierArgs args;
    args.task = req->source_task_id();
    args.incarnation = IncarnationFor(args.task, req->incarnations());
    args.id = req->barrier_id();
    args.counter = req->counter();
    args.timeout = absl::Milliseconds(req->barrier_timeout_in_ms());
    args.participants.assign(req->task_ids().begin(), req->task_ids().end());
    resp->set_counter(req->counter());
    ErrorPayloads payloads = XlaPayloads(args.task);
    payloads.barrier_error = BarrierErrorBytes<xpb::BarrierError>(args.id, args.counter);
    return Serve(bridge_, kProto, "Barrier", std::move(payloads),
                 [&](auto done) { return bridge_->core().Barrier(args, done); });
  }

  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const xpb::CancelBarrierRequest* req,
                                          xpb::CancelBarrierResponse*) override {
    TaskId task = req->source_task_id();
    return Answer(bridge_, kProto, "CancelBarrier", XlaPayloads(task), ctx,
                  bridge_->core().CancelBarrier(task, IncarnationFor(task, req->incarnations()),
                                                req->barrier_id(), req->counter()));
  }

  grpc::ServerUnaryReactor* GetAliveTasks(grpc::CallbackServerContext* ctx,
                                          const xpb::GetAliveTasksRequest* req,
                                          xpb::GetAliveTasksResponse* resp) override {
    auto alive = bridge_->AliveTasks({req->task_ids().begin(), req->task_ids().end()});
    if (alive.ok()) {
      for (const auto& [task, incarnation] : *alive) {
        resp->add_alive_task_ids(task);
        resp->add_incarnations(incarnation);
      }
    }
    return Answer(bridge_, kProto, "GetAliveTasks", XlaPayloads(req->requesting_task_id()), ctx,
                  alive.status());
  }

  // A long poll: at once when the caller's version is not the current one, else when a task's
  // state changes (docs/jax.md, "WatchTasks").
  grpc::ServerUnaryReactor* WatchTasks(grpc::CallbackServerContext* ctx,
                                       const xpb::WatchTasksRequest* req,
                                       xpb::WatchTasksResponse* resp) override {
    const TaskId caller = Caller(req->incarnations()).first;
    return Serve(bridge_, kProto, "WatchTasks", XlaPayloads(caller), [&](auto done) {
      return bridge_->core().WatchTaskStates(
          req->version_number(), [resp, done](absl::StatusOr<CoordinationService::TaskStates> states) {
            if (states.ok()) {
              for (const WatchedTask& w : WatchedTasks(*states)) {
                xpb::TaskInfo* info = resp->add_task_state();
                info->set_task_id(w.task);
                info->set_state(w.state == WatchedTask::State::kConnected ? xpb::TASK_STATE_CONNECTED
                                : w.state == WatchedTask::State::kError   ? xpb::TASK_STATE_ERROR
                                                                          : xpb::TASK_STATE_DISCONNECTED);
                info->set_incarnation(w.incarnation);
                if (!w.error.ok()) {
                  info->set_error_code(static_cast<int32_t>(w.error.code()));
                  info->set_error_message(std::string(w.error.message()));
                  info->mutable_error_payload()->set_source_task_id(w.task);
                  info->mutable_error_payload()->set_is_reported_error(w.reported);
                }
              }
              resp->set_version_number(states->version);
            }
            done(states.status());
          });
    });
  }

  grpc::ServerUnaryReactor* ReportErrorToService(grpc::CallbackServerContext* ctx,
                                                 const xpb::ReportErrorToServiceRequest* req,
                                                 xpb::ReportErrorToServiceResponse*) override {
    TaskId task = req->source_task_id();
    return Answer(bridge_, kProto, "ReportErrorToService", XlaPayloads(task), ctx,
                  bridge_->core().ReportError(
                      task, IncarnationFor(task, req->incarnations()), FailureCause::kReportedError,
                      absl::StrCat("JAX reported error ", req->error_code(), ": ",
                                   req->error_message())));
  }

 private:
  static constexpr absl::string_view kProto = kXlaCoordinationProtocol;
  ArenaMessageAllocator<xpb::GetKeyValueDirRequest, xpb::GetKeyValueDirResponse> dir_allocator_;

  Incarnation IncarnationFor(TaskId task, const xpb::Incarnations& inc) const {
    if (inc.task_incarnation() != 0) return inc.task_incarnation();
    return bridge_->IncarnationOf(task);
  }
  // jaxlib leaves incarnations.task_id 0 on key-value calls: the incarnation names the caller.
  std::pair<TaskId, Incarnation> Caller(const xpb::Incarnations& inc) const {
    TaskId task = bridge_->TaskOf(inc.task_incarnation());
    return {task, task == kUnidentifiedTask ? 0 : inc.task_incarnation()};
  }

  const std::shared_ptr<JaxBridge> bridge_;
};

// ---------------------------------------------------------------------------------------------
// tensorflow.CoordinationService (jaxlib 0.8 and 0.9). Key-value calls name no caller.

class TslService final : public tpb::CoordinationService::CallbackService {
 public:
  explicit TslService(std::shared_ptr<JaxBridge> bridge) : bridge_(std::move(bridge)) {
    SetMessageAllocatorFor_GetKeyValueDir(&dir_allocator_);
  }

  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const tpb::RegisterTaskRequest* req,
                                         tpb::RegisterTaskResponse* resp) override {
    TaskId task = req->source_task().task_id();
    resp->set_leader_incarnation(bridge_->core().service_incarnation());
    return Serve(bridge_, kProto, "RegisterTask", TslPayloads(task), [&](auto done) {
      return bridge_->Register(task, req->incarnation(), kProto, ctx->peer(), done);
    });
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const tpb::HeartbeatRequest* req,
                                      tpb::HeartbeatResponse* resp) override {
    resp->set_leader_incarnation(bridge_->core().service_incarnation());
    TaskId task = req->source_task().task_id();
    return Answer(bridge_, kProto, "Heartbeat", TslPayloads(task), ctx,
                  bridge_->core().Heartbeat(task, req->incarnation()));
  }

  grpc::ServerUnaryReactor* PollForError(grpc::CallbackServerContext* ctx,
                                         const tpb::PollForErrorRequest* req,
                                         tpb::PollForErrorResponse*) override {
    TaskId task = req->source_task().task_id();
    auto* reactor = new PollReactor(bridge_, kProto, [](const TaskFailure& f) {
      return WithPayloads(absl::Status(FailureCode(f), FailureMessage(f)),
                          TslPayloads(f.task, f.cause == FailureCause::kReportedError));
    });
    absl::StatusOr<OpId> op =
        bridge_->core().Watch(task, bridge_->IncarnationOf(task), reactor->Callback());
    reactor->Started(op, WithPayloads(op.status(), TslPayloads(task)));
    return reactor;
  }

  grpc::ServerUnaryReactor* ShutdownTask(grpc::CallbackServerContext* ctx,
                                         const tpb::ShutdownTaskRequest* req,
                                         tpb::ShutdownTaskResponse*) override {
    TaskId task = req->source_task().task_id();
    return Serve(bridge_, kProto, "ShutdownTask", TslPayloads(task), [&](auto done) {
      return bridge_->core().ShutdownTask(task, bridge_->IncarnationOf(task), done);
    });
  }

  grpc::ServerUnaryReactor* ReportErrorToService(grpc::CallbackServerContext* ctx,
                                                 const tpb::ReportErrorToServiceRequest* req,
                                                 tpb::ReportErrorToServiceResponse*) override {
    TaskId task = req->error_origin().task_id();
    return Answer(bridge_, kProto, "ReportErrorToService", TslPayloads(task), ctx,
                  bridge_->core().ReportError(task, bridge_->IncarnationOf(task),
                                              FailureCause::kReportedError,
                                              absl::StrCat("JAX reported error ", req->error_code(),
                                                           ": ", req->error_message())));
  }

  grpc::ServerUnaryReactor* GetTaskState(grpc::CallbackServerContext* ctx,
                                         const tpb::GetTaskStateRequest* req,
                                         tpb::GetTaskStateResponse* resp) override {
    CoordinationService::Snapshot snap = bridge_->core().GetSnapshot();
    for (const tpb::CoordinatedTask& t : req->source_task()) {
      if (t.task_id() < 0 || t.task_id() >= static_cast<TaskId>(snap.tasks.size())) {
        return Answer(bridge_, kProto, "GetTaskState", TslPayloads(-1), ctx,
                      absl::InvalidArgumentError(absl::StrCat("GetTaskState names task ",
                                                              t.task_id(), ", not in the job")));
      }
      const auto& task = snap.tasks[t.task_id()];
      tpb::CoordinatedTaskStateInfo* info = resp->add_task_state();
      *info->mutable_task() = TslTask(t.task_id());
      info->set_incarnation(task.incarnation);
      switch (task.state) {
        case TaskState::kConnected:
        case TaskState::kShutDown:
          info->set_state(task.state == TaskState::kConnected ? tpb::TASKSTATE_CONNECTED
                                                                : tpb::TASKSTATE_DISCONNECTED);
          break;
        case TaskState::kFailed:
          info->set_state(tpb::TASKSTATE_ERROR);
          break;
        default:
          info->set_state(tpb::TASKSTATE_DISCONNECTED);
      }
    }
    return Answer(bridge_, kProto, "GetTaskState", TslPayloads(-1), ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* WaitForAllTasks(grpc::CallbackServerContext* ctx,
                                            const tpb::WaitForAllTasksRequest*,
                                            tpb::WaitForAllTasksResponse*) override {
    return Answer(bridge_, kProto, "WaitForAllTasks", TslPayloads(-1), ctx,
                  Unsupported("WaitForAllTasks"));
  }
  grpc::ServerUnaryReactor* ResetTask(grpc::CallbackServerContext* ctx,
                                      const tpb::ResetTaskRequest*,
                                      tpb::ResetTaskResponse*) override {
    return Answer(bridge_, kProto, "ResetTask", TslPayloads(-1), ctx, Unsupported("ResetTask"));
  }
  grpc::ServerUnaryReactor* ReportErrorToTask(grpc::CallbackServerContext* ctx,
                                              const tpb::ReportErrorToTaskRequest*,
                                              tpb::ReportErrorToTaskResponse*) override {
    return Answer(bridge_, kProto, "ReportErrorToTask", TslPayloads(-1), ctx,
                  Unsupported("ReportErrorToTask"));
  }
  // WatchTasks' earlier generation: the same long poll over the same states.
  grpc::ServerUnaryReactor* WatchJobState(grpc::CallbackServerContext* ctx,
                                          const tpb::WatchJobStateRequest* req,
                                          tpb::WatchJobStateResponse* resp) override {
    return Serve(bridge_, kProto, "WatchJobState", TslPayloads(-1), [&](auto done) {
      return bridge_->core().WatchTaskStates(
          req->version_number(), [resp, done](absl::StatusOr<CoordinationService::TaskStates> states) {
            if (states.ok()) {
              for (const WatchedTask& w : WatchedTasks(*states)) {
                tpb::CoordinatedTaskStateInfo* info = resp->add_task_state();
                *info->mutable_task() = TslTask(w.task);
                info->set_state(w.state == WatchedTask::State::kConnected ? tpb::TASKSTATE_CONNECTED
                                : w.state == WatchedTask::State::kError   ? tpb::TASKSTATE_ERROR
                                                                          : tpb::TASKSTATE_DISCONNECTED);
                info->set_incarnation(w.incarnation);
                if (!w.error.ok()) {
                  info->set_error_code(static_cast<int32_t>(w.error.code()));
                  info->set_error_message(std::string(w.error.message()));
                  *info->mutable_error_payload()->mutable_source_task() = TslTask(w.task);
                  info->mutable_error_payload()->set_is_reported_error(w.reported);
                }
              }
              resp->set_version_number(states->version);
            }
            done(states.status());
          });
    });
  }

  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const tpb::InsertKeyValueRequest* req,
                                           tpb::InsertKeyValueResponse*) override {
    absl::Status s = bridge_->core().InsertKeyValue(kUnidentifiedTask, 0, req->kv().key(),
                                                    req->kv().value(), req->allow_overwrite());
    if (s.ok()) bridge_->AfterInsert(kUnidentifiedTask, req->kv().key());
    return Answer(bridge_, kProto, "InsertKeyValue", TslPayloads(-1), ctx, s);
  }

  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext* ctx,
                                        const tpb::GetKeyValueRequest* req,
                                        tpb::GetKeyValueResponse* resp) override {
    return Serve(bridge_, kProto, "GetKeyValue", TslPayloads(-1), [&](auto done) {
      return bridge_->core().GetKeyValue(
          kUnidentifiedTask, 0, req->key(), absl::InfiniteDuration(),
          [resp, key = req->key(), done](absl::StatusOr<std::string> v) {
            if (v.ok()) {
              resp->mutable_kv()->set_key(key);
              resp->mutable_kv()->set_value(std::move(*v));
            }
            done(v.status());
          });
    });
  }

  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const tpb::TryGetKeyValueRequest* req,
                                           tpb::TryGetKeyValueResponse* resp) override {
    absl::StatusOr<std::string> v =
        bridge_->core().TryGetKeyValue(kUnidentifiedTask, 0, req->key());
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(std::move(*v));
    }
    return Answer(bridge_, kProto, "TryGetKeyValue", TslPayloads(-1), ctx, v.status());
  }

  grpc::ServerUnaryReactor* IncrementKeyValue(grpc::CallbackServerContext* ctx,
                                              const tpb::IncrementKeyValueRequest* req,
                                              tpb::IncrementKeyValueResponse* resp) override {
    absl::StatusOr<int64_t> v =
        bridge_->core().IncrementKeyValue(kUnidentifiedTask, 0, req->key(), req->increment());
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(absl::StrCat(*v));
    }
    return Answer(bridge_, kProto, "IncrementKeyValue", TslPayloads(-1), ctx, v.status());
  }

  grpc::ServerUnaryReactor* GetKeyValueDir(grpc::CallbackServerContext* ctx,
                                           const tpb::GetKeyValueDirRequest* req,
                                           tpb::GetKeyValueDirResponse* resp) override {
    return ServeDirectory(
        bridge_, kProto, TslPayloads(-1), kUnidentifiedTask, 0, req->directory_key(),
        [resp](const std::string& key, const std::string& value) {
          tpb::KeyValueEntry* kv = resp->add_kv();
          kv->set_key(key);
          kv->set_value(value);
        },
        [resp, dir = req->directory_key()](const absl::Status& s) {
          if (s.ok()) resp->set_directory_key(dir);
          return resp->ByteSizeLong();
        });
  }

  grpc::ServerUnaryReactor* DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                           const tpb::DeleteKeyValueRequest* req,
                                           tpb::DeleteKeyValueResponse*) override {
    return Answer(bridge_, kProto, "DeleteKeyValue", TslPayloads(-1), ctx,
                  bridge_->core().DeleteKeyValue(kUnidentifiedTask, 0, req->key()));
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext* ctx,
                                    const tpb::BarrierRequest* req,
                                    tpb::BarrierResponse* resp) override {
    BarrierArgs args;
    args.task = req->source_task().task_id();
    args.incarnation = bridge_->IncarnationOf(args.task);
    args.id = req->barrier_id();
    args.counter = req->counter();
    args.timeout = absl::Milliseconds(req->barrier_timeout_in_ms());
    for (const tpb::CoordinatedTask& t : req->tasks()) args.participants.push_back(t.task_id());
    resp->set_counter(req->counter());
    ErrorPayloads payloads = TslPayloads(args.task);
    payloads.barrier_error = BarrierErrorBytes<tpb::BarrierError>(args.id, args.counter);
    return Serve(bridge_, kProto, "Barrier", std::move(payloads),
                 [&](auto done) { return bridge_->core().Barrier(args, done); });
  }

  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const tpb::CancelBarrierRequest* req,
                                          tpb::CancelBarrierResponse*) override {
    TaskId task = req->source_task().task_id();
    return Answer(bridge_, kProto, "CancelBarrier", TslPayloads(task), ctx,
                  bridge_->core().CancelBarrier(task, bridge_->IncarnationOf(task),
                                                req->barrier_id(), req->counter()));
  }

  grpc::ServerUnaryReactor* GetAliveTasks(grpc::CallbackServerContext* ctx,
                                          const tpb::GetAliveTasksRequest* req,
                                          tpb::GetAliveTasksResponse* resp) override {
    std::vector<TaskId> asked;
    for (const tpb::CoordinatedTask& t : req->tasks()) asked.push_back(t.task_id());
    auto alive = bridge_->AliveTasks(std::move(asked));
    if (alive.ok()) {
      for (const auto& [task, incarnation] : *alive) {
        *resp->add_alive_tasks() = TslTask(task);
        resp->add_incarnations(incarnation);
      }
    }
    return Answer(bridge_, kProto, "GetAliveTasks", TslPayloads(-1), ctx, alive.status());
  }

 private:
  static constexpr absl::string_view kProto = kTensorflowCoordinationProtocol;
  ArenaMessageAllocator<tpb::GetKeyValueDirRequest, tpb::GetKeyValueDirResponse> dir_allocator_;
  const std::shared_ptr<JaxBridge> bridge_;
};

// ---------------------------------------------------------------------------------------------
// Any other method: a jaxlib newer (or older) than the supported range.

class UnknownMethodReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit UnknownMethodReactor(const std::string& method) {
    LogWarning("JAX port: call to unknown method ", method, "; answered UNIMPLEMENTED");
    Finish(WithPayloads(
        absl::UnimplementedError(absl::StrCat(
            "Cohort's JAX coordination port does not serve ", method,
            ": this client speaks a coordination protocol Cohort does not know. Cohort supports ",
            kSupportedJaxlibVersions,
            " (tensorflow.CoordinationService before 0.10, xla.coordination.CoordinationService "
            "from 0.10); install a jax/jaxlib in that range or a Cohort release that supports "
            "yours")),
        XlaPayloads(-1)));
  }
  void OnDone() override { delete this; }
};

class UnknownMethodService final : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethodService(std::shared_ptr<JaxBridge> bridge) : bridge_(std::move(bridge)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    bridge_->Count("unknown", ctx->method(), absl::StatusCode::kUnimplemented);
    return new UnknownMethodReactor(ctx->method());
  }

 private:
  const std::shared_ptr<JaxBridge> bridge_;
};

}  // namespace

struct JaxCompatServices::Impl {
  std::shared_ptr<JaxBridge> bridge;
  XlaService xla;
  TslService tsl;
  UnknownMethodService unknown;
  explicit Impl(std::shared_ptr<JaxBridge> b) : bridge(b), xla(b), tsl(b), unknown(b) {}
};

JaxCompatServices::JaxCompatServices(CoordinationService* service, JaxPortOptions options)
    : impl_(std::make_unique<Impl>(std::make_shared<JaxBridge>(service, std::move(options)))) {}

JaxCompatServices::~JaxCompatServices() = default;

void JaxCompatServices::Register(grpc::ServerBuilder* builder) {
  builder->RegisterService(&impl_->xla);
  builder->RegisterService(&impl_->tsl);
  builder->RegisterCallbackGenericService(&impl_->unknown);
}

}  // namespace cohort::coordination
