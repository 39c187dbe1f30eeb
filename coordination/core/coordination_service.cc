#include "coordination/core/coordination_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errors.h"
#include "common/log.h"
#include "coordination/core/error_details.h"

namespace cohort::coordination {
namespace {

// The number of a barrier call in messages ("call #1" has counter 0), safe for any counter a
// request carries.
uint64_t CallNumber(int64_t counter) { return static_cast<uint64_t>(counter) + 1; }

}  // namespace

CoordinationService::CoordinationService(ServiceConfig config, Clock* clock)
    : config_(std::move(config)), clock_(clock), service_incarnation_(RandomIncarnation()) {
  tasks_.resize(std::max(config_.num_tasks, 0));
  for (Task& t : tasks_) t.heartbeat_timeout = config_.heartbeat_timeout;
}

CoordinationService::~CoordinationService() {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  absl::Status stopping = absl::UnavailableError(
      "the coordination service is shutting down (the rank-0 sidecar is exiting)");
  for (auto& [task, call] : pending_registrations_) {
    deferred.Add([done = std::move(call.done), stopping] { done(stopping); });
  }
  pending_registrations_.clear();
  for (auto& [task, call] : shutdown_waiters_) {
    // A waiter whose caller went away (CancelOp) has no callback left.
    if (call.done) deferred.Add([done = std::move(call.done), stopping] { done(stopping); });
  }
  shutdown_waiters_.clear();
  for (auto& [id, barrier] : barriers_) {
    if (!barrier.done) FinishBarrierLocked(barrier, stopping, &deferred);
  }
  kv_.FailAllWaiters(stopping, &deferred);
  for (auto& [op, done] : task_state_watchers_) {
    deferred.Add([done = std::move(done), stopping] { done(stopping); });
  }
  task_state_watchers_.clear();
  for (AlivenessWait& wait : aliveness_waits_) {
    for (auto& [op, done] : wait.waiting) {
      deferred.Add([done = std::move(done), stopping] { done(stopping); });
    }
  }
  aliveness_waits_.clear();
}

std::string CoordinationService::TaskName(TaskId task) const {
  if (task < 0 || task >= static_cast<TaskId>(tasks_.size())) return absl::StrCat("rank ", task);
  const Task& t = tasks_[task];
  if (t.hostname.empty()) return absl::StrCat("rank ", task);
  if (t.pid == 0) return absl::StrCat("rank ", task, " (", t.hostname, ")");  // JAX sends no pid.
  return absl::StrCat("rank ", task, " (", t.hostname, " pid ", t.pid, ")");
}

absl::Status CoordinationService::ValidateRangeLocked(TaskId task) const {
  if (task < 0 || task >= static_cast<TaskId>(tasks_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "process id %d is out of range: this job has %d processes, so ids run 0..%d; check "
        "COHORT_PROCESS_ID and COHORT_NUM_PROCESSES",
        task, tasks_.size(), static_cast<int>(tasks_.size()) - 1));
  }
  return absl::OkStatus();
}

absl::Status CoordinationService::ValidateKeyValueCallerLocked(TaskId task,
                                                               Incarnation incarnation) const {
  if (task == kUnidentifiedTask) {
    if (job_failure_) return absl::AbortedError(job_failure_->message);
    return absl::OkStatus();
  }
  return ValidateCallerLocked(task, incarnation);
}

absl::Status CoordinationService::ValidateCallerLocked(TaskId task, Incarnation incarnation) const {
  if (absl::Status s = ValidateRangeLocked(task); !s.ok()) return s;
  if (job_failure_) return absl::AbortedError(job_failure_->message);
  const Task& t = tasks_[task];
  if (t.state == TaskState::kDisconnected || t.state == TaskState::kConnecting) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", task,
                     " is not connected yet; call initialize() and wait for it to return before "
                     "using the job"));
  }
  if (t.incarnation != incarnation) {
    return absl::AbortedError(absl::StrCat(
        "rank ", task, " sent incarnation ", incarnation, " but registered with ", t.incarnation,
        ": the process restarted after registering; the whole job must restart"));
  }
  if (t.state == TaskState::kShutDown) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", task, " already shut down; no calls are allowed after shutdown()"));
  }
  if (t.state == TaskState::kFailed) {
    return absl::AbortedError(absl::StrCat("rank ", task, " has failed"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Registration and liveness.

absl::Status CoordinationService::RegistrationRefusalLocked(const RegisterArgs& args) const {
  if (absl::Status s = ValidateRangeLocked(args.task); !s.ok()) return s;
  if (args.num_tasks != static_cast<int32_t>(tasks_.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_processes mismatch: rank %d believes the job has %d processes but the coordinator "
        "was started for %d; every process must be given the same COHORT_NUM_PROCESSES",
        args.task, args.num_tasks, tasks_.size()));
  }
  if (config_.restart_attempt && args.restart_attempt &&
      *config_.restart_attempt != *args.restart_attempt) {
    if (*args.restart_attempt < *config_.restart_attempt) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "rank %d (%s pid %d) belongs to restart attempt %d of the job, but this coordination "
          "service runs attempt %d: it is a leftover of an earlier attempt and must stop (its "
          "COHORT_RESTART_ATTEMPT must match the coordinator's)",
          args.task, args.hostname, args.pid, *args.restart_attempt, *config_.restart_attempt));
    }
    // The caller is of a newer gang and reached the previous gang's service, still draining at
    // the same address: its own will be there shortly, so the caller retries.
    return AwaitingAttemptError(absl::StrFormat(
        "this coordination service runs restart attempt %d of the job, an earlier one than rank "
        "%d's attempt %d; waiting for attempt %d's service",
        *config_.restart_attempt, args.task, *args.restart_attempt, *args.restart_attempt));
  }
  return absl::OkStatus();
}

OpId CoordinationService::RegisterTask(const RegisterArgs& args, DoneCallback done) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  auto reply = [&](absl::Status s) { deferred.Add([done, s] { done(s); }); };
  if (absl::Status refused = RegistrationRefusalLocked(args); !refused.ok()) {
    reply(refused);
    return 0;
  }
  if (job_failure_) {
    tasks_[args.task].told_of_failure = true;
    reply(absl::AbortedError(job_failure_->message));
    return 0;
  }
  Task& t = tasks_[args.task];
  switch (t.state) {
    case TaskState::kDisconnected: {
      t.state = TaskState::kConnecting;
      t.incarnation = args.incarnation;
      TaskStatesChangedLocked(&deferred);
      t.hostname = args.hostname;
      t.pid = args.pid;
      t.heartbeat_timeout = args.heartbeat_timeout.value_or(config_.heartbeat_timeout);
      t.protocol = args.protocol.empty() ? "cohort" : args.protocol;
      t.watch_broke = args.watch_broke;
      OpId op = NextOpLocked();
      ops_[op] = OpRef{OpKind::kRegister, args.task, ""};
      pending_registrations_[args.task] = PendingCall{op, std::move(done)};
      if (num_registered_++ == 0) {
        register_deadline_ = clock_->Now() + config_.register_timeout;
        first_registered_ = args.task;
      }
      LogDebug("rank ", args.task, " registered (", num_registered_, "/", tasks_.size(), ")");
      MaybeCompleteRegistrationLocked(&deferred);
      return op;
    }
    case TaskState::kConnecting: {
      if (t.incarnation != args.incarnation) {
        reply(absl::AlreadyExistsError(absl::StrFormat(
            "rank %d is already registered by another running process (%s pid %d); this process "
            "(%s pid %d) uses the same rank. Give every process a distinct COHORT_PROCESS_ID",
            args.task, t.hostname, t.pid, args.hostname, args.pid)));
        return 0;
      }
      // A retry of the same process's registration: the newer call takes over.
      PendingCall& pending = pending_registrations_[args.task];
      if (pending.done) {
        deferred.Add([old = std::move(pending.done)] { old(SupersededError("registration")); });
      }
      ops_.erase(pending.op);
      OpId op = NextOpLocked();
      ops_[op] = OpRef{OpKind::kRegister, args.task, ""};
      pending = PendingCall{op, std::move(done)};
      return op;
    }
    case TaskState::kConnected:
      if (t.incarnation == args.incarnation) {
        t.last_heartbeat = clock_->Now();
        reply(absl::OkStatus());  // An RPC retry after the connect barrier passed.
        return 0;
      }
      FailTaskLocked(TaskFailure{args.task, FailureCause::kRestarted,
                                 absl::StrFormat(
                                     "rank %d registered again with a new incarnation (%s pid %d): "
                                     "its process restarted after the job started, or a second "
                                     "process uses the same COHORT_PROCESS_ID; the job must "
                                     "restart as a whole",
                                     args.task, args.hostname, args.pid)},
                     &deferred);
      reply(absl::AbortedError(job_failure_->message));
      return 0;
    case TaskState::kFailed:
      reply(absl::AbortedError(absl::StrCat("rank ", args.task, " has failed")));
      return 0;
    case TaskState::kShutDown:
      reply(absl::FailedPreconditionError(
          absl::StrCat("rank ", args.task, " already shut down; start a new job to run again")));
      return 0;
  }
  return 0;
}

void CoordinationService::MaybeCompleteRegistrationLocked(Deferred* deferred) {
  if (num_registered_ != static_cast<int32_t>(tasks_.size())) return;
  absl::Time now = clock_->Now();
  for (Task& t : tasks_) {
    if (t.state == TaskState::kConnecting) {
      t.state = TaskState::kConnected;
      t.last_heartbeat = now;
    }
  }
  TaskStatesChangedLocked(deferred);
  for (auto& [task, call] : pending_registrations_) {
    ops_.erase(call.op);
    deferred->Add([done = std::move(call.done)] { done(absl::OkStatus()); });
  }
  pending_registrations_.clear();
  register_deadline_ = absl::InfiniteFuture();
  LogInfo("all ", tasks_.size(), " tasks registered");
}

absl::Status CoordinationService::Heartbeat(TaskId task, Incarnation incarnation,
                                            const std::vector<CollectiveProgress>* progress,
                                            absl::Duration progress_age,
                                            std::optional<StepReport> step) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateRangeLocked(task); !s.ok()) return s;
  Task& t = tasks_[task];
  if (t.state == TaskState::kConnected && t.incarnation != incarnation) {
    FailTaskLocked(TaskFailure{task, FailureCause::kRestarted,
                               absl::StrCat("rank ", task,
                                            " sent a heartbeat from a new incarnation: its process "
                                            "restarted after the job started")},
                   &deferred);
  }
  if (job_failure_) return absl::AbortedError(job_failure_->message);
  if (t.state != TaskState::kConnected) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", task, " is ", TaskStateName(t.state),
                                                      "; only connected tasks send heartbeats"));
  }
  t.last_heartbeat = clock_->Now();
  if (progress != nullptr) {
    t.progress = *progress;
    t.progress_at = t.last_heartbeat - progress_age;
  }
  if (step) {
    t.step = step->step;
    t.step_at = t.last_heartbeat - step->age;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TaskProgress>> CoordinationService::GetJobProgress(
    TaskId task, Incarnation incarnation) const {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateRangeLocked(task); !s.ok()) return s;
  if (tasks_[task].state == TaskState::kDisconnected || tasks_[task].incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", task, " must register before asking for the job's progress"));
  }
  const absl::Time now = clock_->Now();
  std::vector<TaskProgress> out;
  out.reserve(tasks_.size());
  for (TaskId id = 0; id < static_cast<TaskId>(tasks_.size()); ++id) {
    const Task& t = tasks_[id];
    TaskProgress p;
    p.task = id;
    p.state = t.state;
    if (t.last_heartbeat != absl::InfinitePast()) p.since_heartbeat = now - t.last_heartbeat;
    if (t.progress_at != absl::InfinitePast()) p.since_report = now - t.progress_at;
    p.communicators = t.progress;
    for (CollectiveProgress& c : p.communicators) {
      if (!c.pending.empty()) c.pending_for += now - t.progress_at;
    }
    out.push_back(std::move(p));
  }
  return out;
}

absl::Status CoordinationService::ReportError(TaskId task, Incarnation incarnation,
                                              FailureCause cause, absl::string_view message) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateRangeLocked(task); !s.ok()) return s;
  Task& t = tasks_[task];
  if (t.state == TaskState::kShutDown || t.state == TaskState::kFailed) return absl::OkStatus();
  // Incarnation 0 (never a process's own) is an observer's report, e.g. cohort-run seeing its
  // child die: it holds for whatever incarnation the rank has, even one that registered a moment
  // before its death and has yet to open its event stream.
  if (incarnation != kObserverIncarnation && t.state != TaskState::kDisconnected &&
      t.incarnation != incarnation) {
    return absl::AbortedError(
        absl::StrCat("rank ", task, ": error report from a stale incarnation"));
  }
  FailTaskLocked(TaskFailure{task, cause, std::string(message)}, &deferred);
  return absl::OkStatus();
}

CoordinationService::TaskStates CoordinationService::TaskStatesLocked() const {
  TaskStates states;
  states.version = task_states_version_;
  for (const Task& t : tasks_) states.tasks.push_back({t.state, t.incarnation, t.failure});
  return states;
}

void CoordinationService::TaskStatesChangedLocked(Deferred* deferred) {
  ++task_states_version_;
  RefreshAlivenessLocked(deferred);
  if (task_state_watchers_.empty()) return;
  TaskStates states = TaskStatesLocked();
  for (auto& [op, done] : task_state_watchers_) {
    ops_.erase(op);
    deferred->Add([done = std::move(done), states] { done(states); });
  }
  task_state_watchers_.clear();
}

OpId CoordinationService::WatchTaskStates(int64_t known_version, TaskStatesCallback done) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (known_version != task_states_version_) {
    deferred.Add([done = std::move(done), states = TaskStatesLocked()] { done(states); });
    return 0;
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kWatchTaskStates, kUnidentifiedTask, ""};
  task_state_watchers_[op] = std::move(done);
  return op;
}

void CoordinationService::FailTaskLocked(TaskFailure failure, Deferred* deferred) {
  if (failure.task >= 0 && failure.task < static_cast<TaskId>(tasks_.size())) {
    Task& t = tasks_[failure.task];
    if (t.state == TaskState::kConnecting) --num_registered_;
    t.state = TaskState::kFailed;
    t.failure = failure;
    t.failure->message = absl::StrCat(TaskName(failure.task), " failed because ",
                                      InfoOf(failure.cause).sentence, ": ", failure.message);
    TaskStatesChangedLocked(deferred);
  }
  if (job_failure_) {
    LogInfo(TaskName(failure.task), " is down too (", FailureCauseName(failure.cause),
            ") after the job failed");
    return;
  }
  std::string message = absl::StrCat(TaskName(failure.task), " failed because ",
                                     InfoOf(failure.cause).sentence, ": ", failure.message);
  failure.message = message;
  job_failure_ = failure;
  LogError("job failed: ", message);
  absl::Status aborted = absl::AbortedError(message);

  BroadcastLocked(*job_failure_, deferred);
  for (auto& [task, call] : pending_registrations_) {
    ops_.erase(call.op);
    deferred->Add([done = std::move(call.done), aborted] { done(aborted); });
  }
  pending_registrations_.clear();
  for (auto& [task, call] : shutdown_waiters_) {
    ops_.erase(call.op);
    if (call.done) deferred->Add([done = std::move(call.done), aborted] { done(aborted); });
  }
  shutdown_waiters_.clear();
  for (auto& [id, barrier] : barriers_) {
    if (!barrier.done) FinishBarrierLocked(barrier, aborted, deferred);
  }
  kv_.FailAllWaiters(aborted, deferred);
  absl::erase_if(ops_, [](const auto& entry) { return entry.second.kind == OpKind::kGet; });
}

void CoordinationService::BroadcastLocked(const JobEvent& event, Deferred* deferred) {
  std::vector<EventCallback> callbacks;
  callbacks.reserve(watchers_.size());
  for (const auto& [op, cb] : watchers_) callbacks.push_back(cb);
  deferred->Add([callbacks = std::move(callbacks), event] {
    for (const auto& cb : callbacks) cb(event);
  });
}

absl::StatusOr<OpId> CoordinationService::Watch(TaskId task, Incarnation incarnation,
                                                EventCallback on_event) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateRangeLocked(task); !s.ok()) return s;
  const Task& t = tasks_[task];
  if (t.state == TaskState::kDisconnected || t.incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", task, " must register before watching the job"));
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kWatch, task, ""};
  if (job_failure_) deferred.Add([on_event, e = *job_failure_] { on_event(e); });
  if (preemption_) deferred.Add([on_event, e = *preemption_] { on_event(e); });
  watchers_[op] = std::move(on_event);
  return op;
}

void CoordinationService::EndWatch(OpId op) {
  absl::MutexLock lock(&mu_);
  auto it = ops_.find(op);
  if (it == ops_.end() || it->second.kind != OpKind::kWatch) return;
  ops_.erase(it);
  watchers_.erase(op);
}

void CoordinationService::CancelOp(OpId op) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  auto it = ops_.find(op);
  if (it == ops_.end()) return;
  OpRef ref = it->second;
  ops_.erase(it);
  absl::Status cancelled = absl::CancelledError("the caller went away");
  switch (ref.kind) {
    case OpKind::kRegister: {
      auto reg = pending_registrations_.find(ref.task);
      if (reg == pending_registrations_.end() || reg->second.op != op) break;
      deferred.Add([done = std::move(reg->second.done), cancelled] { done(cancelled); });
      pending_registrations_.erase(reg);
      if (tasks_[ref.task].state == TaskState::kConnecting) {
        // Its connection closed while it waited for its peers: the process (or its sidecar)
        // died. Every process death is a job failure, whatever the moment.
        FailTaskLocked(TaskFailure{ref.task, FailureCause::kProcessExited,
                                   "its connection closed while it waited for the other "
                                   "processes to register: its sidecar (or, in standalone "
                                   "mode, its process) died or was killed"},
                       &deferred);
      }
      break;
    }
    case OpKind::kBarrier: {
      auto b = barriers_.find(ref.barrier_id);
      if (b == barriers_.end()) break;
      auto arrival = b->second.arrived.find(ref.task);
      if (arrival == b->second.arrived.end() || arrival->second.op != op) break;
      if (arrival->second.done) {
        deferred.Add([done = std::move(arrival->second.done), cancelled] { done(cancelled); });
      }
      // The task stays counted as arrived: its call reached the barrier, and a retry with the
      // same counter re-attaches. A dead task is caught by heartbeats or by its agent.
      arrival->second = PendingCall{0, nullptr};
      break;
    }
    case OpKind::kAlive: {
      for (auto wait = aliveness_waits_.begin(); wait != aliveness_waits_.end(); ++wait) {
        auto call = std::find_if(wait->waiting.begin(), wait->waiting.end(),
                                 [op](const auto& w) { return w.first == op; });
        if (call == wait->waiting.end()) continue;
        deferred.Add([done = std::move(call->second), cancelled] { done(cancelled); });
        wait->waiting.erase(call);
        // Its caller is no longer in the barrier, unless it waits in it with another call.
        if (--wait->in_barrier[ref.task] == 0) wait->in_barrier.erase(ref.task);
        if (wait->waiting.empty()) aliveness_waits_.erase(wait);
        break;
      }
      break;
    }
    case OpKind::kWatchTaskStates: {
      auto w = task_state_watchers_.find(op);
      if (w == task_state_watchers_.end()) break;
      deferred.Add([done = std::move(w->second), cancelled] { done(cancelled); });
      task_state_watchers_.erase(w);
      break;
    }
    case OpKind::kGet: {
      if (auto done = kv_.RemoveWaiter(op)) {
        deferred.Add([done = std::move(done), cancelled] { done(cancelled); });
      }
      break;
    }
    case OpKind::kShutdown: {
      auto w = shutdown_waiters_.find(ref.task);
      if (w == shutdown_waiters_.end() || w->second.op != op) break;
      deferred.Add([done = std::move(w->second.done), cancelled] { done(cancelled); });
      w->second = PendingCall{0, nullptr};  // Still counts as having reached the barrier.
      break;
    }
    case OpKind::kWatch:
      watchers_.erase(op);
      if (tasks_[ref.task].state == TaskState::kConnected) {
        // The event stream of a live task never ends by itself: its connection closed without
        // a shutdown, so the agent's process died (a refused or reset connection, not a silent
        // one, which the heartbeat timeout catches).
        const std::string& words = tasks_[ref.task].watch_broke;
        FailTaskLocked(
            TaskFailure{ref.task, FailureCause::kProcessExited,
                        !words.empty()
                            ? words
                            : "its connection to the coordination service closed without a "
                              "shutdown: its sidecar (or, in standalone mode, its process) died "
                              "or was killed"},
            &deferred);
      }
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Shutdown barrier.

OpId CoordinationService::ShutdownTask(TaskId task, Incarnation incarnation, DoneCallback done) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  absl::Status s = ValidateCallerLocked(task, incarnation);
  if (!s.ok()) {
    if (s.code() == absl::StatusCode::kFailedPrecondition &&
        tasks_[task].state == TaskState::kShutDown) {
      s = absl::OkStatus();  // A retry after the barrier passed.
    }
    deferred.Add([done, s] { done(s); });
    return 0;
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kShutdown, task, ""};
  if (shutdown_waiters_.empty()) {
    shutdown_deadline_ = clock_->Now() + config_.shutdown_timeout;
    first_to_shut_down_ = task;
  }
  auto& slot = shutdown_waiters_[task];
  if (slot.done) {
    deferred.Add([old = std::move(slot.done)] { old(SupersededError("shutdown")); });
    ops_.erase(slot.op);
  }
  slot = PendingCall{op, std::move(done)};
  MaybeCompleteShutdownLocked(&deferred);
  return op;
}

void CoordinationService::MaybeCompleteShutdownLocked(Deferred* deferred) {
  for (TaskId i = 0; i < static_cast<TaskId>(tasks_.size()); ++i) {
    if (tasks_[i].state == TaskState::kConnected && !shutdown_waiters_.contains(i)) return;
  }
  for (auto& [task, call] : shutdown_waiters_) {
    tasks_[task].state = TaskState::kShutDown;
    ops_.erase(call.op);
    if (call.done) deferred->Add([done = std::move(call.done)] { done(absl::OkStatus()); });
  }
  if (!shutdown_waiters_.empty()) TaskStatesChangedLocked(deferred);
  shutdown_waiters_.clear();
  shutdown_deadline_ = absl::InfiniteFuture();
  LogInfo("shutdown barrier passed: all ", tasks_.size(), " tasks shut down");
}

// ---------------------------------------------------------------------------------------------
// Key-value store.

absl::Status CoordinationService::InsertKeyValue(TaskId task, Incarnation incarnation,
                                                 absl::string_view key, std::string value,
                                                 bool allow_overwrite,
                                                 KeyValueStore::Limits limits) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  return kv_.Insert(key, std::move(value), allow_overwrite, &deferred, limits);
}

OpId CoordinationService::GetKeyValue(TaskId task, Incarnation incarnation, absl::string_view key,
                                      absl::Duration timeout, ValueCallback done,
                                      KeyValueStore::Limits limits) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) {
    deferred.Add([done, s] { done(s); });
    return 0;
  }
  std::string normalized = KeyValueStore::NormalizeKey(key);
  if (normalized.empty() && !limits.empty_key) {
    deferred.Add([done] { done(absl::InvalidArgumentError("cannot get an empty key")); });
    return 0;
  }
  if (std::optional<std::string> value = kv_.Get(normalized)) {
    deferred.Add([done, v = std::move(*value)] { done(v); });
    return 0;
  }
  if (timeout <= absl::ZeroDuration()) {
    deferred.Add([done, normalized] {
      done(absl::DeadlineExceededError(absl::StrCat("key '", normalized, "' is not set")));
    });
    return 0;
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kGet, task, ""};
  // Wrap so the op bookkeeping goes when the waiter completes in any way.
  kv_.AddWaiter(op, normalized, clock_->Now() + timeout,
                [this, op, done = std::move(done)](absl::StatusOr<std::string> v) {
                  {
                    absl::MutexLock lock(&mu_);
                    ops_.erase(op);
                  }
                  done(std::move(v));
                });
  return op;
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(TaskId task,
                                                                Incarnation incarnation,
                                                                absl::string_view key) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  std::optional<std::string> value = kv_.Get(key);
  if (!value) {
    return absl::NotFoundError(
        absl::StrCat("key '", KeyValueStore::NormalizeKey(key), "' is not set"));
  }
  return *value;
}

absl::StatusOr<KeyValueStore::Entries> CoordinationService::GetKeyValueDir(
    TaskId task, Incarnation incarnation, absl::string_view directory) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  return kv_.GetDir(directory);
}

absl::Status CoordinationService::VisitKeyValueDir(
    TaskId task, Incarnation incarnation, absl::string_view directory,
    absl::FunctionRef<void(const std::string&, const std::string&)> fn) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  kv_.ForEachInDir(directory, fn);
  return absl::OkStatus();
}

absl::Status CoordinationService::DeleteKeyValue(TaskId task, Incarnation incarnation,
                                                 absl::string_view key,
                                                 KeyValueStore::Limits limits) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  kv_.Delete(key, limits);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(TaskId task, Incarnation incarnation,
                                                               absl::string_view key, int64_t delta,
                                                               KeyValueStore::Limits limits) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateKeyValueCallerLocked(task, incarnation); !s.ok()) return s;
  return kv_.Increment(key, delta, &deferred, limits);
}

// ---------------------------------------------------------------------------------------------
// Barriers.

size_t CoordinationService::ParticipantCount(const BarrierInstance& barrier) const {
  return barrier.participants.empty() ? tasks_.size() : barrier.participants.size();
}

std::vector<TaskId> CoordinationService::MissingLocked(const BarrierInstance& barrier) const {
  std::vector<TaskId> missing;
  auto consider = [&](TaskId t) {
    if (!barrier.arrived.contains(t)) missing.push_back(t);
  };
  if (barrier.participants.empty()) {
    for (TaskId t = 0; t < static_cast<TaskId>(tasks_.size()); ++t) consider(t);
  } else {
    for (TaskId t : barrier.participants) consider(t);
  }
  return missing;
}

void CoordinationService::FinishBarrierLocked(BarrierInstance& barrier, absl::Status result,
                                              Deferred* deferred) {
  barrier.done = true;
  barrier.result = result;
  std::vector<DoneCallback> callbacks;
  callbacks.reserve(barrier.arrived.size());
  for (auto& [task, call] : barrier.arrived) {
    ops_.erase(call.op);
    if (call.done) callbacks.push_back(std::move(call.done));
  }
  // A finished instance answers retries from its counter and result alone; without this, ids
  // named per step ("step-123") would keep one entry per participant per step forever.
  absl::flat_hash_map<TaskId, PendingCall>().swap(barrier.arrived);
  deferred->Add([callbacks = std::move(callbacks), result] {
    for (const auto& done : callbacks) done(result);
  });
}

BarrierReport CoordinationService::ReportLocked(const BarrierInstance& barrier) const {
  return BarrierReport{barrier.id,
                       barrier.counter,
                       barrier.first_task,
                       static_cast<int32_t>(barrier.arrived.size()),
                       static_cast<int32_t>(ParticipantCount(barrier)),
                       MissingLocked(barrier)};
}

ErrorDetails CoordinationService::BarrierDetailsLocked(ErrorKind kind,
                                                       const BarrierInstance& barrier,
                                                       const BarrierArgs& call, TaskId task) const {
  return ErrorDetails{.kind = kind,
                      .barrier = ReportLocked(barrier),
                      .task = task,
                      .counter = call.counter,
                      .caller_named_every_task = call.participants.empty()};
}

OpId CoordinationService::Barrier(const BarrierArgs& args, DoneCallback done) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  auto reply = [&](absl::Status s) { deferred.Add([done, s] { done(s); }); };
  if (absl::Status s = ValidateCallerLocked(args.task, args.incarnation); !s.ok()) {
    reply(s);
    return 0;
  }
  if (args.counter < 0) {
    reply(absl::InvalidArgumentError(
        absl::StrCat("barrier '", args.id, "': call counter ", args.counter,
                     " is negative; it counts the caller's earlier calls of the id")));
    return 0;
  }
  std::vector<TaskId> participants = args.participants;
  std::sort(participants.begin(), participants.end());
  participants.erase(std::unique(participants.begin(), participants.end()), participants.end());
  TaskId unknown = -1;  // A named participant that is not in the job.
  for (TaskId t : participants) {
    if (unknown < 0 && !ValidateRangeLocked(t).ok()) unknown = t;
  }
  if (unknown < 0 && participants.size() == tasks_.size()) participants.clear();  // "All tasks".
  const bool caller_participates =
      participants.empty() ||
      std::binary_search(participants.begin(), participants.end(), args.task);
  auto details =
      [&](ErrorKind kind, const BarrierInstance& b, TaskId task = -1)
          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return BarrierDetailsLocked(kind, b, args, task); };

  auto it = barriers_.find(args.id);
  if (it != barriers_.end() && it->second.counter == args.counter && it->second.done) {
    // A retry of a call that already completed gets its result; a call that names other
    // participants, or comes from outside them, is no retry (it would pass without them), and is
    // refused alone: the instance's result stands.
    if (it->second.participants != participants) {
      reply(WithDetails(
          absl::InvalidArgumentError(absl::StrFormat(
              "barrier '%s' call #%d already completed with other participants than rank %d "
              "names; every participant must pass the same set",
              args.id, CallNumber(args.counter), args.task)),
          details(ErrorKind::kBarrierConflictingTasks, it->second)));
      return 0;
    }
    if (!caller_participates) {
      reply(WithDetails(absl::InvalidArgumentError(absl::StrCat(
                            "rank ", args.task, " called barrier '", args.id, "' call #",
                            CallNumber(args.counter), " but is not one of its participants")),
                        details(ErrorKind::kBarrierNonParticipant, it->second, args.task)));
      return 0;
    }
    reply(it->second.result);
    return 0;
  }
  bool new_instance =
      (it == barriers_.end() && args.counter == 0) ||
      (it != barriers_.end() && it->second.done && args.counter - 1 == it->second.counter);
  if (it != barriers_.end() && !new_instance && it->second.counter != args.counter) {
    absl::Status error = WithDetails(
        absl::FailedPreconditionError(absl::StrFormat(
            "barrier '%s' is out of step: rank %d calls it for time #%d while the coordinator is "
            "at call #%d; every participant must call a barrier id the same number of times",
            args.id, args.task, CallNumber(args.counter), CallNumber(it->second.counter))),
        details(ErrorKind::kBarrierCounterMismatch, it->second));
    if (!it->second.done) FinishBarrierLocked(it->second, error, &deferred);
    reply(error);
    return 0;
  }
  if (it == barriers_.end() && !new_instance) {
    BarrierInstance none;  // As XLA's service, which names an instance nobody started "::<n>".
    reply(WithDetails(
        absl::FailedPreconditionError(absl::StrFormat(
            "barrier '%s' is out of step: rank %d calls it for time #%d but nobody called it "
            "before; every participant must call a barrier id the same number of times",
            args.id, args.task, CallNumber(args.counter))),
        details(ErrorKind::kBarrierCounterMismatch, none)));
    return 0;
  }
  if (new_instance) {
    BarrierInstance& b = barriers_[args.id];
    b = BarrierInstance{};
    b.id = args.id;
    b.counter = args.counter;
    b.participants = participants;
    b.timeout = args.timeout;
    b.opened = clock_->Now();
    b.deadline = b.opened + args.timeout;
    b.first_task = args.task;
    it = barriers_.find(args.id);
    if (unknown >= 0) {
      absl::Status error =
          WithDetails(absl::InvalidArgumentError(absl::StrCat(
                          "barrier '", args.id, "' names a participant that does not exist: ",
                          ValidateRangeLocked(unknown).message())),
                      details(ErrorKind::kBarrierUnknownTask, b, unknown));
      FinishBarrierLocked(b, error, &deferred);
      reply(error);
      return 0;
    }
  }
  BarrierInstance& b = it->second;
  if (b.participants != participants) {
    absl::Status error = WithDetails(
        absl::InvalidArgumentError(absl::StrFormat(
            "barrier '%s' call #%d: rank %d names different participants than rank %d did; every "
            "participant must pass the same set",
            args.id, CallNumber(args.counter), args.task, b.first_task)),
        details(ErrorKind::kBarrierConflictingTasks, b));
    FinishBarrierLocked(b, error, &deferred);
    reply(error);
    return 0;
  }
  if (!caller_participates) {
    absl::Status error = WithDetails(
        absl::InvalidArgumentError(absl::StrCat(
            "rank ", args.task, " called barrier '", args.id, "' call #", CallNumber(args.counter),
            " but is not one of its participants, which fails the barrier for them; only "
            "participants may call a subset barrier")),
        details(ErrorKind::kBarrierNonParticipant, b, args.task));
    FinishBarrierLocked(b, error, &deferred);
    reply(error);
    return 0;
  }
  for (TaskId t : participants) {
    if (tasks_[t].state == TaskState::kShutDown) {
      absl::Status error = WithDetails(absl::FailedPreconditionError(absl::StrCat(
                                           "barrier '", args.id, "': participant rank ", t,
                                           " already shut down, so the barrier can never pass")),
                                       details(ErrorKind::kBarrierParticipantGone, b, t));
      FinishBarrierLocked(b, error, &deferred);
      reply(error);
      return 0;
    }
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kBarrier, args.task, args.id};
  PendingCall& slot = b.arrived[args.task];
  if (slot.done) {
    ops_.erase(slot.op);
    deferred.Add([old = std::move(slot.done)] { old(SupersededError("barrier call")); });
  }
  slot = PendingCall{op, std::move(done)};
  if (b.arrived.size() == ParticipantCount(b)) FinishBarrierLocked(b, absl::OkStatus(), &deferred);
  return op;
}

absl::Status CoordinationService::CancelBarrier(TaskId task, Incarnation incarnation,
                                                absl::string_view id, int64_t counter) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (absl::Status s = ValidateCallerLocked(task, incarnation); !s.ok()) return s;
  auto it = barriers_.find(std::string(id));
  if (it == barriers_.end() || it->second.counter != counter) {
    BarrierReport held;
    held.id = std::string(id);
    if (it != barriers_.end()) held = ReportLocked(it->second);
    return WithDetails(
        absl::NotFoundError(
            absl::StrCat("barrier '", id, "' call #", CallNumber(counter), " is not in progress")),
        ErrorDetails{.kind = ErrorKind::kCancelNotInProgress,
                     .barrier = held,
                     .task = task,
                     .counter = counter});
  }
  if (it->second.done) {
    return WithDetails(absl::FailedPreconditionError(absl::StrCat(
                           "barrier '", id, "' call #", CallNumber(counter), " already completed")),
                       ErrorDetails{.kind = ErrorKind::kCancelAlreadyPassed,
                                    .barrier = ReportLocked(it->second),
                                    .task = task,
                                    .counter = counter,
                                    .code = static_cast<int32_t>(it->second.result.code())});
  }
  FinishBarrierLocked(it->second,
                      WithDetails(absl::CancelledError(absl::StrCat(
                                      "barrier '", id, "' was cancelled by rank ", task)),
                                  ErrorDetails{.kind = ErrorKind::kBarrierCancelled,
                                               .barrier = ReportLocked(it->second),
                                               .task = task,
                                               .counter = counter}),
                      &deferred);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// GetAliveTasks.

OpId CoordinationService::GetAliveTasks(TaskId task, std::vector<TaskId> tasks,
                                        AliveTasksCallback done) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  absl::Status refused = ValidateRangeLocked(task);
  if (refused.ok() && !std::binary_search(tasks.begin(), tasks.end(), task)) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("rank ", task, " asked which of ranks ", FormatRankList(tasks),
                     " are alive without naming "
                     "itself; every caller must be one of the tasks it asks about"));
  }
  if (!refused.ok()) {
    deferred.Add([done = std::move(done), refused] { done(refused); });
    return 0;
  }
  auto wait = std::find_if(aliveness_waits_.begin(), aliveness_waits_.end(),
                           [&](const AlivenessWait& w) { return w.tasks == tasks; });
  if (wait == aliveness_waits_.end()) {
    aliveness_waits_.push_back(AlivenessWait{tasks, {}, {}});
    wait = std::prev(aliveness_waits_.end());
  }
  OpId op = NextOpLocked();
  ops_[op] = OpRef{OpKind::kAlive, task, ""};
  ++wait->in_barrier[task];
  wait->waiting.emplace_back(op, std::move(done));
  RefreshAlivenessLocked(&deferred);
  return op;
}

void CoordinationService::RefreshAlivenessLocked(Deferred* deferred) {
  for (auto wait = aliveness_waits_.begin(); wait != aliveness_waits_.end();) {
    AliveTasks alive;
    bool complete = true;
    for (TaskId t : wait->tasks) {
      if (t < 0 || t >= static_cast<TaskId>(tasks_.size())) continue;  // Never alive.
      if (tasks_[t].state != TaskState::kConnected) continue;
      alive.emplace_back(t, tasks_[t].incarnation);
      if (!wait->in_barrier.contains(t)) complete = false;
    }
    if (!complete) {
      ++wait;
      continue;
    }
    std::vector<AliveTasksCallback> callbacks;
    for (auto& [op, done] : wait->waiting) {
      ops_.erase(op);
      callbacks.push_back(std::move(done));
    }
    deferred->Add([callbacks = std::move(callbacks), alive = std::move(alive)] {
      for (const auto& done : callbacks) done(alive);
    });
    wait = aliveness_waits_.erase(wait);
  }
}

// ---------------------------------------------------------------------------------------------
// Preemption.

absl::Status CoordinationService::ReportPreemption(TaskId task, Incarnation incarnation) {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  if (incarnation == kObserverIncarnation && task >= 0 &&
      task < static_cast<TaskId>(tasks_.size()) && tasks_[task].state != TaskState::kDisconnected) {
    incarnation = tasks_[task].incarnation;  // An observer's notice holds for the live process.
  }
  if (absl::Status s = ValidateCallerLocked(task, incarnation); !s.ok()) return s;
  if (preemption_) return absl::OkStatus();  // The first notice wins; every task already knows.
  preemption_ = PreemptionNotice{task, clock_->Now()};
  LogInfo("preemption notice from rank ", task, "; telling every task");
  BroadcastLocked(*preemption_, &deferred);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Deadlines.

void CoordinationService::CheckDeadlines() {
  Deferred deferred;
  absl::MutexLock lock(&mu_);
  CheckDeadlinesLocked(clock_->Now(), &deferred);
}

void CoordinationService::CheckDeadlinesLocked(absl::Time now, Deferred* deferred) {
  // Heartbeats.
  std::vector<TaskId> stale;
  for (TaskId i = 0; i < static_cast<TaskId>(tasks_.size()); ++i) {
    const Task& t = tasks_[i];
    if (t.state == TaskState::kConnected && now - t.last_heartbeat > t.heartbeat_timeout) {
      stale.push_back(i);
    }
  }
  if (!stale.empty()) {
    // Tasks of one protocol share a timeout; name the longest among the stale ones.
    absl::Duration timeout = absl::ZeroDuration();
    for (TaskId t : stale) timeout = std::max(timeout, tasks_[t].heartbeat_timeout);
    std::string message = absl::StrFormat(
        "no heartbeat for over %s from rank(s) %s: the sidecar or host died, hung, or lost its "
        "network path to the coordinator",
        absl::FormatDuration(timeout), FormatRankList(stale));
    for (TaskId t : stale) {
      FailTaskLocked(TaskFailure{t, FailureCause::kHeartbeatTimeout, message}, deferred);
    }
  }

  // Registration.
  if (now >= register_deadline_ && num_registered_ < static_cast<int32_t>(tasks_.size())) {
    std::vector<TaskId> missing;
    for (TaskId i = 0; i < static_cast<TaskId>(tasks_.size()); ++i) {
      if (tasks_[i].state == TaskState::kDisconnected) missing.push_back(i);
    }
    std::string message = absl::StrFormat(
        "registration timed out after %s: %d/%d processes registered; missing rank(s) %s. Those "
        "processes crashed, were never started, or cannot reach the coordinator (check "
        "COHORT_COORDINATOR_ADDRESS, the job token and the network)",
        absl::FormatDuration(config_.register_timeout), num_registered_, tasks_.size(),
        FormatRankList(missing));
    BarrierReport report{
        "", 0, first_registered_, num_registered_, static_cast<int32_t>(tasks_.size()), missing};
    absl::Status status =
        WithDetails(absl::DeadlineExceededError(message),
                    ErrorDetails{.kind = ErrorKind::kRegistrationTimedOut, .barrier = report});
    for (auto& [task, call] : pending_registrations_) {
      ops_.erase(call.op);
      deferred->Add([done = std::move(call.done), status] { done(status); });
      tasks_[task].state = TaskState::kFailed;  // Its registration failed with the job.
      TaskStatesChangedLocked(deferred);
    }
    pending_registrations_.clear();
    register_deadline_ = absl::InfiniteFuture();
    if (!missing.empty()) {
      FailTaskLocked(TaskFailure{missing.front(), FailureCause::kRegistrationTimeout, message},
                     deferred);
    }
  }

  // Barriers.
  for (auto& [id, b] : barriers_) {
    if (b.done || now < b.deadline) continue;
    std::vector<TaskId> missing = MissingLocked(b);
    FinishBarrierLocked(
        b,
        WithDetails(absl::DeadlineExceededError(absl::StrFormat(
                        "barrier '%s' (call #%d) timed out after %s: %d/%d tasks arrived; missing "
                        "rank(s) %s. They are slow, stuck, or never call this barrier",
                        id, CallNumber(b.counter), absl::FormatDuration(b.timeout),
                        b.arrived.size(), ParticipantCount(b), FormatRankList(missing))),
                    ErrorDetails{.kind = ErrorKind::kBarrierTimedOut, .barrier = ReportLocked(b)}),
        deferred);
  }

  // Blocking gets.
  kv_.ExpireWaiters(now, deferred);

  // Shutdown barrier.
  if (now >= shutdown_deadline_ && !shutdown_waiters_.empty()) {
    std::vector<TaskId> missing;
    for (TaskId i = 0; i < static_cast<TaskId>(tasks_.size()); ++i) {
      if (tasks_[i].state == TaskState::kConnected && !shutdown_waiters_.contains(i)) {
        missing.push_back(i);
      }
    }
    std::string message = absl::StrFormat(
        "shutdown barrier timed out after %s: %d/%d tasks called shutdown; missing rank(s) %s "
        "(still running, stuck, or exited without calling shutdown)",
        absl::FormatDuration(config_.shutdown_timeout), shutdown_waiters_.size(), tasks_.size(),
        FormatRankList(missing));
    // Every task that had not called it, failed ones included, as XLA's shutdown barrier counts.
    BarrierReport report{"",
                         0,
                         first_to_shut_down_,
                         static_cast<int32_t>(shutdown_waiters_.size()),
                         static_cast<int32_t>(tasks_.size()),
                         {}};
    for (TaskId i = 0; i < static_cast<TaskId>(tasks_.size()); ++i) {
      if (!shutdown_waiters_.contains(i)) report.missing.push_back(i);
    }
    absl::Status status =
        WithDetails(absl::DeadlineExceededError(message),
                    ErrorDetails{.kind = ErrorKind::kShutdownTimedOut, .barrier = report});
    for (auto& [task, call] : shutdown_waiters_) {
      ops_.erase(call.op);
      if (call.done) deferred->Add([done = std::move(call.done), status] { done(status); });
    }
    shutdown_waiters_.clear();
    shutdown_deadline_ = absl::InfiniteFuture();
    if (!missing.empty()) {
      TaskFailure failure{missing.front(), FailureCause::kShutdownTimeout, message};
      failure.barrier = report;
      FailTaskLocked(std::move(failure), deferred);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Introspection.

CoordinationService::Snapshot CoordinationService::GetSnapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot snap;
  snap.now = clock_->Now();
  snap.tasks.reserve(tasks_.size());
  for (const Task& t : tasks_) {
    snap.tasks.push_back(TaskSnapshot{t.state, t.last_heartbeat, t.hostname,
                                      t.protocol.empty() ? "cohort" : t.protocol, t.incarnation,
                                      t.step, t.step_at, t.progress_at});
  }
  snap.job_failed = job_failure_.has_value();
  snap.preemption_notices = preemption_ ? 1 : 0;
  snap.kv_entries = kv_.size();
  snap.kv_waiters = kv_.num_waiters();
  snap.event_watchers = watchers_.size();
  const BarrierInstance* oldest = nullptr;
  for (const auto& [id, b] : barriers_) {
    if (b.done) continue;
    ++snap.barriers_in_progress;
    if (oldest == nullptr || b.opened < oldest->opened) oldest = &b;
  }
  if (oldest != nullptr) {
    snap.oldest_barrier_since = oldest->opened;
    for (const auto& [task, call] : oldest->arrived) {
      if (task >= 0 && static_cast<size_t>(task) < snap.tasks.size())
        snap.tasks[task].in_oldest_barrier = true;
    }
  }
  return snap;
}

bool CoordinationService::AllTasksDone() const {
  absl::MutexLock lock(&mu_);
  return AllTasksDoneLocked(this);
}

bool CoordinationService::AllTasksDoneLocked(const CoordinationService* self) {
  for (const Task& t : self->tasks_) {
    if (t.state == TaskState::kConnecting || t.state == TaskState::kConnected) return false;
  }
  return true;
}

bool CoordinationService::JobEndedLocked(const CoordinationService* self) {
  return self->job_failure_.has_value() || AllTasksDoneLocked(self);
}

bool CoordinationService::EveryTaskToldLocked(const CoordinationService* self) {
  for (const Task& t : self->tasks_) {
    if (t.state == TaskState::kDisconnected && !t.told_of_failure) return false;
  }
  return true;
}

bool CoordinationService::WaitUntilEveryTaskTold(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&EveryTaskToldLocked, this), deadline);
}

bool CoordinationService::WaitUntilJobEnded(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(&JobEndedLocked, this), deadline);
}

absl::Status CoordinationService::JobStatus() const {
  absl::MutexLock lock(&mu_);
  if (job_failure_) return absl::AbortedError(job_failure_->message);
  return absl::OkStatus();
}

}  // namespace cohort::coordination
