#include "coordination/client/agent.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"
#include "coordination/client/grpc_coordination_stub.h"
#include "coordination/wire/proto_convert.h"

namespace cohort::coordination {
namespace {

// How often a task of a newer restart attempt asks again while the service runs an earlier one.
constexpr absl::Duration kAwaitingAttemptRetry = absl::Milliseconds(200);

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

}  // namespace

AgentOptions AgentOptionsFor(const JobSettings& settings) {
  AgentOptions o;
  o.coordinator_address = settings.coordinator_address;
  o.task = settings.process_id;
  o.num_tasks = settings.num_processes;
  o.token = settings.token;
  o.initialization_timeout = settings.timeouts.initialization;
  o.heartbeat_timeout = settings.timeouts.heartbeat;
  o.shutdown_timeout = settings.timeouts.shutdown;
  o.restart_attempt = settings.restart_attempt;
  return o;
}

Agent::Agent(AgentOptions options)
    : Agent(options,
            std::make_unique<GrpcCoordinationStub>(options.coordinator_address, options.token),
            Clock::Real()) {}

Agent::Agent(AgentOptions options, std::unique_ptr<CoordinationStub> stub, Clock* clock)
    : options_(std::move(options)),
      incarnation_(RandomIncarnation()),
      stub_(std::move(stub)),
      clock_(clock) {}

Agent::~Agent() {
  StopBackgroundThreads();
  FailCalls(absl::CancelledError("the agent is stopping"));
  stub_->CancelAll();
  // Unconditional: a completion still to come references this object. The wait is bounded, since
  // every call has a deadline and a cancelled call completes promptly.
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stub_calls_ == 0; };
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&drained));
}

void Agent::Cancel() { StopBackgroundThreads(); }

void Agent::NotifyStop() {
  // Notify() may run only once; two threads can get here (shutdown completion, destructor).
  absl::MutexLock lock(&mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
}

void Agent::StopBackgroundThreads() {
  std::unique_ptr<CoordinationStub::Watch> watch;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    watch = std::move(watch_);
  }
  if (watch != nullptr) watch->Cancel();
  NotifyStop();
  // Withdraws a registration in progress.
  if (!connected_.load()) stub_->CancelAll();
  if (heartbeat_thread_.joinable() && heartbeat_thread_.get_id() != std::this_thread::get_id()) {
    heartbeat_thread_.join();
  }
  if (watch_thread_.joinable() && watch_thread_.get_id() != std::this_thread::get_id()) {
    watch_thread_.join();
  }
}

absl::Status Agent::Refusal() const {
  absl::MutexLock lock(&mu_);
  if (service_lost_) return absl::UnavailableError(*service_lost_);
  return absl::CancelledError("the agent is stopping");
}

uint64_t Agent::BeginCall(std::function<void(absl::Status)> fail, bool even_when_stopping) {
  absl::MutexLock lock(&mu_);
  // Nothing is left to answer: fail at once rather than wait for a channel that never comes.
  if (service_lost_) return 0;
  if (stopping_ && !even_when_stopping) return 0;
  uint64_t id = ++last_call_;
  waiting_calls_.emplace(id, std::move(fail));
  ++stub_calls_;  // The call goes to the stub next; EndStubCall() follows its completion.
  return id;
}

bool Agent::TakeCall(uint64_t id) {
  absl::MutexLock lock(&mu_);
  return waiting_calls_.erase(id) > 0;
}

void Agent::EndStubCall() {
  absl::MutexLock lock(&mu_);
  --stub_calls_;
}

void Agent::FailCalls(const absl::Status& status) {
  absl::flat_hash_map<uint64_t, std::function<void(absl::Status)>> calls;
  {
    absl::MutexLock lock(&mu_);
    calls.swap(waiting_calls_);
  }
  for (auto& [id, fail] : calls) fail(status);
}

Agent::StubCallback Agent::CountStubCall(StubCallback done) {
  {
    absl::MutexLock lock(&mu_);
    ++stub_calls_;
  }
  return [this, done = std::move(done)](absl::Status s) {
    done(std::move(s));
    absl::MutexLock lock(&mu_);
    --stub_calls_;
  };
}

template <typename Req, typename Resp, typename Done>
void Agent::OnStub(void (CoordinationStub::*method)(const Req&, Resp*, StubCallback), Req request,
                   Done done) {
  request.set_task_id(options_.task);
  request.set_incarnation(incarnation_);
  // The user's callback runs once: from the stub's completion, or earlier from FailCalls.
  auto user = std::make_shared<Done>(std::move(done));
  uint64_t id = BeginCall(
      [user](absl::Status s) {
        Resp none;
        (*user)(std::move(s), none);
      },
      false);
  if (id == 0) {
    Resp none;
    (*user)(Refusal(), none);
    return;
  }
  auto response = std::make_shared<Resp>();
  (stub_.get()->*method)(request, response.get(), [this, id, user, response](absl::Status s) {
    if (TakeCall(id)) (*user)(std::move(s), *response);
    EndStubCall();
  });
}

template <typename Req, typename Resp>
void Agent::OnStubWithTimeout(void (CoordinationStub::*method)(const Req&, Resp*, absl::Duration,
                                                               StubCallback),
                              Req request, absl::Duration timeout, bool even_when_stopping,
                              DoneCallback done, std::shared_ptr<Resp> response) {
  request.set_task_id(options_.task);
  request.set_incarnation(incarnation_);
  auto user = std::make_shared<DoneCallback>(std::move(done));
  uint64_t id = BeginCall([user](absl::Status s) { (*user)(std::move(s)); }, even_when_stopping);
  if (id == 0) {
    (*user)(Refusal());
    return;
  }
  if (response == nullptr) response = std::make_shared<Resp>();
  (stub_.get()->*method)(request, response.get(), timeout,
                         [this, id, user, response](absl::Status s) {
                           if (TakeCall(id)) (*user)(std::move(s));
                           EndStubCall();
                         });
}

template <typename Req, typename Resp>
absl::Status Agent::CallAndWait(void (CoordinationStub::*method)(const Req&, Resp*, absl::Duration,
                                                                 StubCallback),
                                const Req& request, Resp* response, absl::Duration timeout) {
  absl::Notification done;
  absl::Status status;
  (stub_.get()->*method)(request, response, timeout, CountStubCall([&](absl::Status s) {
                           status = std::move(s);
                           done.Notify();
                         }));
  done.WaitForNotification();  // Bounded by `timeout`.
  return status;
}

absl::Status Agent::Connect(EventCallback on_event) {
  {
    absl::MutexLock lock(&mu_);
    on_event_ = std::move(on_event);
  }
  const absl::Time deadline = clock_->Now() + options_.initialization_timeout;
  pb::RegisterTaskRequest req;
  req.set_task_id(options_.task);
  req.set_incarnation(incarnation_);
  req.set_num_tasks(options_.num_tasks);
  req.set_hostname(options_.where.empty() ? Hostname() : options_.where);
  req.set_pid(options_.pid != 0 ? options_.pid : getpid());
  if (options_.restart_attempt) req.set_restart_attempt(*options_.restart_attempt);

  Backoff backoff(absl::Milliseconds(100), absl::Seconds(5));
  absl::Status last;
  pb::RegisterTaskResponse resp;
  // The service answered that it runs an earlier restart attempt than this task's: it is about to
  // be replaced by this attempt's (restarting in place), so a refused connection is that moment,
  // not a lost service, and retries come often (the new one is up within a second).
  bool awaiting_attempt = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("agent stopped while connecting");
    }
    absl::Notification answered;
    stub_->RegisterTask(req, &resp, std::max(deadline - clock_->Now(), absl::ZeroDuration()),
                        CountStubCall([&](absl::Status s) {
                          last = std::move(s);
                          answered.Notify();
                        }));
    bool stopped_meanwhile = false;
    {
      // Cancel() may have run between the check above and the call: withdraw it then.
      absl::MutexLock lock(&mu_);
      stopped_meanwhile = stopping_;
    }
    if (stopped_meanwhile) stub_->CancelAll();
    // Bounded by the initialization timeout. Meanwhile, note whether a connection to the
    // service is open: once it was, a refused connection means the service died, not that it
    // has yet to start.
    while (!answered.WaitForNotificationWithTimeout(absl::Milliseconds(50))) {
      stub_->ServiceConnected();
    }
    if (last.ok()) break;
    awaiting_attempt |= IsAwaitingAttempt(last);
    if (absl::IsUnavailable(last) && stub_->ServiceReached() && !awaiting_attempt) {
      absl::Status probe = ProbeService();
      if (absl::IsUnavailable(probe)) {
        return absl::UnavailableError(absl::StrCat(
            "lost the coordination service at ", options_.coordinator_address,
            " while waiting for every process to register: its connection was refused or reset (",
            probe.message(), "); process 0's sidecar died or was killed (its log says why)"));
      }
    }
    // Unavailable: the coordinator is not up yet (pods start in any order). Superseded: the
    // service replaced this attempt by a retry of the same process.
    bool retryable = absl::IsUnavailable(last) || IsSuperseded(last);
    absl::Duration wait =
        awaiting_attempt ? std::min(backoff.Next(), kAwaitingAttemptRetry) : backoff.Next();
    if (!retryable || clock_->Now() + wait >= deadline) break;
    LogDebug("registration attempt ", backoff.attempts(), " failed (", last.message(),
             "); retrying in ", absl::FormatDuration(wait));
    if (clock_->WaitFor(stop_, wait)) return absl::CancelledError("agent stopped while connecting");
  }
  if (!last.ok()) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("agent stopped while connecting");
    }
    // Unavailable is retried until the deadline, so both codes mean the time ran out.
    if (absl::IsDeadlineExceeded(last) || absl::IsUnavailable(last)) {
      std::string last_error =
          absl::IsUnavailable(last) ? absl::StrCat(" (last error: ", last.message(), ")") : "";
      if (!stub_->ServiceReached()) {
        return absl::DeadlineExceededError(absl::StrCat(
            "could not reach the coordinator at ", options_.coordinator_address, " within ",
            absl::FormatDuration(options_.initialization_timeout), last_error,
            ": check COHORT_COORDINATOR_ADDRESS, that process 0 (its sidecar) is running, and "
            "that the port is open"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "reached the coordinator at ", options_.coordinator_address,
          " but not every process registered within ",
          absl::FormatDuration(options_.initialization_timeout), last_error,
          "; the coordinator's log and its cohort_task_state metric name the missing ranks"));
    }
    return last;
  }
  service_incarnation_ = resp.service_incarnation();
  connected_.store(true);
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
  return absl::OkStatus();
}

void Agent::Deliver(const JobEvent& event) {
  EventCallback cb;
  const bool is_failure = std::holds_alternative<TaskFailure>(event);
  const bool lost =
      is_failure && std::get<TaskFailure>(event).cause == FailureCause::kServiceUnreachable;
  {
    absl::MutexLock lock(&mu_);
    if (lost && !service_lost_) service_lost_ = std::get<TaskFailure>(event).message;
    bool& delivered = is_failure ? failure_delivered_ : preemption_delivered_;
    if (!delivered) cb = on_event_;
    delivered = true;
  }
  if (cb) cb(event);
  // The service fails waiting calls itself when a task fails; when the service itself is lost,
  // nothing would, so they fail here: also when the loss follows a failure already delivered
  // (the service stops soon after a job failure, and a call may still wait on it).
  if (lost) {
    FailCalls(absl::UnavailableError(std::get<TaskFailure>(event).message));
    stub_->CancelAll();
  }
}

bool Agent::job_failed() const {
  absl::MutexLock lock(&mu_);
  return failure_delivered_;
}

absl::Status Agent::ProbeService() {
  pb::HeartbeatRequest req;
  req.set_task_id(options_.task);
  req.set_incarnation(incarnation_);
  pb::HeartbeatResponse resp;
  return CallAndWait(&CoordinationStub::Heartbeat, req, &resp, kProbeTimeout);
}

void Agent::LoseService(absl::string_view why) {
  Deliver(TaskFailure{
      -1, FailureCause::kServiceUnreachable,
      absl::StrCat("lost the coordination service at ", options_.coordinator_address, ": ", why)});
}

absl::Duration HeartbeatInterval(absl::Duration heartbeat_timeout) {
  return std::clamp(heartbeat_timeout / 4, absl::Milliseconds(50), absl::Seconds(10));
}

void Agent::HeartbeatLoop() {
  pthread_setname_np(pthread_self(), "agent-heartbeat");
  const absl::Duration interval = HeartbeatInterval(options_.heartbeat_timeout);
  absl::Time last_ok = clock_->Now();
  std::string last_error;
  while (!clock_->WaitFor(stop_, interval)) {
    pb::HeartbeatRequest req;
    req.set_task_id(options_.task);
    req.set_incarnation(incarnation_);
    {
      absl::MutexLock lock(&mu_);
      if (progress_at_) {
        ToProto(progress_, req.mutable_progress());
        req.set_progress_age_ms(absl::ToInt64Milliseconds(clock_->Now() - *progress_at_));
      }
      if (step_) {
        req.set_step(*step_);
        req.set_step_age_ms(absl::ToInt64Milliseconds(clock_->Now() - step_at_));
      }
    }
    pb::HeartbeatResponse resp;
    absl::Status s =
        CallAndWait(&CoordinationStub::Heartbeat, req, &resp, std::max(interval, absl::Seconds(1)));
    if (s.ok()) {
      if (resp.service_incarnation() != service_incarnation_) {
        Deliver(TaskFailure{-1, FailureCause::kServiceUnreachable,
                            "the coordination service restarted (new incarnation), so the job's "
                            "state is lost; the job must restart"});
        return;
      }
      last_ok = clock_->Now();
      continue;
    }
    if (absl::IsAborted(s)) {
      // The job failed; the event stream carries the details (and a replay after reconnect).
      Deliver(TaskFailure{-1, FailureCause::kUnspecified, std::string(s.message())});
      return;
    }
    if (absl::IsFailedPrecondition(s)) return;  // Shut down.
    if (absl::IsUnavailable(s)) {
      // Refused or reset (heartbeats do not wait for the channel): the service's process is
      // gone, and the job's state with it.
      LoseService(absl::StrCat("its connection was refused or reset (", s.message(),
                               "); process 0's sidecar died or was killed"));
      return;
    }
    last_error = std::string(s.message());
    // Transient errors are tolerated for a whole heartbeat timeout: one dropped connection on a
    // long run must not bring the gang down.
    if (clock_->Now() - last_ok > options_.heartbeat_timeout) {
      Deliver(TaskFailure{
          -1, FailureCause::kServiceUnreachable,
          absl::StrCat(
              "lost the coordination service at ", options_.coordinator_address,
              ": no heartbeat succeeded for ", absl::FormatDuration(options_.heartbeat_timeout),
              " (last error: ", last_error, "); process 0's host froze or the network failed")});
      return;
    }
  }
}

void Agent::WatchLoop() {
  pthread_setname_np(pthread_self(), "agent-watch");
  Backoff backoff(absl::Milliseconds(50), absl::Seconds(2));
  pb::WatchJobRequest req;
  req.set_task_id(options_.task);
  req.set_incarnation(incarnation_);
  while (true) {
    absl::Notification ended;
    absl::Status end_status;
    std::atomic<bool> got_event{false};
    std::unique_ptr<CoordinationStub::Watch> watch = stub_->WatchJob(
        req,
        [this, &got_event](const pb::JobEvent& e) {
          got_event.store(true);
          Deliver(FromProto(e));
        },
        CountStubCall([&](absl::Status s) {
          end_status = std::move(s);
          ended.Notify();
        }));
    bool stopped_meanwhile = false;
    {
      absl::MutexLock lock(&mu_);
      stopped_meanwhile = stopping_;
      if (!stopping_) watch_ = std::move(watch);
    }
    // Outside the lock: the stream's end may be reported inline, and that takes the lock.
    if (stopped_meanwhile) watch->Cancel();
    ended.WaitForNotification();
    std::unique_ptr<CoordinationStub::Watch> ended_watch;
    {
      absl::MutexLock lock(&mu_);
      ended_watch = std::move(watch_);
      if (stopping_) return;
    }
    if (absl::IsFailedPrecondition(end_status) || absl::IsUnauthenticated(end_status)) {
      LogWarning("event stream refused: ", end_status.message());
      return;
    }
    // The stream ended by itself: the connection closed. A service that refuses or resets a
    // new one is gone; one that answers gets a new stream (it replays past events, so nothing
    // is lost); a silent one is the heartbeat timeout's call.
    if (absl::Status probe = ProbeService(); absl::IsUnavailable(probe)) {
      LoseService(absl::StrCat("its connection closed (", end_status.message(),
                               ") and a new one was refused (", probe.message(),
                               "); process 0's sidecar died or was killed"));
      return;
    }
    if (got_event.load()) backoff.Reset();
    if (clock_->WaitFor(stop_, backoff.Next())) return;
  }
}

void Agent::InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                           DoneCallback done) {
  pb::InsertKeyValueRequest req;
  req.mutable_kv()->set_key(std::move(key));
  req.mutable_kv()->set_value(std::move(value));
  req.set_allow_overwrite(allow_overwrite);
  OnStub(&CoordinationStub::InsertKeyValue, std::move(req),
         [done = std::move(done)](absl::Status s, pb::InsertKeyValueResponse&) { done(s); });
}

void Agent::GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) {
  pb::GetKeyValueRequest req;
  req.set_key(std::move(key));
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  OnStub(&CoordinationStub::GetKeyValue, std::move(req),
         [done = std::move(done)](absl::Status s, pb::GetKeyValueResponse& r) {
           if (!s.ok()) return done(std::move(s));
           done(std::move(*r.mutable_kv()->mutable_value()));
         });
}

void Agent::TryGetKeyValue(std::string key, ValueCallback done) {
  pb::TryGetKeyValueRequest req;
  req.set_key(std::move(key));
  OnStub(&CoordinationStub::TryGetKeyValue, std::move(req),
         [done = std::move(done)](absl::Status s, pb::TryGetKeyValueResponse& r) {
           if (!s.ok()) return done(std::move(s));
           done(std::move(*r.mutable_kv()->mutable_value()));
         });
}

void Agent::GetKeyValueDir(std::string directory, EntriesCallback done) {
  pb::GetKeyValueDirRequest req;
  req.set_directory(std::move(directory));
  OnStub(&CoordinationStub::GetKeyValueDir, std::move(req),
         [done = std::move(done)](absl::Status s, pb::GetKeyValueDirResponse& r) {
           if (!s.ok()) return done(std::move(s));
           done(FromProto(r.kvs()));
         });
}

void Agent::DeleteKeyValue(std::string key, DoneCallback done) {
  pb::DeleteKeyValueRequest req;
  req.set_key(std::move(key));
  OnStub(&CoordinationStub::DeleteKeyValue, std::move(req),
         [done = std::move(done)](absl::Status s, pb::DeleteKeyValueResponse&) { done(s); });
}

void Agent::IncrementKeyValue(std::string key, int64_t increment, IntCallback done) {
  pb::IncrementKeyValueRequest req;
  req.set_key(std::move(key));
  req.set_increment(increment);
  OnStub(&CoordinationStub::IncrementKeyValue, std::move(req),
         [done = std::move(done)](absl::Status s, pb::IncrementKeyValueResponse& r) {
           if (!s.ok()) return done(std::move(s));
           done(r.value());
         });
}

void Agent::Barrier(std::string id, absl::Duration timeout, std::vector<TaskId> participants,
                    DoneCallback done) {
  pb::BarrierRequest req;
  bool duplicate = false;
  {
    absl::MutexLock lock(&mu_);
    duplicate = !barriers_in_progress_.insert(id).second;
    if (!duplicate) req.set_counter(barrier_counters_[id]);
  }
  if (duplicate) {
    done(absl::FailedPreconditionError(
        absl::StrCat("barrier '", id,
                     "' is already in progress in this process; a process may wait in a "
                     "given barrier only once at a time")));
    return;
  }
  req.set_barrier_id(id);
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  for (TaskId t : participants) req.add_task_ids(t);
  OnStub(&CoordinationStub::Barrier, std::move(req),
         [this, id, done = std::move(done)](absl::Status s, pb::BarrierResponse&) {
           {
             absl::MutexLock lock(&mu_);
             barriers_in_progress_.erase(id);
             ++barrier_counters_[id];
           }
           done(s);
         });
}

void Agent::CancelBarrier(std::string id, DoneCallback done) {
  pb::CancelBarrierRequest req;
  bool waiting = false;
  {
    absl::MutexLock lock(&mu_);
    waiting = barriers_in_progress_.contains(id);
    auto it = barrier_counters_.find(id);
    req.set_counter(it == barrier_counters_.end() ? 0 : it->second);
  }
  if (!waiting) {
    done(absl::FailedPreconditionError(absl::StrCat(
        "barrier '", id,
        "' is not in progress in this process; only a waiting barrier can be cancelled")));
    return;
  }
  req.set_barrier_id(std::move(id));
  OnStub(&CoordinationStub::CancelBarrier, std::move(req),
         [done = std::move(done)](absl::Status s, pb::CancelBarrierResponse&) { done(s); });
}

void Agent::ReportPreemption(DoneCallback done) {
  preemption_reported_.store(true);
  OnStubWithTimeout(&CoordinationStub::ReportPreemption, pb::ReportPreemptionRequest(),
                    kShortCallTimeout, false, std::move(done));
}

void Agent::ReportError(FailureCause cause, std::string message, DoneCallback done) {
  pb::ReportErrorRequest req;
  req.set_cause(ToProto(cause));
  req.set_message(std::move(message));
  OnStubWithTimeout(&CoordinationStub::ReportError, std::move(req), kShortCallTimeout, true,
                    std::move(done));
}

void Agent::ReportProgress(std::vector<CollectiveProgress> progress, DoneCallback done) {
  std::optional<pb::HeartbeatRequest> prompt;
  {
    absl::MutexLock lock(&mu_);
    progress_ = std::move(progress);
    const absl::Time now = clock_->Now();
    progress_at_ = now;
    const bool stalled = std::any_of(progress_.begin(), progress_.end(), [](const auto& c) {
      return !c.pending.empty() && c.pending_for >= kPromptProgressAfter;
    });
    if (stalled && connected_ && now - progress_sent_at_ >= kPromptProgressEvery) {
      progress_sent_at_ = now;
      prompt.emplace();
      ToProto(progress_, prompt->mutable_progress());
      prompt->set_progress_age_ms(0);
      if (step_) {
        prompt->set_step(*step_);
        prompt->set_step_age_ms(absl::ToInt64Milliseconds(now - step_at_));
      }
    }
  }
  done(absl::OkStatus());
  if (prompt) {
    // A heartbeat of its own: what a lost one costs is the next one's lag, nothing more.
    OnStubWithTimeout(&CoordinationStub::Heartbeat, *std::move(prompt), kShortCallTimeout, false,
                      [](absl::Status) {});
  }
}

void Agent::ReportStep(int64_t step, DoneCallback done) {
  {
    absl::MutexLock lock(&mu_);
    if (step_ != step) step_at_ = clock_->Now();  // A repeat is no progress.
    step_ = step;
  }
  done(absl::OkStatus());
}

void Agent::GetJobProgress(ProgressCallback done) {
  auto response = std::make_shared<pb::GetJobProgressResponse>();
  OnStubWithTimeout(
      &CoordinationStub::GetJobProgress, pb::GetJobProgressRequest(), kShortCallTimeout, false,
      [response, done = std::move(done)](absl::Status s) {
        if (!s.ok()) {
          done(s);
        } else {
          done(FromProto(*response));
        }
      },
      response);
}

void Agent::Shutdown(DoneCallback done) {
  OnStubWithTimeout(&CoordinationStub::ShutdownTask, pb::ShutdownTaskRequest(),
                    options_.shutdown_timeout + absl::Seconds(5), false,
                    [this, done = std::move(done)](absl::Status s) {
                      connected_.store(false);
                      std::unique_ptr<CoordinationStub::Watch> watch;
                      {
                        absl::MutexLock lock(&mu_);
                        stopping_ = true;
                        watch = std::move(watch_);
                      }
                      if (watch != nullptr) watch->Cancel();
                      NotifyStop();
                      done(s);
                    });
}

}  // namespace cohort::coordination
