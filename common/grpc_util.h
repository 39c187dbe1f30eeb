#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort {

// absl::Status <-> grpc::Status with the same code, message and payloads (the payloads travel as
// the error's details, a google.rpc.Status: proto/cohort/rpc/v1/status.proto).
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Adds the job token (when non-empty) to an outgoing call.
void AddToken(grpc::ClientContext* context, const std::string& token);

// Checks the job token of an incoming call. UNAUTHENTICATED when it is missing or wrong and a
// token is configured; OK otherwise.
absl::Status CheckToken(const grpc::ServerContextBase& context, const std::string& token);

// Finishes a unary server call at once with `status`, on gRPC's default reactor.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status);

std::chrono::system_clock::time_point ToChronoDeadline(absl::Duration timeout);

// Lets a server accept the keepalive pings of clients made with DefaultChannelArguments() (every
// 10 s, also on a connection whose only call is an idle stream). gRPC's default server policy
// answers more than one ping per 5 minutes without data with GOAWAY "too_many_pings", which
// would break a trainer's attach stream or an agent's event stream after ~30 s of quiet.
void AllowClientKeepalive(grpc::ServerBuilder* builder);

// Channel arguments shared by every Cohort client: keepalive so a dead peer is noticed, and a
// short reconnect backoff and DNS re-resolution interval so a restarted service (at a new pod
// address) is found quickly.
grpc::ChannelArguments DefaultChannelArguments();

// The calls a client has in flight, so that they can be cancelled together and awaited before
// the client goes away (their callbacks may reference it). Thread-safe.
class ClientCallSet {
 public:
  ClientCallSet() = default;
  ClientCallSet(const ClientCallSet&) = delete;
  ClientCallSet& operator=(const ClientCallSet&) = delete;

  void Add(grpc::ClientContext* context) {
    absl::MutexLock lock(&mu_);
    calls_.insert(context);
  }
  // `release` runs under the lock after the erase: a caller that destroys the call there (and
  // with it the context's reference to the channel) is done with the channel before
  // AwaitEmpty() returns, so the channel's owner, not a gRPC thread, destroys it last.
  void Remove(
      grpc::ClientContext* context, absl::FunctionRef<void()> release = [] {}) {
    absl::MutexLock lock(&mu_);
    calls_.erase(context);
    release();
  }
  // Cancels every call in flight; each completes (CANCELLED) soon after.
  void CancelAll() {
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* context : calls_) context->TryCancel();
  }
  // Waits until every call completed. Bounded: every call has a deadline, and a cancelled call
  // completes promptly.
  void AwaitEmpty() {
    auto empty = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); };
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&empty));
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
};

struct UnaryCallOptions {
  std::string token;               // The job token; empty: none.
  absl::Duration timeout;          // The call's deadline, from now.
  bool wait_for_ready = true;      // Wait for the channel (within the deadline) instead of failing.
  ClientCallSet* calls = nullptr;  // Tracks the call until it completes.
};

// Starts one asynchronous unary call on a gRPC callback stub: `method` is the stub's async
// method, e.g. &Svc::StubInterface::async_interface::Get, called on `async` (stub->async()).
// `done` runs exactly once, on a gRPC thread, with the status and the response.
template <typename Async, typename Interface, typename Req, typename Resp>
void UnaryCall(Async* async,
               void (Interface::*method)(grpc::ClientContext*, const Req*, Resp*,
                                         std::function<void(grpc::Status)>),
               Req request, const UnaryCallOptions& options,
               std::function<void(absl::Status, Resp)> done) {
  struct Call {
    grpc::ClientContext context;
    Req request;
    Resp response;
  };
  auto call = std::make_shared<Call>();
  call->request = std::move(request);
  AddToken(&call->context, options.token);
  call->context.set_deadline(ToChronoDeadline(options.timeout));
  call->context.set_wait_for_ready(options.wait_for_ready);
  ClientCallSet* calls = options.calls;
  if (calls != nullptr) calls->Add(&call->context);
  (async->*method)(&call->context, &call->request, &call->response,
                   [call, calls, done = std::move(done)](grpc::Status s) mutable {
                     done(FromGrpcStatus(s), std::move(call->response));
                     // Destroyed before the set forgets it: a channel destroyed on a gRPC
                     // thread tears down gRPC's shared callback queue from inside it, which
                     // later aborts the process (seen in SidecarClient's tests).
                     if (calls != nullptr) calls->Remove(&call->context, [&] { call.reset(); });
                   });
}

}  // namespace cohort
