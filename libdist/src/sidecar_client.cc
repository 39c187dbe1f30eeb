#include "libdist/src/sidecar_client.h"

#include <pthread.h>
#include <unistd.h>

#include <future>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "sidecar/coordination/coordination_rpc_service.h"

namespace dist::internal {
namespace {

using cohort::coordination::FailureCause;
using cohort::coordination::JobEvent;

constexpr absl::Duration kShortCallTimeout = absl::Seconds(30);

JobEvent FromProto(const agentpb::AgentEvent& e) {
  if (e.has_preemption()) {
    return cohort::coordination::PreemptionNotice{
        e.preemption().task_id(), absl::FromUnixMillis(e.preemption().notice_unix_ms())};
  }
  return cohort::coordination::TaskFailure{e.task_failure().task_id(),
                                           cohort::coordination::FromProto(e.task_failure().cause()),
                                           e.task_failure().message()};
}

}  // namespace

SidecarClient::SidecarClient(std::string socket_path, std::string token)
    : socket_path_(std::move(socket_path)), token_(std::move(token)) {
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path_),
                                       grpc::InsecureChannelCredentials(),
                                       cohort::DefaultChannelArguments());
  stub_ = agentpb::Agent::NewStub(channel_);
}

SidecarClient::~SidecarClient() { Detach(); }

void SidecarClient::Detach() {
  {
    absl::MutexLock lock(&mu_);
    detaching_ = true;
    if (attach_context_ != nullptr) attach_context_->TryCancel();
  }
  if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
}

absl::Status SidecarClient::Attach(int process_id, int num_processes, absl::Duration timeout,
                                   EventCallback on_event) {
  auto first = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> first_result = first->get_future();
  reader_ = std::thread([this, process_id, num_processes, timeout, on_event, first] {
    pthread_setname_np(pthread_self(), "dist-events");
    grpc::ClientContext ctx;
    cohort::AddToken(&ctx, token_);
    // The sidecar may still be starting: wait for its socket until the timeout.
    ctx.set_wait_for_ready(true);
    {
      absl::MutexLock lock(&mu_);
      if (detaching_) {
        first->set_value(absl::CancelledError("detached"));
        return;
      }
      attach_context_ = &ctx;
    }
    agentpb::AttachRequest req;
    req.set_process_id(process_id);
    req.set_num_processes(num_processes);
    req.set_pid(getpid());
    req.set_initialization_timeout_ms(absl::ToInt64Milliseconds(timeout));
    std::unique_ptr<grpc::ClientReader<agentpb::AgentEvent>> reader = stub_->Attach(&ctx, req);
    // The first event (Connected) must arrive within the timeout; a watchdog cancels the call
    // otherwise, since the stream itself has no deadline for the life of the process.
    std::promise<void> connected;
    std::thread watchdog([&ctx, timeout, fut = connected.get_future()]() mutable {
      if (fut.wait_for(absl::ToChronoSeconds(timeout + absl::Seconds(5))) ==
          std::future_status::timeout) {
        ctx.TryCancel();
      }
    });
    agentpb::AgentEvent event;
    bool got_first = false;
    while (reader->Read(&event)) {
      if (!got_first) {
        got_first = true;
        connected.set_value();
        if (!event.has_connected()) {
          first->set_value(absl::InternalError("the sidecar's first event was not 'connected'"));
          break;
        }
        first->set_value(absl::OkStatus());
        continue;
      }
      on_event(FromProto(event));
    }
    if (!got_first) connected.set_value();
    watchdog.join();
    grpc::Status status = reader->Finish();
    bool detaching;
    {
      absl::MutexLock lock(&mu_);
      attach_context_ = nullptr;
      detaching = detaching_;
    }
    if (!got_first) {
      absl::Status s = cohort::FromGrpcStatus(status);
      if (s.code() == absl::StatusCode::kCancelled || s.code() == absl::StatusCode::kDeadlineExceeded) {
        s = absl::DeadlineExceededError(absl::StrCat(
            "the cohort-sidecar at ", socket_path_, " did not report the job connected within ",
            absl::FormatDuration(timeout),
            ": the sidecar is not running (check COHORT_AGENT_SOCKET and the sidecar container), "
            "or other processes never joined (see the rank-0 sidecar's log)"));
      } else if (s.code() == absl::StatusCode::kUnavailable) {
        s = absl::UnavailableError(absl::StrCat("cannot reach the cohort-sidecar at ",
                                                socket_path_, ": ", s.message()));
      }
      first->set_value(s);
      return;
    }
    if (!detaching) {
      on_event(cohort::coordination::TaskFailure{
          -1, FailureCause::kServiceUnreachable,
          absl::StrCat("lost this process's cohort-sidecar (", socket_path_,
                       "): ", status.error_message().empty() ? "stream closed" : status.error_message(),
                       "; the sidecar died or was killed")});
    }
  });
  return first_result.get();
}

template <typename Req, typename Resp, typename Invoke>
void SidecarClient::Unary(Req req, absl::Duration timeout, Invoke invoke, Callback<Resp> done) {
  struct Call {
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
  };
  auto call = std::make_shared<Call>();
  call->req = std::move(req);
  cohort::AddToken(&call->ctx, token_);
  call->ctx.set_deadline(cohort::ToChronoDeadline(timeout));
  invoke(stub_->async(), &call->ctx, &call->req, &call->resp,
         [call, done = std::move(done)](grpc::Status s) {
           done(cohort::FromGrpcStatus(s), call->resp);
         });
}

#define COHORT_SIDECAR_CALL(Method, Req, Resp, timeout)                                   \
  Unary<Req, Resp>(std::move(req), timeout,                                              \
                   [](auto* a, auto* c, auto* q, auto* r, auto cb) {                     \
                     a->Method(c, q, r, std::move(cb));                                   \
                   },                                                                     \
                   std::move(done))

void SidecarClient::InsertKeyValue(pb::InsertKeyValueRequest req,
                                   Callback<pb::InsertKeyValueResponse> done) {
  COHORT_SIDECAR_CALL(InsertKeyValue, pb::InsertKeyValueRequest, pb::InsertKeyValueResponse,
                      kShortCallTimeout);
}
void SidecarClient::GetKeyValue(pb::GetKeyValueRequest req,
                                Callback<pb::GetKeyValueResponse> done) {
  absl::Duration timeout = absl::Milliseconds(req.timeout_ms()) + absl::Seconds(10);
  COHORT_SIDECAR_CALL(GetKeyValue, pb::GetKeyValueRequest, pb::GetKeyValueResponse, timeout);
}
void SidecarClient::TryGetKeyValue(pb::TryGetKeyValueRequest req,
                                   Callback<pb::TryGetKeyValueResponse> done) {
  COHORT_SIDECAR_CALL(TryGetKeyValue, pb::TryGetKeyValueRequest, pb::TryGetKeyValueResponse,
                      kShortCallTimeout);
}
void SidecarClient::GetKeyValueDir(pb::GetKeyValueDirRequest req,
                                   Callback<pb::GetKeyValueDirResponse> done) {
  COHORT_SIDECAR_CALL(GetKeyValueDir, pb::GetKeyValueDirRequest, pb::GetKeyValueDirResponse,
                      kShortCallTimeout);
}
void SidecarClient::DeleteKeyValue(pb::DeleteKeyValueRequest req,
                                   Callback<pb::DeleteKeyValueResponse> done) {
  COHORT_SIDECAR_CALL(DeleteKeyValue, pb::DeleteKeyValueRequest, pb::DeleteKeyValueResponse,
                      kShortCallTimeout);
}
void SidecarClient::IncrementKeyValue(pb::IncrementKeyValueRequest req,
                                      Callback<pb::IncrementKeyValueResponse> done) {
  COHORT_SIDECAR_CALL(IncrementKeyValue, pb::IncrementKeyValueRequest,
                      pb::IncrementKeyValueResponse, kShortCallTimeout);
}
void SidecarClient::Barrier(pb::BarrierRequest req, Callback<pb::BarrierResponse> done) {
  absl::Duration timeout = absl::Milliseconds(req.timeout_ms()) + absl::Seconds(10);
  COHORT_SIDECAR_CALL(Barrier, pb::BarrierRequest, pb::BarrierResponse, timeout);
}
void SidecarClient::CancelBarrier(pb::CancelBarrierRequest req,
                                  Callback<pb::CancelBarrierResponse> done) {
  COHORT_SIDECAR_CALL(CancelBarrier, pb::CancelBarrierRequest, pb::CancelBarrierResponse,
                      kShortCallTimeout);
}
void SidecarClient::ReportPreemption(Callback<pb::ReportPreemptionResponse> done) {
  pb::ReportPreemptionRequest req;
  COHORT_SIDECAR_CALL(ReportPreemption, pb::ReportPreemptionRequest, pb::ReportPreemptionResponse,
                      kShortCallTimeout);
}
void SidecarClient::ReportError(cohort::coordination::FailureCause cause, std::string message,
                                Callback<pb::ReportErrorResponse> done) {
  pb::ReportErrorRequest req;
  req.set_cause(cohort::coordination::ToProto(cause));
  req.set_message(std::move(message));
  COHORT_SIDECAR_CALL(ReportError, pb::ReportErrorRequest, pb::ReportErrorResponse,
                      kShortCallTimeout);
}
void SidecarClient::Shutdown(Callback<pb::ShutdownTaskResponse> done) {
  pb::ShutdownTaskRequest req;
  // Bounded by the sidecar's shutdown timeout; this is a backstop.
  COHORT_SIDECAR_CALL(ShutdownTask, pb::ShutdownTaskRequest, pb::ShutdownTaskResponse,
                      absl::Hours(1));
}

#undef COHORT_SIDECAR_CALL

}  // namespace dist::internal
