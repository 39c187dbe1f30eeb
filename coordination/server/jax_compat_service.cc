#include "coordination/server/jax_compat_service.h"

#include <atomic>
#include <string>
#include <type_traits>
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

// An answer in XLA's words (coordination/server/xla_errors.h) as generation `Gen` sends it: the
// payloads ride in grpc-status-details-bin as a GrpcPayloadContainer, as XLA's service sends them.
template <class Gen>
grpc::Status Reply(const XlaError& e) {
  if (e.status.ok()) return grpc::Status::OK;
  tensorflow::distributed_runtime::GrpcPayloadContainer container;
  if (e.coordination_error) {
    (*container.mutable_payloads())[std::string(kCoordinationErrorUrl)] =
        Gen::CoordinationError(e.source_task, e.reported);
  }
  if (e.barrier) {
    typename Gen::BarrierError barrier;
    barrier.set_barrier_id(e.barrier->first);
    barrier.set_counter(e.barrier->second);
    (*container.mutable_payloads())[std::string(kBarrierErrorUrl)] = barrier.SerializeAsString();
  }
  return grpc::Status(static_cast<grpc::StatusCode>(e.status.code()),
                      std::string(e.status.message()),
                      container.payloads().empty() ? "" : container.SerializeAsString());
}

// How one call's core status goes out: in XLA's words, with its generation's payloads.
using Replier = std::function<grpc::Status(const absl::Status&)>;

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
// call that waits (0 otherwise) and calls done(status) exactly once; `reply` turns the status into
// the answer.
template <typename Start>
grpc::ServerUnaryReactor* Serve(const std::shared_ptr<JaxBridge>& bridge,
                                absl::string_view protocol, absl::string_view method, Replier reply,
                                Start start) {
  auto* reactor = new WaitingCallReactor(&bridge->core());
  reactor->Started(start([reactor, bridge, protocol, method, reply = std::move(reply),
                          started = absl::Now()](absl::Status s) {
    bridge->Count(protocol, method, s.code(), absl::Now() - started);
    reactor->Complete(reply(s));
  }));
  return reactor;
}

// A directory read, built only when the reply budget has room (as on every transport: a
// 1,024-task rendezvous reads 1,024 x 1,024 entries), straight from the store into the reply;
// `add(key, value)` appends one entry to it, `size(status)` finishes it and gives its size.
template <typename Add, typename Size>
grpc::ServerUnaryReactor* ServeDirectory(const std::shared_ptr<JaxBridge>& bridge,
                                         absl::string_view protocol, Replier reply, TaskId task,
                                         Incarnation incarnation, std::string directory, Add add,
                                         Size size) {
  auto* reactor = new WaitingCallReactor(&bridge->core());
  bridge->reply_budget()->Admit([reactor, bridge, protocol, reply = std::move(reply), task,
                                 incarnation, directory = std::move(directory), add,
                                 size]() mutable {
    absl::Status s = bridge->core().VisitKeyValueDir(task, incarnation, directory, add);
    bridge->Count(protocol, "GetKeyValueDir", s.code());
    reactor->Complete(reply(s), bridge->reply_budget()->Take(size(s)));
  });
  reactor->Started(0);
  return reactor;
}

// A call answered at once.
grpc::ServerUnaryReactor* Answer(const std::shared_ptr<JaxBridge>& bridge,
                                 absl::string_view protocol, absl::string_view method,
                                 const Replier& reply, grpc::CallbackServerContext* ctx,
                                 const absl::Status& status) {
  bridge->Count(protocol, method, status.code());
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(reply(status));
  return reactor;
}

// ---------------------------------------------------------------------------------------------
// The two generations of the protocol name their messages alike and spell a few fields
// differently: who calls, a task, the service's incarnation. Each generation's spelling is one
// traits struct; JaxGenerationService below maps the calls onto the bridge once, over either.

// The message types of one generation, by the names both generations give them.
#define COHORT_JAX_GENERATION_MESSAGES(ns)                               \
  using RegisterTaskRequest = ns::RegisterTaskRequest;                   \
  using RegisterTaskResponse = ns::RegisterTaskResponse;                 \
  using HeartbeatRequest = ns::HeartbeatRequest;                         \
  using HeartbeatResponse = ns::HeartbeatResponse;                       \
  using PollForErrorRequest = ns::PollForErrorRequest;                   \
  using PollForErrorResponse = ns::PollForErrorResponse;                 \
  using ShutdownTaskRequest = ns::ShutdownTaskRequest;                   \
  using ShutdownTaskResponse = ns::ShutdownTaskResponse;                 \
  using ReportErrorToServiceRequest = ns::ReportErrorToServiceRequest;   \
  using ReportErrorToServiceResponse = ns::ReportErrorToServiceResponse; \
  using InsertKeyValueRequest = ns::InsertKeyValueRequest;               \
  using InsertKeyValueResponse = ns::InsertKeyValueResponse;             \
  using GetKeyValueRequest = ns::GetKeyValueRequest;                     \
  using GetKeyValueResponse = ns::GetKeyValueResponse;                   \
  using TryGetKeyValueRequest = ns::TryGetKeyValueRequest;               \
  using TryGetKeyValueResponse = ns::TryGetKeyValueResponse;             \
  using IncrementKeyValueRequest = ns::IncrementKeyValueRequest;         \
  using IncrementKeyValueResponse = ns::IncrementKeyValueResponse;       \
  using GetKeyValueDirRequest = ns::GetKeyValueDirRequest;               \
  using GetKeyValueDirResponse = ns::GetKeyValueDirResponse;             \
  using DeleteKeyValueRequest = ns::DeleteKeyValueRequest;               \
  using DeleteKeyValueResponse = ns::DeleteKeyValueResponse;             \
  using BarrierRequest = ns::BarrierRequest;                             \
  using BarrierResponse = ns::BarrierResponse;                           \
  using CancelBarrierRequest = ns::CancelBarrierRequest;                 \
  using CancelBarrierResponse = ns::CancelBarrierResponse;               \
  using GetAliveTasksRequest = ns::GetAliveTasksRequest;                 \
  using GetAliveTasksResponse = ns::GetAliveTasksResponse;               \
  using KeyValueEntry = ns::KeyValueEntry;                               \
  using BarrierError = ns::BarrierError

// The task a call comes from and the incarnation it runs as.
struct Caller {
  TaskId task = kUnidentifiedTask;
  Incarnation incarnation = 0;
};

// xla.coordination.CoordinationService (jaxlib 0.10+): tasks are numbers, and every call but
// RegisterTask carries the caller's incarnation.
struct XlaGeneration {
  using Service = xpb::CoordinationService::CallbackService;
  COHORT_JAX_GENERATION_MESSAGES(xpb);
  using TaskInfo = xpb::TaskInfo;
  static constexpr absl::string_view kProto = kXlaCoordinationProtocol;

  // The CoordinationServiceError payload, naming the task an error comes from (-1: none).
  static std::string CoordinationError(TaskId source, bool reported) {
    xpb::CoordinationServiceError e;
    e.set_is_reported_error(reported);
    if (source >= 0) e.set_source_task_id(source);
    return e.SerializeAsString();
  }

  template <class Request>
  static Caller Identify(const JaxBridge& bridge, const Request& req) {
    if constexpr (std::is_same_v<Request, RegisterTaskRequest>) {
      return {req.source_task_id(), req.incarnation()};
    } else if constexpr (std::is_same_v<Request, HeartbeatRequest>) {
      return {req.source_task_id(),
              req.incarnation() != 0 ? req.incarnation() : req.incarnations().task_incarnation()};
    } else if constexpr (std::is_same_v<Request, GetAliveTasksRequest>) {
      return {req.requesting_task_id(), 0};
    } else if constexpr (requires { req.source_task_id(); }) {
      const TaskId task = req.source_task_id();
      const Incarnation own = req.incarnations().task_incarnation();
      return {task, own != 0 ? own : bridge.IncarnationOf(task)};
    } else {
      // Key-value calls and WatchTasks: jaxlib leaves incarnations.task_id 0, the incarnation
      // names the caller.
      const TaskId task = bridge.TaskOf(req.incarnations().task_incarnation());
      return {task, task == kUnidentifiedTask ? 0 : req.incarnations().task_incarnation()};
    }
  }

  static void SetServiceIncarnation(auto* resp, Incarnation incarnation) {
    resp->set_service_incarnation(incarnation);
  }
  // The tasks a barrier or GetAliveTasks names (empty: every task).
  static std::vector<TaskId> Tasks(const auto& req) {
    return {req.task_ids().begin(), req.task_ids().end()};
  }
  static void AddAliveTask(GetAliveTasksResponse* resp, TaskId task) {
    resp->add_alive_task_ids(task);
  }

  static void SetTask(TaskInfo* info, TaskId task) { info->set_task_id(task); }
  static void SetErrorSource(xpb::CoordinationServiceError* payload, TaskId task) {
    payload->set_source_task_id(task);
  }
  static xpb::TaskState State(WatchedTask::State state) {
    switch (state) {
      case WatchedTask::State::kConnected:
        return xpb::TASK_STATE_CONNECTED;
      case WatchedTask::State::kError:
        return xpb::TASK_STATE_ERROR;
      case WatchedTask::State::kDisconnected:
        break;
    }
    return xpb::TASK_STATE_DISCONNECTED;
  }
};

// tensorflow.CoordinationService (jaxlib 0.8 and 0.9): tasks are {job name, number}; only
// registration and heartbeats carry an incarnation, and key-value calls name no caller.
struct TslGeneration {
  using Service = tpb::CoordinationService::CallbackService;
  COHORT_JAX_GENERATION_MESSAGES(tpb);
  using TaskInfo = tpb::CoordinatedTaskStateInfo;
  static constexpr absl::string_view kProto = kTensorflowCoordinationProtocol;

  static tpb::CoordinatedTask Task(TaskId task) {
    tpb::CoordinatedTask t;
    t.set_job_name(std::string(kJaxJobName));
    t.set_task_id(task);
    return t;
  }

  static std::string CoordinationError(TaskId source, bool reported) {
    tpb::CoordinationServiceError e;
    e.set_is_reported_error(reported);
    if (source >= 0) *e.mutable_source_task() = Task(source);
    return e.SerializeAsString();
  }

  template <class Request>
  static Caller Identify(const JaxBridge& bridge, const Request& req) {
    if constexpr (std::is_same_v<Request, RegisterTaskRequest> ||
                  std::is_same_v<Request, HeartbeatRequest>) {
      return {req.source_task().task_id(), req.incarnation()};
    } else if constexpr (requires { req.source_task().task_id(); }) {
      const TaskId task = req.source_task().task_id();
      return {task, bridge.IncarnationOf(task)};
    } else if constexpr (std::is_same_v<Request, ReportErrorToServiceRequest>) {
      const TaskId task = req.error_origin().task_id();
      return {task, bridge.IncarnationOf(task)};
    } else if constexpr (std::is_same_v<Request, GetAliveTasksRequest>) {
      return {req.requesting_task().task_id(), 0};
    } else {
      return {};  // Key-value calls and WatchJobState.
    }
  }

  static void SetServiceIncarnation(auto* resp, Incarnation incarnation) {
    resp->set_leader_incarnation(incarnation);
  }
  static std::vector<TaskId> Tasks(const auto& req) {
    std::vector<TaskId> tasks;
    for (const tpb::CoordinatedTask& t : req.tasks()) tasks.push_back(t.task_id());
    return tasks;
  }
  static void AddAliveTask(GetAliveTasksResponse* resp, TaskId task) {
    *resp->add_alive_tasks() = Task(task);
  }

  static void SetTask(TaskInfo* info, TaskId task) { *info->mutable_task() = Task(task); }
  static void SetErrorSource(tpb::CoordinationServiceError* payload, TaskId task) {
    *payload->mutable_source_task() = Task(task);
  }
  static tpb::CoordinatedTaskState State(WatchedTask::State state) {
    switch (state) {
      case WatchedTask::State::kConnected:
        return tpb::TASKSTATE_CONNECTED;
      case WatchedTask::State::kError:
        return tpb::TASKSTATE_ERROR;
      case WatchedTask::State::kDisconnected:
        break;
    }
    return tpb::TASKSTATE_DISCONNECTED;
  }
};

#undef COHORT_JAX_GENERATION_MESSAGES

// The calls both generations have, written once: each maps its request onto the bridge and the
// core and answers in the generation's own spelling. A generation's calls of its own are in the
// class that derives from it.
template <class Gen>
class JaxGenerationService : public Gen::Service {
 public:
  explicit JaxGenerationService(std::shared_ptr<JaxBridge> bridge) : bridge_(std::move(bridge)) {
    this->SetMessageAllocatorFor_GetKeyValueDir(&dir_allocator_);
  }

  grpc::ServerUnaryReactor* RegisterTask(grpc::CallbackServerContext* ctx,
                                         const typename Gen::RegisterTaskRequest* req,
                                         typename Gen::RegisterTaskResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    Gen::SetServiceIncarnation(resp, bridge_->core().service_incarnation());
    return Serve(bridge_, kProto, "RegisterTask", In("RegisterTask", caller), [&](auto done) {
      return bridge_->Register(caller.task, caller.incarnation, kProto, ctx->peer(), done);
    });
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const typename Gen::HeartbeatRequest* req,
                                      typename Gen::HeartbeatResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    Gen::SetServiceIncarnation(resp, bridge_->core().service_incarnation());
    return Answer(bridge_, kProto, "Heartbeat", In("Heartbeat", caller), ctx,
                  bridge_->core().Heartbeat(caller.task, caller.incarnation));
  }

  grpc::ServerUnaryReactor* PollForError(grpc::CallbackServerContext*,
                                         const typename Gen::PollForErrorRequest* req,
                                         typename Gen::PollForErrorResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    auto* reactor = new PollReactor(bridge_, kProto, [bridge = bridge_](const TaskFailure& f) {
      return Reply<Gen>(bridge->FailureError(f));
    });
    absl::StatusOr<OpId> op =
        bridge_->core().Watch(caller.task, caller.incarnation, reactor->Callback());
    reactor->Started(op, In("PollForError", caller)(op.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* ShutdownTask(grpc::CallbackServerContext*,
                                         const typename Gen::ShutdownTaskRequest* req,
                                         typename Gen::ShutdownTaskResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    return Serve(bridge_, kProto, "ShutdownTask", In("ShutdownTask", caller), [&](auto done) {
      return bridge_->core().ShutdownTask(caller.task, caller.incarnation, done);
    });
  }

  grpc::ServerUnaryReactor* ReportErrorToService(
      grpc::CallbackServerContext* ctx, const typename Gen::ReportErrorToServiceRequest* req,
      typename Gen::ReportErrorToServiceResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    // Remembered first, so that the job's failure reads as this error the moment it fails the job;
    // forgotten again when the core refuses the report. A code of 0 (OK) is no error: UNKNOWN.
    const absl::StatusCode code = req->error_code() == 0
                                      ? absl::StatusCode::kUnknown
                                      : static_cast<absl::StatusCode>(req->error_code());
    const bool first = caller.task >= 0 && !bridge_->ReportedError(caller.task).has_value();
    if (first)
      bridge_->RememberReportedError(caller.task, absl::Status(code, req->error_message()));
    absl::Status s = bridge_->core().ReportError(
        caller.task, caller.incarnation, FailureCause::kReportedError,
        absl::StrCat("JAX reported error ", req->error_code(), ": ", req->error_message()));
    if (first && !s.ok()) bridge_->ForgetReportedError(caller.task);
    return Answer(bridge_, kProto, "ReportErrorToService", In("ReportErrorToService", caller), ctx,
                  s);
  }

  grpc::ServerUnaryReactor* InsertKeyValue(grpc::CallbackServerContext* ctx,
                                           const typename Gen::InsertKeyValueRequest* req,
                                           typename Gen::InsertKeyValueResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    // No size limit but gRPC's message size, as XLA's service (a GPU job's topology value grows
    // with the job).
    absl::Status s = bridge_->core().InsertKeyValue(
        caller.task, caller.incarnation, req->kv().key(), req->kv().value(), req->allow_overwrite(),
        KeyValueStore::kNoLimits);
    if (s.ok()) bridge_->AfterInsert(caller.task, req->kv().key());
    return Answer(bridge_, kProto, "InsertKeyValue", In("InsertKeyValue", caller, req->kv().key()),
                  ctx, s);
  }

  grpc::ServerUnaryReactor* GetKeyValue(grpc::CallbackServerContext*,
                                        const typename Gen::GetKeyValueRequest* req,
                                        typename Gen::GetKeyValueResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    // No timeout: JAX's blocking get waits until the key is set, the job fails or it cancels.
    return Serve(bridge_, kProto, "GetKeyValue", In("GetKeyValue", caller, req->key()),
                 [&](auto done) {
                   return bridge_->core().GetKeyValue(
                       caller.task, caller.incarnation, req->key(), absl::InfiniteDuration(),
                       [resp, key = req->key(), done](absl::StatusOr<std::string> v) {
                         if (v.ok()) {
                           resp->mutable_kv()->set_key(key);
                           resp->mutable_kv()->set_value(std::move(*v));
                         }
                         done(v.status());
                       },
                       KeyValueStore::kNoLimits);
                 });
  }

  grpc::ServerUnaryReactor* TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                           const typename Gen::TryGetKeyValueRequest* req,
                                           typename Gen::TryGetKeyValueResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    absl::StatusOr<std::string> v =
        bridge_->core().TryGetKeyValue(caller.task, caller.incarnation, req->key());
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(std::move(*v));
    }
    return Answer(bridge_, kProto, "TryGetKeyValue", In("TryGetKeyValue", caller, req->key()), ctx,
                  v.status());
  }

  grpc::ServerUnaryReactor* IncrementKeyValue(
      grpc::CallbackServerContext* ctx, const typename Gen::IncrementKeyValueRequest* req,
      typename Gen::IncrementKeyValueResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    absl::StatusOr<int64_t> v = bridge_->core().IncrementKeyValue(
        caller.task, caller.incarnation, req->key(), req->increment(), KeyValueStore::kNoLimits);
    if (v.ok()) {
      resp->mutable_kv()->set_key(req->key());
      resp->mutable_kv()->set_value(absl::StrCat(*v));  // Decimal text, as XLA's client parses it.
    }
    return Answer(bridge_, kProto, "IncrementKeyValue", In("IncrementKeyValue", caller, req->key()),
                  ctx, v.status());
  }

  grpc::ServerUnaryReactor* GetKeyValueDir(grpc::CallbackServerContext*,
                                           const typename Gen::GetKeyValueDirRequest* req,
                                           typename Gen::GetKeyValueDirResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    // XLA's service lists "<directory>/...": under the root ("" or "/") that is nothing.
    const bool root = KeyValueStore::NormalizeKey(req->directory_key()).empty();
    return ServeDirectory(
        bridge_, kProto, In("GetKeyValueDir", caller, req->directory_key()), caller.task,
        caller.incarnation, req->directory_key(),
        [resp, root](const std::string& key, const std::string& value) {
          if (root) return;
          typename Gen::KeyValueEntry* kv = resp->add_kv();
          kv->set_key(key);
          kv->set_value(value);
        },
        [resp, dir = req->directory_key()](const absl::Status& s) {
          if (s.ok()) resp->set_directory_key(dir);
          return resp->ByteSizeLong();
        });
  }

  grpc::ServerUnaryReactor* DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                           const typename Gen::DeleteKeyValueRequest* req,
                                           typename Gen::DeleteKeyValueResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    // The key and everything under it, whatever is_directory says (XLA's client always sets it).
    return Answer(bridge_, kProto, "DeleteKeyValue", In("DeleteKeyValue", caller, req->key()), ctx,
                  bridge_->core().DeleteKeyValue(caller.task, caller.incarnation, req->key(),
                                                 KeyValueStore::kNoLimits));
  }

  grpc::ServerUnaryReactor* Barrier(grpc::CallbackServerContext*,
                                    const typename Gen::BarrierRequest* req,
                                    typename Gen::BarrierResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    BarrierArgs args;
    args.task = caller.task;
    args.incarnation = caller.incarnation;
    args.id = req->barrier_id();
    args.counter = req->counter();
    // XLA takes any id and any timeout (zero or less: it fails at the next deadline check unless
    // every participant has arrived by then).
    args.timeout = absl::Milliseconds(req->barrier_timeout_in_ms());
    args.participants = Gen::Tasks(*req);
    resp->set_counter(req->counter());
    return Serve(bridge_, kProto, "Barrier", In("Barrier", caller, "", args.id, args.counter),
                 [&](auto done) { return bridge_->core().Barrier(args, done); });
  }

  grpc::ServerUnaryReactor* CancelBarrier(grpc::CallbackServerContext* ctx,
                                          const typename Gen::CancelBarrierRequest* req,
                                          typename Gen::CancelBarrierResponse*) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    return Answer(bridge_, kProto, "CancelBarrier",
                  In("CancelBarrier", caller, "", req->barrier_id(), req->counter()), ctx,
                  bridge_->core().CancelBarrier(caller.task, caller.incarnation, req->barrier_id(),
                                                req->counter()));
  }

  // As XLA's service: a barrier over the tasks it names, answered once each of them that is alive
  // has called it, with those alive (multihost_utils.live_devices relies on every caller getting
  // the same answer).
  grpc::ServerUnaryReactor* GetAliveTasks(grpc::CallbackServerContext*,
                                          const typename Gen::GetAliveTasksRequest* req,
                                          typename Gen::GetAliveTasksResponse* resp) override {
    const Caller caller = Gen::Identify(*bridge_, *req);
    return Serve(bridge_, kProto, "GetAliveTasks", In("GetAliveTasks", caller), [&](auto done) {
      return bridge_->core().GetAliveTasks(
          caller.task, Gen::Tasks(*req),
          [resp, done](absl::StatusOr<CoordinationService::AliveTasks> alive) {
            if (alive.ok()) {
              for (const auto& [task, incarnation] : *alive) {
                Gen::AddAliveTask(resp, task);
                resp->add_incarnations(incarnation);
              }
            }
            done(alive.status());
          });
    });
  }

 protected:
  static constexpr absl::string_view kProto = Gen::kProto;

  // How `method`'s answers go out, in XLA's words for what the call asked.
  Replier In(absl::string_view method, const Caller& caller, std::string key = "",
             std::string barrier_id = "", int64_t counter = 0) const {
    XlaCall call{method,
                 caller.task,
                 bridge_->core().config().num_tasks,
                 std::move(key),
                 std::move(barrier_id),
                 counter,
                 bridge_->core().service_incarnation()};
    return
        [call = std::move(call)](const absl::Status& s) { return Reply<Gen>(ToXlaError(s, call)); };
  }

  // WatchTasks (jaxlib 0.10+) and WatchJobState (earlier): a long poll, answered at once when
  // the caller's version is not the current one, else when a task's state changes (docs/jax.md,
  // "Task states (WatchTasks)").
  template <class Request, class Response>
  grpc::ServerUnaryReactor* ServeWatch(absl::string_view method, const Request* req,
                                       Response* resp) {
    const Caller caller = Gen::Identify(*bridge_, *req);
    return Serve(bridge_, kProto, method, In(method, caller), [&](auto done) {
      return bridge_->core().WatchTaskStates(
          req->version_number(),
          [bridge = bridge_, resp, done](absl::StatusOr<CoordinationService::TaskStates> states) {
            if (states.ok()) {
              for (const WatchedTask& w : bridge->WatchedTasks(*states)) {
                typename Gen::TaskInfo* info = resp->add_task_state();
                Gen::SetTask(info, w.task);
                info->set_state(Gen::State(w.state));
                info->set_incarnation(w.incarnation);
                if (!w.error.ok()) {
                  info->set_error_code(static_cast<int32_t>(w.error.code()));
                  info->set_error_message(std::string(w.error.message()));
                  Gen::SetErrorSource(info->mutable_error_payload(), w.task);
                  info->mutable_error_payload()->set_is_reported_error(w.reported);
                }
              }
              resp->set_version_number(states->version);
            }
            done(states.status());
          });
    });
  }

  const std::shared_ptr<JaxBridge> bridge_;

 private:
  ArenaMessageAllocator<typename Gen::GetKeyValueDirRequest, typename Gen::GetKeyValueDirResponse>
      dir_allocator_;
};

class XlaService final : public JaxGenerationService<XlaGeneration> {
 public:
  using JaxGenerationService::JaxGenerationService;

  grpc::ServerUnaryReactor* WatchTasks(grpc::CallbackServerContext*,
                                       const xpb::WatchTasksRequest* req,
                                       xpb::WatchTasksResponse* resp) override {
    return ServeWatch("WatchTasks", req, resp);
  }
};

class TslService final : public JaxGenerationService<TslGeneration> {
 public:
  using JaxGenerationService::JaxGenerationService;

  grpc::ServerUnaryReactor* WatchJobState(grpc::CallbackServerContext*,
                                          const tpb::WatchJobStateRequest* req,
                                          tpb::WatchJobStateResponse* resp) override {
    return ServeWatch("WatchJobState", req, resp);
  }

  grpc::ServerUnaryReactor* GetTaskState(grpc::CallbackServerContext* ctx,
                                         const tpb::GetTaskStateRequest* req,
                                         tpb::GetTaskStateResponse* resp) override {
    CoordinationService::Snapshot snap = bridge_->core().GetSnapshot();
    for (const tpb::CoordinatedTask& t : req->source_task()) {
      if (t.task_id() < 0 || t.task_id() >= static_cast<TaskId>(snap.tasks.size())) {
        return Answer(bridge_, kProto, "GetTaskState", In("GetTaskState", {}), ctx,
                      absl::InvalidArgumentError(absl::StrCat("GetTaskState names task ",
                                                              t.task_id(), ", not in the job")));
      }
      const auto& task = snap.tasks[t.task_id()];
      tpb::CoordinatedTaskStateInfo* info = resp->add_task_state();
      *info->mutable_task() = TslGeneration::Task(t.task_id());
      info->set_incarnation(task.incarnation);
      info->set_state(task.state == TaskState::kConnected ? tpb::TASKSTATE_CONNECTED
                      : task.state == TaskState::kFailed  ? tpb::TASKSTATE_ERROR
                                                          : tpb::TASKSTATE_DISCONNECTED);
    }
    return Answer(bridge_, kProto, "GetTaskState", In("GetTaskState", {}), ctx, absl::OkStatus());
  }

  grpc::ServerUnaryReactor* WaitForAllTasks(grpc::CallbackServerContext* ctx,
                                            const tpb::WaitForAllTasksRequest*,
                                            tpb::WaitForAllTasksResponse*) override {
    return Unsupported(ctx, "WaitForAllTasks");
  }
  grpc::ServerUnaryReactor* ResetTask(grpc::CallbackServerContext* ctx,
                                      const tpb::ResetTaskRequest*,
                                      tpb::ResetTaskResponse*) override {
    return Unsupported(ctx, "ResetTask");
  }
  grpc::ServerUnaryReactor* ReportErrorToTask(grpc::CallbackServerContext* ctx,
                                              const tpb::ReportErrorToTaskRequest*,
                                              tpb::ReportErrorToTaskResponse*) override {
    return Unsupported(ctx, "ReportErrorToTask");
  }

 private:
  grpc::ServerUnaryReactor* Unsupported(grpc::CallbackServerContext* ctx,
                                        absl::string_view method) {
    return Answer(bridge_, kProto, method, In(method, {}), ctx,
                  absl::UnimplementedError(absl::StrCat(
                      method,
                      " is not served by Cohort's JAX coordination port (jax.distributed "
                      "does not call it in ",
                      kSupportedJaxlibVersions, "); see docs/jax.md")));
  }
};
// ---------------------------------------------------------------------------------------------
// Any other method: a jaxlib newer (or older) than the supported range.

class UnknownMethodReactor final : public grpc::ServerGenericBidiReactor {
 public:
  explicit UnknownMethodReactor(const std::string& method) {
    LogWarning("JAX port: call to unknown method ", method, "; answered UNIMPLEMENTED");
    Finish(Reply<XlaGeneration>(XlaError{absl::UnimplementedError(absl::StrCat(
        "Cohort's JAX coordination port does not serve ", method,
        ": this client speaks a coordination protocol Cohort does not know. Cohort supports ",
        kSupportedJaxlibVersions,
        " (tensorflow.CoordinationService before 0.10, xla.coordination.CoordinationService "
        "from 0.10); install a jax/jaxlib in that range or a Cohort release that supports "
        "yours"))}));
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

// The three services on their own gRPC server.
class JaxPort final : public ServicePort {
 public:
  explicit JaxPort(std::shared_ptr<JaxBridge> bridge)
      : bridge_(bridge), xla_(bridge), tsl_(bridge), unknown_(bridge) {}

  absl::Status Listen(const std::string& listen_address) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &port_);
    // A second listener on the port (JAX's process 0 hosting its own service there when
    // JAX_COORDINATOR_BIND_ADDRESS is missing) must fail to bind, not share the port.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // Topology and other values travel whole: no cap below gRPC's own message limits.
    builder.SetMaxReceiveMessageSize(256 << 20);
    builder.SetMaxSendMessageSize(256 << 20);
    AllowClientKeepalive(&builder);
    builder.RegisterService(&xla_);
    builder.RegisterService(&tsl_);
    builder.RegisterCallbackGenericService(&unknown_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", listen_address,
          " for JAX's coordination protocol: the port is in use (is a JAX process 0 hosting its "
          "own service there? set JAX_COORDINATOR_BIND_ADDRESS=127.0.0.1:0 in the trainer) or "
          "the address is not local"));
    }
    return absl::OkStatus();
  }

  ~JaxPort() override {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
    }
  }

  int port() const override { return port_; }
  void Shutdown(absl::Time deadline) override { server_->Shutdown(absl::ToChronoTime(deadline)); }
  void Wait() override { server_->Wait(); }

 private:
  std::shared_ptr<JaxBridge> bridge_;
  XlaService xla_;
  TslService tsl_;
  UnknownMethodService unknown_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

ServicePortStarter JaxPortStarter(std::string listen_address, JaxPortOptions options) {
  return [listen_address = std::move(listen_address), options = std::move(options)](
             CoordinationService* service, std::shared_ptr<ReplyBudget> reply_budget)
             -> absl::StatusOr<std::unique_ptr<ServicePort>> {
    JaxPortOptions port_options = options;
    if (port_options.reply_budget == nullptr) port_options.reply_budget = std::move(reply_budget);
    auto port =
        std::make_unique<JaxPort>(std::make_shared<JaxBridge>(service, std::move(port_options)));
    if (absl::Status s = port->Listen(listen_address); !s.ok()) return s;
    return port;
  };
}

}  // namespace cohort::coordination
