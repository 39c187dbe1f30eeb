#include "sidecar/agent/agent.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"
#include "sidecar/coordination/coordination_rpc_service.h"

namespace cohort::agent {
namespace {

using coordination::FailureCause;
using coordination::PreemptionNotice;
using coordination::TaskFailure;

Incarnation RandomIncarnation() {
  absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen, 1, UINT64_MAX);
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

JobEvent FromProto(const pb::JobEvent& e) {
  if (e.has_preemption()) {
    return PreemptionNotice{e.preemption().task_id(),
                            absl::FromUnixMillis(e.preemption().notice_unix_ms())};
  }
  return TaskFailure{e.task_failure().task_id(), coordination::FromProto(e.task_failure().cause()),
                     e.task_failure().message()};
}

// Short per-call deadline for calls that do not wait on peers.
constexpr absl::Duration kShortCallTimeout = absl::Seconds(30);

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)), incarnation_(RandomIncarnation()) {
  channel_ = grpc::CreateCustomChannel(options_.coordinator_address,
                                       grpc::InsecureChannelCredentials(),
                                       DefaultChannelArguments());
  stub_ = pb::CoordinationService::NewStub(channel_);
}

Agent::~Agent() {
  StopBackgroundThreads();
  CloseSession(absl::CancelledError("the agent is stopping"));
  {
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&drained), absl::Seconds(10));
  }
}

void Agent::Cancel() { StopBackgroundThreads(); }

void Agent::NotifyStop() {
  // Notify() may run only once; two threads can get here (shutdown completion, destructor).
  absl::MutexLock lock(&mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

void Agent::StopBackgroundThreads() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_context_ != nullptr) watch_context_->TryCancel();
    if (register_context_ != nullptr) register_context_->TryCancel();
  }
  NotifyStop();
  if (heartbeat_thread_.joinable() && heartbeat_thread_.get_id() != std::this_thread::get_id()) {
    heartbeat_thread_.join();
  }
  if (watch_thread_.joinable() && watch_thread_.get_id() != std::this_thread::get_id()) {
    watch_thread_.join();
  }
}

absl::Status Agent::Connect(EventCallback on_event) {
  {
    absl::MutexLock lock(&mu_);
    on_event_ = std::move(on_event);
  }
  absl::Time deadline = absl::Now() + options_.initialization_timeout;
  pb::RegisterTaskRequest req;
  req.set_task_id(options_.task);
  req.set_incarnation(incarnation_);
  req.set_num_tasks(options_.num_tasks);
  req.set_hostname(Hostname());
  req.set_pid(options_.pid != 0 ? options_.pid : getpid());

  Backoff backoff(absl::Milliseconds(100), absl::Seconds(5));
  grpc::Status last;
  bool ever_connected = false;
  while (true) {
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    // Wait for the coordinator to come up instead of failing fast: pods start in any order.
    ctx.set_wait_for_ready(true);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("agent stopped while connecting");
      register_context_ = &ctx;
    }
    pb::RegisterTaskResponse resp;
    last = stub_->RegisterTask(&ctx, req, &resp);
    {
      absl::MutexLock lock(&mu_);
      register_context_ = nullptr;
    }
    ever_connected |= channel_->GetState(false) == GRPC_CHANNEL_READY;
    if (last.ok()) {
      service_incarnation_ = resp.service_incarnation();
      break;
    }
    grpc::StatusCode code = last.error_code();
    bool retryable = code == grpc::StatusCode::UNAVAILABLE ||
                     (code == grpc::StatusCode::ABORTED &&
                      last.error_message().find("superseded") != std::string::npos);
    absl::Duration wait = backoff.Next();
    if (!retryable || absl::Now() + wait >= deadline) break;
    LogDebug("registration attempt ", backoff.attempts(), " failed (", last.error_message(),
             "); retrying in ", absl::FormatDuration(wait));
    if (stop_.WaitForNotificationWithTimeout(wait)) {
      return absl::CancelledError("agent stopped while connecting");
    }
  }
  if (!last.ok()) {
    if (last.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      if (!ever_connected) {
        return absl::DeadlineExceededError(absl::StrCat(
            "could not reach the coordinator at ", options_.coordinator_address, " within ",
            absl::FormatDuration(options_.initialization_timeout),
            ": check COHORT_COORDINATOR_ADDRESS, that process 0 (its sidecar) is running, and "
            "that the port is open"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "reached the coordinator at ", options_.coordinator_address,
          " but not every process registered within ",
          absl::FormatDuration(options_.initialization_timeout),
          "; the coordinator's log and its cohort_task_state metric name the missing ranks"));
    }
    absl::Status s = FromGrpcStatus(last);
    if (s.code() == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(absl::StrCat("coordinator at ", options_.coordinator_address,
                                                 " unavailable: ", s.message()));
    }
    return s;
  }
  connected_.store(true);
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
  return absl::OkStatus();
}

void Agent::Deliver(const JobEvent& event) {
  EventCallback cb;
  bool is_failure = std::holds_alternative<TaskFailure>(event);
  {
    absl::MutexLock lock(&mu_);
    bool& delivered = is_failure ? failure_delivered_ : preemption_delivered_;
    if (delivered) return;
    delivered = true;
    cb = on_event_;
  }
  if (cb) cb(event);
  // The service fails waiting calls itself when a task fails; when the service itself is lost,
  // nothing would, so they fail here.
  if (is_failure && std::get<TaskFailure>(event).cause == FailureCause::kServiceUnreachable) {
    CloseSession(absl::UnavailableError(std::get<TaskFailure>(event).message));
  }
}

void Agent::CloseSession(const absl::Status& status) {
  std::shared_ptr<SessionClient> session;
  {
    absl::MutexLock lock(&mu_);
    session = std::move(session_);
    session_ = nullptr;
  }
  if (session == nullptr) return;
  // Fails its calls (their callbacks take mu_), then cancels the stream and waits for its end.
  session->Abort(status);
  session.reset();
}

template <typename Req, typename Resp, typename Set, typename Get>
void Agent::OnSession(Req req, Set set, Get get, Callback<Resp> done) {
  req.set_task_id(options_.task);
  req.set_incarnation(incarnation_);
  pb::SessionRequest call;
  set(&call, std::move(req));
  std::shared_ptr<SessionClient> session;
  bool refused = false;
  {
    absl::MutexLock lock(&mu_);
    refused = stopping_;
    if (session_ != nullptr && !session_->broken()) session = session_;
  }
  if (refused) {
    done(absl::CancelledError("the agent is stopping"), Resp());
    return;
  }
  if (session == nullptr) {
    // Opened outside mu_: completions of its calls take mu_.
    auto fresh = std::make_shared<SessionClient>(stub_.get(), options_.token);
    absl::MutexLock lock(&mu_);
    if (session_ == nullptr || session_->broken()) session_ = fresh;
    session = session_;
  }
  session->Call(std::move(call),
                [get, done = std::move(done)](absl::Status s, const pb::SessionResponse& r) {
                  done(s, get(r));
                });
}

bool Agent::job_failed() const {
  absl::MutexLock lock(&mu_);
  return failure_delivered_;
}

void Agent::HeartbeatLoop() {
  pthread_setname_np(pthread_self(), "agent-heartbeat");
  const absl::Duration interval =
      std::clamp(options_.heartbeat_timeout / 4, absl::Milliseconds(50), absl::Seconds(10));
  absl::Time last_ok = absl::Now();
  std::string last_error;
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + std::max(interval, absl::Seconds(1))));
    pb::HeartbeatRequest req;
    req.set_task_id(options_.task);
    req.set_incarnation(incarnation_);
    pb::HeartbeatResponse resp;
    grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (s.ok()) {
      if (resp.service_incarnation() != service_incarnation_) {
        Deliver(TaskFailure{-1, FailureCause::kServiceUnreachable,
                            "the coordination service restarted (new incarnation), so the job's "
                            "state is lost; the job must restart"});
        return;
      }
      last_ok = absl::Now();
      continue;
    }
    if (s.error_code() == grpc::StatusCode::ABORTED) {
      // The job failed; the event stream carries the details (and a replay after reconnect).
      Deliver(TaskFailure{-1, FailureCause::kUnspecified, s.error_message()});
      return;
    }
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) return;  // Shut down.
    last_error = s.error_message();
    // Transient errors are tolerated for a whole heartbeat timeout: one dropped connection on a
    // long run must not bring the gang down.
    if (absl::Now() - last_ok > options_.heartbeat_timeout) {
      Deliver(TaskFailure{-1, FailureCause::kServiceUnreachable,
                          absl::StrCat("lost the coordination service at ",
                                       options_.coordinator_address, ": no heartbeat succeeded for ",
                                       absl::FormatDuration(options_.heartbeat_timeout),
                                       " (last error: ", last_error,
                                       "); process 0's sidecar died or the network failed")});
      return;
    }
  }
}

void Agent::WatchLoop() {
  pthread_setname_np(pthread_self(), "agent-watch");
  Backoff backoff(absl::Milliseconds(50), absl::Seconds(2));
  while (!stop_.HasBeenNotified()) {
    grpc::ClientContext ctx;
    AddToken(&ctx, options_.token);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      watch_context_ = &ctx;
    }
    pb::WatchJobRequest req;
    req.set_task_id(options_.task);
    req.set_incarnation(incarnation_);
    std::unique_ptr<grpc::ClientReader<pb::JobEvent>> reader = stub_->WatchJob(&ctx, req);
    pb::JobEvent event;
    while (reader->Read(&event)) {
      Deliver(FromProto(event));
      backoff = Backoff(absl::Milliseconds(50), absl::Seconds(2));
    }
    grpc::Status s = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      LogWarning("event stream refused: ", s.error_message());
      return;
    }
    // The service replays past events on a new stream, so a reconnect loses nothing; a dead
    // service is the heartbeat loop's call.
    if (stop_.WaitForNotificationWithTimeout(backoff.Next())) return;
  }
}

template <typename Req, typename Resp, typename Invoke>
void Agent::Unary(Req req, absl::Duration timeout, Invoke invoke, Callback<Resp> done) {
  struct Call {
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
  };
  auto call = std::make_shared<Call>();
  call->req = std::move(req);
  call->req.set_task_id(options_.task);
  call->req.set_incarnation(incarnation_);
  AddToken(&call->ctx, options_.token);
  call->ctx.set_deadline(ToChronoDeadline(timeout));
  call->ctx.set_wait_for_ready(true);
  bool refused = false;
  {
    absl::MutexLock lock(&mu_);
    refused = stopping_ && !std::is_same_v<Req, pb::ReportErrorRequest>;
    if (!refused) in_flight_.insert(&call->ctx);
  }
  if (refused) {
    done(absl::CancelledError("the agent is stopping"), Resp());
    return;
  }
  invoke(stub_->async(), &call->ctx, &call->req, &call->resp,
         [this, call, done = std::move(done)](grpc::Status s) {
           done(FromGrpcStatus(s), call->resp);
           absl::MutexLock lock(&mu_);
           in_flight_.erase(&call->ctx);
         });
}

void Agent::InsertKeyValue(pb::InsertKeyValueRequest req,
                           Callback<pb::InsertKeyValueResponse> done) {
  OnSession<pb::InsertKeyValueRequest, pb::InsertKeyValueResponse>(
      std::move(req), [](pb::SessionRequest* c, auto r) { *c->mutable_insert_key_value() = std::move(r); },
      [](const pb::SessionResponse&) { return pb::InsertKeyValueResponse(); }, std::move(done));
}

void Agent::GetKeyValue(pb::GetKeyValueRequest req, Callback<pb::GetKeyValueResponse> done) {
  OnSession<pb::GetKeyValueRequest, pb::GetKeyValueResponse>(
      std::move(req), [](pb::SessionRequest* c, auto r) { *c->mutable_get_key_value() = std::move(r); },
      [](const pb::SessionResponse& r) { return r.get_key_value(); }, std::move(done));
}

void Agent::TryGetKeyValue(pb::TryGetKeyValueRequest req,
                           Callback<pb::TryGetKeyValueResponse> done) {
  OnSession<pb::TryGetKeyValueRequest, pb::TryGetKeyValueResponse>(
      std::move(req),
      [](pb::SessionRequest* c, auto r) { *c->mutable_try_get_key_value() = std::move(r); },
      [](const pb::SessionResponse& r) {
        pb::TryGetKeyValueResponse out;
        *out.mutable_kv() = r.get_key_value().kv();
        return out;
      },
      std::move(done));
}

void Agent::GetKeyValueDir(pb::GetKeyValueDirRequest req,
                           Callback<pb::GetKeyValueDirResponse> done) {
  OnSession<pb::GetKeyValueDirRequest, pb::GetKeyValueDirResponse>(
      std::move(req),
      [](pb::SessionRequest* c, auto r) { *c->mutable_get_key_value_dir() = std::move(r); },
      [](const pb::SessionResponse& r) { return r.get_key_value_dir(); }, std::move(done));
}

void Agent::DeleteKeyValue(pb::DeleteKeyValueRequest req,
                           Callback<pb::DeleteKeyValueResponse> done) {
  OnSession<pb::DeleteKeyValueRequest, pb::DeleteKeyValueResponse>(
      std::move(req), [](pb::SessionRequest* c, auto r) { *c->mutable_delete_key_value() = std::move(r); },
      [](const pb::SessionResponse&) { return pb::DeleteKeyValueResponse(); }, std::move(done));
}

void Agent::IncrementKeyValue(pb::IncrementKeyValueRequest req,
                              Callback<pb::IncrementKeyValueResponse> done) {
  OnSession<pb::IncrementKeyValueRequest, pb::IncrementKeyValueResponse>(
      std::move(req),
      [](pb::SessionRequest* c, auto r) { *c->mutable_increment_key_value() = std::move(r); },
      [](const pb::SessionResponse& r) { return r.increment_key_value(); }, std::move(done));
}

void Agent::Barrier(pb::BarrierRequest req, Callback<pb::BarrierResponse> done) {
  std::string id = req.barrier_id();
  bool duplicate = false;
  {
    absl::MutexLock lock(&mu_);
    duplicate = !barriers_in_progress_.insert(id).second;
    if (!duplicate) req.set_counter(barrier_counters_[id]);
  }
  if (duplicate) {
    done(absl::FailedPreconditionError(absl::StrCat(
             "barrier '", id, "' is already in progress in this process; a process may wait in a "
                              "given barrier only once at a time")),
         pb::BarrierResponse());
    return;
  }
  OnSession<pb::BarrierRequest, pb::BarrierResponse>(
      std::move(req), [](pb::SessionRequest* c, auto r) { *c->mutable_barrier() = std::move(r); },
      [](const pb::SessionResponse& r) { return r.barrier(); },
      [this, id, done = std::move(done)](absl::Status s, const pb::BarrierResponse& r) {
        {
          absl::MutexLock lock(&mu_);
          barriers_in_progress_.erase(id);
          ++barrier_counters_[id];
        }
        done(s, r);
      });
}

void Agent::CancelBarrier(pb::CancelBarrierRequest req, Callback<pb::CancelBarrierResponse> done) {
  bool waiting = false;
  {
    absl::MutexLock lock(&mu_);
    waiting = barriers_in_progress_.contains(req.barrier_id());
    auto it = barrier_counters_.find(req.barrier_id());
    req.set_counter(it == barrier_counters_.end() ? 0 : it->second);
  }
  if (!waiting) {
    done(absl::FailedPreconditionError(absl::StrCat(
             "barrier '", req.barrier_id(),
             "' is not in progress in this process; only a waiting barrier can be cancelled")),
         pb::CancelBarrierResponse());
    return;
  }
  OnSession<pb::CancelBarrierRequest, pb::CancelBarrierResponse>(
      std::move(req), [](pb::SessionRequest* c, auto r) { *c->mutable_cancel_barrier() = std::move(r); },
      [](const pb::SessionResponse&) { return pb::CancelBarrierResponse(); }, std::move(done));
}

void Agent::ReportPreemption(Callback<pb::ReportPreemptionResponse> done) {
  preemption_reported_.store(true);
  Unary<pb::ReportPreemptionRequest, pb::ReportPreemptionResponse>(
      pb::ReportPreemptionRequest(), kShortCallTimeout,
      [](auto* a, auto* c, auto* q, auto* r, auto cb) {
        a->ReportPreemption(c, q, r, std::move(cb));
      },
      std::move(done));
}

void Agent::ReportError(coordination::FailureCause cause, std::string message,
                        Callback<pb::ReportErrorResponse> done) {
  pb::ReportErrorRequest req;
  req.set_cause(coordination::ToProto(cause));
  req.set_message(std::move(message));
  Unary<pb::ReportErrorRequest, pb::ReportErrorResponse>(
      std::move(req), absl::Seconds(10),
      [](auto* a, auto* c, auto* q, auto* r, auto cb) { a->ReportError(c, q, r, std::move(cb)); },
      std::move(done));
}

void Agent::Shutdown(Callback<pb::ShutdownTaskResponse> done) {
  Unary<pb::ShutdownTaskRequest, pb::ShutdownTaskResponse>(
      pb::ShutdownTaskRequest(), options_.shutdown_timeout + absl::Seconds(5),
      [](auto* a, auto* c, auto* q, auto* r, auto cb) { a->ShutdownTask(c, q, r, std::move(cb)); },
      [this, done = std::move(done)](absl::Status s, const pb::ShutdownTaskResponse& r) {
        connected_.store(false);
        {
          absl::MutexLock lock(&mu_);
          stopping_ = true;
          if (watch_context_ != nullptr) watch_context_->TryCancel();
        }
        NotifyStop();
        done(s, r);
      });
}

}  // namespace cohort::agent
