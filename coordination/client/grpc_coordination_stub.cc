#include "coordination/client/grpc_coordination_stub.h"

#include <utility>

#include "coordination/wire/session_framing.h"

namespace cohort::coordination {

using Async = pb::CoordinationService::StubInterface::async_interface;

// One WatchJob stream on gRPC's callback API. It owns itself until OnDone; the handle the
// caller holds only cancels it.
class GrpcCoordinationStub::WatchCall final : public grpc::ClientReadReactor<pb::JobEvent> {
 public:
  class Handle final : public Watch {
   public:
    explicit Handle(std::shared_ptr<WatchCall> call) : call_(std::move(call)) {}
    ~Handle() override { Cancel(); }
    void Cancel() override { call_->context_.TryCancel(); }

   private:
    std::shared_ptr<WatchCall> call_;
  };

  static std::unique_ptr<Watch> Start(pb::CoordinationService::Stub* stub, const std::string& token,
                                      ClientCallSet* calls, const pb::WatchJobRequest& request,
                                      EventCallback on_event, StatusCallback on_end) {
    auto call = std::shared_ptr<WatchCall>(
        new WatchCall(calls, request, std::move(on_event), std::move(on_end)));
    call->self_ = call;
    AddToken(&call->context_, token);
    call->context_.set_wait_for_ready(true);
    calls->Add(&call->context_);
    stub->async()->WatchJob(&call->context_, &call->request_, call.get());
    call->StartRead(&call->event_);
    call->StartCall();
    return std::make_unique<Handle>(call);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the stream's status.
    on_event_(event_);
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override {
    on_end_(FromGrpcStatus(status));
    calls_->Remove(&context_);
    self_.reset();  // May delete this.
  }

 private:
  WatchCall(ClientCallSet* calls, pb::WatchJobRequest request, EventCallback on_event,
            StatusCallback on_end)
      : calls_(calls),
        request_(std::move(request)),
        on_event_(std::move(on_event)),
        on_end_(std::move(on_end)) {}

  ClientCallSet* const calls_;
  grpc::ClientContext context_;
  const pb::WatchJobRequest request_;
  pb::JobEvent event_;
  const EventCallback on_event_;
  const StatusCallback on_end_;
  std::shared_ptr<WatchCall> self_;
};

GrpcCoordinationStub::GrpcCoordinationStub(const std::string& address, std::string token)
    : token_(std::move(token)),
      channel_(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                         DefaultChannelArguments())),
      stub_(pb::CoordinationService::NewStub(channel_)) {}

GrpcCoordinationStub::~GrpcCoordinationStub() {
  CancelAll();
  std::shared_ptr<SessionClient> session;
  {
    absl::MutexLock lock(&mu_);
    session = std::move(session_);
  }
  session.reset();  // Waits for the stream's end.
  calls_.AwaitEmpty();
}

void GrpcCoordinationStub::NoteChannelState(const absl::Status& status) {
  if (status.ok() || channel_->GetState(false) == GRPC_CHANNEL_READY) reached_.store(true);
}

bool GrpcCoordinationStub::ServiceReached() const { return reached_.load() || ServiceConnected(); }

bool GrpcCoordinationStub::ServiceConnected() const {
  bool ready = channel_->GetState(false) == GRPC_CHANNEL_READY;
  if (ready) reached_.store(true);
  return ready;
}

void GrpcCoordinationStub::CancelAll() {
  calls_.CancelAll();
  std::shared_ptr<SessionClient> session;
  {
    absl::MutexLock lock(&mu_);
    session = session_;
  }
  if (session != nullptr) session->Abort(absl::CancelledError("the call was cancelled"));
}

template <typename Interface, typename Req, typename Resp>
void GrpcCoordinationStub::Unary(void (Interface::*method)(grpc::ClientContext*, const Req*, Resp*,
                                                           std::function<void(grpc::Status)>),
                                 const Req& request, Resp* response, absl::Duration timeout,
                                 StatusCallback done, bool wait_for_ready) {
  UnaryCall<Async, Interface, Req, Resp>(
      stub_->async(), method, request, UnaryCallOptions{token_, timeout, wait_for_ready, &calls_},
      [this, response, done = std::move(done)](absl::Status s, Resp r) {
        NoteChannelState(s);
        *response = std::move(r);
        done(std::move(s));
      });
}

template <typename Req, typename Resp>
void GrpcCoordinationStub::OnSession(const Req& request, Resp* response, StatusCallback done) {
  pb::SessionRequest call;
  SetCall(&call, request);
  std::shared_ptr<SessionClient> session;
  {
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr || session_->broken()) {
      // Opening starts the call; no callback of it runs before the first write completes, and
      // none takes mu_.
      session_ = std::make_shared<SessionClient>(stub_.get(), token_);
    }
    session = session_;
  }
  session->Call(std::move(call),
                [this, response, done = std::move(done)](absl::Status s, pb::SessionResponse& r) {
                  NoteChannelState(s);
                  if (s.ok()) TakeResult(&r, response);
                  done(std::move(s));
                });
}

void GrpcCoordinationStub::RegisterTask(const pb::RegisterTaskRequest& request,
                                        pb::RegisterTaskResponse* response, absl::Duration timeout,
                                        StatusCallback done) {
  Unary(&Async::RegisterTask, request, response, timeout, std::move(done));
}
void GrpcCoordinationStub::Heartbeat(const pb::HeartbeatRequest& request,
                                     pb::HeartbeatResponse* response, absl::Duration timeout,
                                     StatusCallback done) {
  // No wait for the channel: a refused or reset connection fails the heartbeat at once, so that
  // a service that died is told apart from a silent one (see the interface).
  Unary(&Async::Heartbeat, request, response, timeout, std::move(done), /*wait_for_ready=*/false);
}
void GrpcCoordinationStub::ReportError(const pb::ReportErrorRequest& request,
                                       pb::ReportErrorResponse* response, absl::Duration timeout,
                                       StatusCallback done) {
  Unary(&Async::ReportError, request, response, timeout, std::move(done));
}
void GrpcCoordinationStub::ReportPreemption(const pb::ReportPreemptionRequest& request,
                                            pb::ReportPreemptionResponse* response,
                                            absl::Duration timeout, StatusCallback done) {
  Unary(&Async::ReportPreemption, request, response, timeout, std::move(done));
}
void GrpcCoordinationStub::GetJobProgress(const pb::GetJobProgressRequest& request,
                                          pb::GetJobProgressResponse* response,
                                          absl::Duration timeout, StatusCallback done) {
  Unary(&Async::GetJobProgress, request, response, timeout, std::move(done));
}
void GrpcCoordinationStub::ShutdownTask(const pb::ShutdownTaskRequest& request,
                                        pb::ShutdownTaskResponse* response, absl::Duration timeout,
                                        StatusCallback done) {
  Unary(&Async::ShutdownTask, request, response, timeout, std::move(done));
}

void GrpcCoordinationStub::InsertKeyValue(const pb::InsertKeyValueRequest& request,
                                          pb::InsertKeyValueResponse* response,
                                          StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::GetKeyValue(const pb::GetKeyValueRequest& request,
                                       pb::GetKeyValueResponse* response, StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::TryGetKeyValue(const pb::TryGetKeyValueRequest& request,
                                          pb::TryGetKeyValueResponse* response,
                                          StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::GetKeyValueDir(const pb::GetKeyValueDirRequest& request,
                                          pb::GetKeyValueDirResponse* response,
                                          StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::DeleteKeyValue(const pb::DeleteKeyValueRequest& request,
                                          pb::DeleteKeyValueResponse* response,
                                          StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::IncrementKeyValue(const pb::IncrementKeyValueRequest& request,
                                             pb::IncrementKeyValueResponse* response,
                                             StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::Barrier(const pb::BarrierRequest& request, pb::BarrierResponse* response,
                                   StatusCallback done) {
  OnSession(request, response, std::move(done));
}
void GrpcCoordinationStub::CancelBarrier(const pb::CancelBarrierRequest& request,
                                         pb::CancelBarrierResponse* response, StatusCallback done) {
  OnSession(request, response, std::move(done));
}

std::unique_ptr<CoordinationStub::Watch> GrpcCoordinationStub::WatchJob(
    const pb::WatchJobRequest& request, EventCallback on_event, StatusCallback on_end) {
  return WatchCall::Start(stub_.get(), token_, &calls_, request, std::move(on_event),
                          std::move(on_end));
}

}  // namespace cohort::coordination
