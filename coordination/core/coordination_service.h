#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_settings.h"
#include "coordination/core/deferred.h"
#include "coordination/core/error_details.h"
#include "coordination/core/key_value_store.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

struct ServiceConfig {
  int32_t num_tasks = 1;
  // From the first registration until every task must have registered.
  absl::Duration register_timeout = kDefaultInitializationTimeout;
  // A connected task with no heartbeat for this long has failed.
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  // From the first ShutdownTask until every live task must have called it.
  absl::Duration shutdown_timeout = kDefaultShutdownTimeout;
  // The gang's restart attempt this service was started for, when known: a task that says it
  // belongs to another one is refused.
  std::optional<int32_t> restart_attempt;
};

struct RegisterArgs {
  TaskId task = 0;
  Incarnation incarnation = 0;
  int32_t num_tasks = 0;
  std::string hostname;
  int64_t pid = 0;
  std::optional<int32_t> restart_attempt;  // Unset: the task's launcher did not say.
  // Replaces the service's heartbeat timeout for this task (clients of a protocol whose
  // heartbeat interval the service does not choose, e.g. JAX's 50 s).
  std::optional<absl::Duration> heartbeat_timeout;
  // The wire protocol the task speaks, for metrics and logs ("cohort" when empty).
  std::string protocol;
  // Why the task failed when its event stream (its watch) breaks without a shutdown, in the words
  // of the protocol's port (each port words its own errors: error_details.h). Empty: a Cohort
  // agent's (its sidecar, or in standalone mode its process, died).
  std::string watch_broke;
};

struct BarrierArgs {
  TaskId task = 0;
  Incarnation incarnation = 0;
  std::string id;
  int64_t counter = 0;
  absl::Duration timeout;
  std::vector<TaskId> participants;  // Empty: every task.
};

// The coordination service's state machine: task registration and liveness, failure propagation,
// key-value store, barriers, shutdown barrier and preemption notices. It knows nothing of gRPC;
// CoordinationRpcHandler (coordination/server/rpc_handler.h) maps the wire protocol onto it.
//
// Task lifecycle:
//
//   DISCONNECTED --Register--> CONNECTING --(all N registered)--> CONNECTED --Shutdown--> SHUT_DOWN
//        ^                         |                                  |   (all live tasks)
//        +---(its call cancelled)--+                                  +--crash / heartbeat timeout
//        /
//                                                                         new incarnation--> FAILED
//
// Fate sharing: the first task failure fails the job. Every watcher is told (task, cause,
// message) at once, and every waiting call (registration, barrier, blocking get, shutdown) fails
// with ABORTED carrying the same message, so no process waits on a peer that is gone.
//
// Waiting calls take a callback, invoked exactly once, never under the internal mutex, possibly
// on the calling thread. They return an OpId that the transport passes to CancelOp() when its
// client goes away. Deadlines fire from CheckDeadlines(), which the server calls periodically;
// tests call it after advancing a FakeClock.
//
// Thread-safe.
class CoordinationService {
 public:
  using DoneCallback = std::function<void(absl::Status)>;
  using ValueCallback = KeyValueStore::ValueCallback;
  using EventCallback = std::function<void(const JobEvent&)>;

  CoordinationService(ServiceConfig config, Clock* clock);
  // Fails every waiting call with UNAVAILABLE.
  ~CoordinationService();
  CoordinationService(const CoordinationService&) = delete;
  CoordinationService& operator=(const CoordinationService&) = delete;

  Incarnation service_incarnation() const { return service_incarnation_; }
  const ServiceConfig& config() const { return config_; }

  // Joins the connect barrier; `done` gets OK once all tasks registered. Errors:
  // InvalidArgument (task out of range, job-size mismatch), FailedPrecondition (the task belongs
  // to an earlier restart attempt of the gang), Unavailable (this service belongs to an earlier
  // attempt than the task: the task's own service is yet to come, retry), AlreadyExists
  // (another live process holds the rank), DeadlineExceeded (not all registered within
  // register_timeout), Aborted (the job failed, or the task restarted after the job started).
  OpId RegisterTask(const RegisterArgs& args, DoneCallback done);
  // Errors: InvalidArgument, FailedPrecondition (not connected), Aborted (restarted / job failed).
  // `progress`, when given, replaces the task's collective progress (reported by its program
  // `progress_age` before this heartbeat); `step`, when given, its training step.
  absl::Status Heartbeat(TaskId task, Incarnation incarnation,
                         const std::vector<CollectiveProgress>* progress = nullptr,
                         absl::Duration progress_age = absl::ZeroDuration(),
                         std::optional<StepReport> step = std::nullopt);
  // Every task's state, heartbeat age and collective progress (the collective watchdog's view).
  // Errors: InvalidArgument, FailedPrecondition (the caller is not registered).
  absl::StatusOr<std::vector<TaskProgress>> GetJobProgress(TaskId task,
                                                           Incarnation incarnation) const;
  // Marks the task failed and fails the job (first failure only is propagated).
  absl::Status ReportError(TaskId task, Incarnation incarnation, FailureCause cause,
                           absl::string_view message);
  // Streams job events: past ones (a failure, a preemption notice) at once, then live ones.
  // CancelOp(op) before the task shut down means its connection closed: the task died.
  absl::StatusOr<OpId> Watch(TaskId task, Incarnation incarnation, EventCallback on_event);
  // Ends a watch whose stream the service itself ended (it delivered the job's failure), which
  // says nothing about the watcher's health, unlike CancelOp.
  void EndWatch(OpId op);
  // Every task's state, incarnation and failure (the one that failed it, once it has), with a
  // version that changes whenever any of them changes: what XLA's WatchTasks reports.
  struct TaskStates {
    struct Entry {
      TaskState state = TaskState::kDisconnected;
      Incarnation incarnation = 0;
      std::optional<TaskFailure> failure;
    };
    int64_t version = 0;
    std::vector<Entry> tasks;
  };
  using TaskStatesCallback = std::function<void(absl::StatusOr<TaskStates>)>;
  // A long poll: the task states, at once when their version is not `known_version` (a caller
  // that has none passes a negative one), else once it changes. Returns the OpId of a call that
  // waits (0 when answered at once); CancelOp ends the wait with CANCELLED, and the service's
  // own end with UNAVAILABLE. Any caller may ask (the states are the job's, not a task's).
  OpId WatchTaskStates(int64_t known_version, TaskStatesCallback done);
  // Shutdown barrier over every task that has not failed.
  OpId ShutdownTask(TaskId task, Incarnation incarnation, DoneCallback done);

  // Key-value calls accept kUnidentifiedTask (any incarnation) as the caller; the transports of
  // Cohort's own protocol never pass it (CoordinationRpcHandler refuses negative task ids).
  // `limits`: the store's key and value size limits apply (Cohort's protocol); without them any
  // non-empty key and any value the transport delivered is stored (the JAX port, as XLA's).
  absl::Status InsertKeyValue(TaskId task, Incarnation incarnation, absl::string_view key,
                              std::string value, bool allow_overwrite,
                              KeyValueStore::Limits limits = KeyValueStore::kCohortLimits);
  // Blocking get: waits up to `timeout` for the key (DeadlineExceeded after). `limits`: whether
  // an empty key is refused (Cohort's protocol) or waited for like any other (the JAX port).
  OpId GetKeyValue(TaskId task, Incarnation incarnation, absl::string_view key,
                   absl::Duration timeout, ValueCallback done,
                   KeyValueStore::Limits limits = KeyValueStore::kCohortLimits);
  // NotFound when absent.
  absl::StatusOr<std::string> TryGetKeyValue(TaskId task, Incarnation incarnation,
                                             absl::string_view key);
  absl::StatusOr<KeyValueStore::Entries> GetKeyValueDir(TaskId task, Incarnation incarnation,
                                                        absl::string_view directory);
  // The same, handing each entry to `fn` (under the service's lock: `fn` must only copy it out)
  // instead of copying the listing first.
  absl::Status VisitKeyValueDir(TaskId task, Incarnation incarnation, absl::string_view directory,
                                absl::FunctionRef<void(const std::string&, const std::string&)> fn);
  absl::Status DeleteKeyValue(TaskId task, Incarnation incarnation, absl::string_view key,
                              KeyValueStore::Limits limits = KeyValueStore::kCohortLimits);
  absl::StatusOr<int64_t> IncrementKeyValue(
      TaskId task, Incarnation incarnation, absl::string_view key, int64_t delta,
      KeyValueStore::Limits limits = KeyValueStore::kCohortLimits);

  // Named barrier. Each participant's k-th call of an id (counter k) joins the k-th instance;
  // the first arrival sets the deadline (a timeout of zero or less: the next deadline check
  // fails it unless every participant arrived by then). As in XLA's service, a call that cannot
  // join (it names a task outside the job, or other participants than the instance has, or its
  // caller is not one of them) fails the instance for every participant, and later calls of
  // that instance get the same result. Errors: InvalidArgument (bad participants),
  // FailedPrecondition (call counts out of step, a participant shut down), DeadlineExceeded
  // (names the missing ranks), Cancelled (CancelBarrier), Aborted (a participant failed). Each
  // carries ErrorDetails (coordination/core/error_details.h).
  OpId Barrier(const BarrierArgs& args, DoneCallback done);
  absl::Status CancelBarrier(TaskId task, Incarnation incarnation, absl::string_view id,
                             int64_t counter);

  // XLA's GetAliveTasks: a barrier over `tasks` that answers, once every one of them that is
  // connected has called it with the same set, the connected ones with their incarnations, in
  // task order (to every caller alike). A task that fails or shuts down meanwhile is no longer
  // waited for. Tasks not in the job are never alive. InvalidArgument when the caller is not one
  // of `tasks` (every call names itself) or not in the job.
  using AliveTasks = std::vector<std::pair<TaskId, Incarnation>>;
  using AliveTasksCallback = std::function<void(absl::StatusOr<AliveTasks>)>;
  OpId GetAliveTasks(TaskId task, std::vector<TaskId> tasks, AliveTasksCallback done);

  // Records a preemption notice (the first one wins) and tells every task. Incarnation
  // kObserverIncarnation: a notice about the rank from outside its process (its sidecar got
  // SIGTERM while the program talks to the service itself), valid for any registered incarnation.
  absl::Status ReportPreemption(TaskId task, Incarnation incarnation);

  // The client of a waiting call went away: complete it with CANCELLED and forget it. A pending
  // registration is withdrawn so that a restarted process may register again before the job
  // starts. Unknown or finished ops are ignored.
  void CancelOp(OpId op);

  // Fires every deadline that passed: heartbeats, registration, barriers, blocking gets, shutdown.
  void CheckDeadlines();

  struct TaskSnapshot {
    TaskState state = TaskState::kDisconnected;
    absl::Time last_heartbeat = absl::InfinitePast();
    std::string hostname;
    std::string protocol;  // "cohort" or a compatibility protocol ("xla_coordination", ...).
    Incarnation incarnation = 0;
    std::optional<int64_t> step;                // Its program's last reported training step,
    absl::Time step_at = absl::InfinitePast();  // and when the program reported it.
    // When its program (libdist's progress thread, every 500 ms while it has a communicator)
    // last reported collective progress: a frozen program stops, even while its sidecar heartbeats.
    absl::Time report_at = absl::InfinitePast();
    bool in_oldest_barrier = false;  // It has arrived at the oldest open barrier.
  };
  struct Snapshot {
    std::vector<TaskSnapshot> tasks;
    bool job_failed = false;
    int64_t preemption_notices = 0;
    size_t kv_entries = 0;
    size_t kv_waiters = 0;
    size_t barriers_in_progress = 0;
    absl::Time oldest_barrier_since = absl::InfiniteFuture();  // When the oldest open one opened.
    size_t event_watchers = 0;  // Open event streams (libdist's WatchJob, JAX's PollForError).
    absl::Time now;
  };
  Snapshot GetSnapshot() const;

  // True once no task is registered and running: each shut down, failed, or never registered
  // (a job that never started, or one whose registration failed). The service may then stop
  // without stranding anyone.
  bool AllTasksDone() const;
  // Waits (real time) until AllTasksDone(), the job failed, or the deadline; returns whether
  // one of the first two happened. After a failure nothing is left to wait for: every live
  // task was told on its event stream.
  bool WaitUntilJobEnded(absl::Time deadline) const;
  // After a job failure: waits (real time) until every task has heard of it — a registered one
  // on its event stream, one that never registered from its next registration attempt — or
  // the deadline. Returns whether every task has.
  bool WaitUntilEveryTaskTold(absl::Time deadline) const;
  // The job's failure, or OK.
  absl::Status JobStatus() const;

 private:
  struct Task {
    TaskState state = TaskState::kDisconnected;
    Incarnation incarnation = 0;
    std::string hostname;
    int64_t pid = 0;
    absl::Time last_heartbeat = absl::InfinitePast();
    absl::Duration heartbeat_timeout;
    std::string protocol;
    std::string watch_broke;  // RegisterArgs::watch_broke (empty: a Cohort agent's words).
    // The program's collective progress, when it reported any; `progress_at` is when it did.
    std::vector<CollectiveProgress> progress;
    absl::Time progress_at = absl::InfinitePast();
    std::optional<int64_t> step;  // Its training step, when it reported one, and when.
    absl::Time step_at = absl::InfinitePast();
    // A registration attempt after the job failed was answered with the failure.
    bool told_of_failure = false;
    std::optional<TaskFailure> failure;  // What failed it, once it failed.
  };
  struct PendingCall {
    OpId op = 0;
    DoneCallback done;
  };
  struct BarrierInstance {
    std::string id;
    int64_t counter = 0;
    std::vector<TaskId> participants;  // Sorted; empty means all tasks.
    absl::Time deadline;
    absl::Duration timeout;
    absl::Time opened;  // When the first participant arrived.
    TaskId first_task = -1;
    absl::flat_hash_map<TaskId, PendingCall> arrived;
    bool done = false;
    absl::Status result;
  };
  // Callers of GetAliveTasks naming the same set of tasks, waiting for the others.
  struct AlivenessWait {
    std::vector<TaskId> tasks;                    // Sorted, unique.
    absl::flat_hash_map<TaskId, int> in_barrier;  // Task -> how many of its calls wait.
    std::vector<std::pair<OpId, AliveTasksCallback>> waiting;
  };
  enum class OpKind { kRegister, kBarrier, kGet, kShutdown, kWatch, kWatchTaskStates, kAlive };
  struct OpRef {
    OpKind kind;
    TaskId task;
    std::string barrier_id;
  };

  OpId NextOpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ++last_op_; }
  std::string TaskName(TaskId task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Range, job state, registration and incarnation checks shared by every per-task call.
  absl::Status ValidateCallerLocked(TaskId task, Incarnation incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a registration is refused before the task's state is looked at (a rank out of range, a
  // job size or restart attempt that differs from the service's); OK when it is not.
  absl::Status RegistrationRefusalLocked(const RegisterArgs& args) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateRangeLocked(TaskId task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for a key-value call, which may also come from kUnidentifiedTask (only the job's
  // state is checked then).
  absl::Status ValidateKeyValueCallerLocked(TaskId task, Incarnation incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the task; the first failure also fails the job and every waiting call.
  void FailTaskLocked(TaskFailure failure, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskStates TaskStatesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task's state or incarnation changed: a new version, and every waiting watch answered.
  void TaskStatesChangedLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BroadcastLocked(const JobEvent& event, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCompleteRegistrationLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCompleteShutdownLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t ParticipantCount(const BarrierInstance& barrier) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishBarrierLocked(BarrierInstance& barrier, absl::Status result, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Who had reached `barrier` (a snapshot for its error details), and the details of `call`'s
  // error about it (`task`: the task the error names).
  BarrierReport ReportLocked(const BarrierInstance& barrier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ErrorDetails BarrierDetailsLocked(ErrorKind kind, const BarrierInstance& barrier,
                                    const BarrierArgs& call, TaskId task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every GetAliveTasks whose connected tasks have all called it.
  void RefreshAlivenessLocked(Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<TaskId> MissingLocked(const BarrierInstance& barrier) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckDeadlinesLocked(absl::Time now, Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Static so that absl::Condition can call it.
  static bool EveryTaskToldLocked(const CoordinationService* self)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_);
  static bool JobEndedLocked(const CoordinationService* self)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_);
  static bool AllTasksDoneLocked(const CoordinationService* self)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_);

  const ServiceConfig config_;
  Clock* const clock_;
  const Incarnation service_incarnation_;

  mutable absl::Mutex mu_;
  std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
  OpId last_op_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<OpId, OpRef> ops_ ABSL_GUARDED_BY(mu_);

  // Connect barrier.
  absl::flat_hash_map<TaskId, PendingCall> pending_registrations_ ABSL_GUARDED_BY(mu_);
  absl::Time register_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int32_t num_registered_ ABSL_GUARDED_BY(mu_) = 0;
  TaskId first_registered_ ABSL_GUARDED_BY(mu_) = -1;

  // Fate sharing.
  std::optional<TaskFailure> job_failure_ ABSL_GUARDED_BY(mu_);
  std::optional<PreemptionNotice> preemption_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<OpId, EventCallback> watchers_ ABSL_GUARDED_BY(mu_);
  int64_t task_states_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<OpId, TaskStatesCallback> task_state_watchers_ ABSL_GUARDED_BY(mu_);

  KeyValueStore kv_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, BarrierInstance> barriers_ ABSL_GUARDED_BY(mu_);
  std::vector<AlivenessWait> aliveness_waits_ ABSL_GUARDED_BY(mu_);

  // Shutdown barrier.
  absl::flat_hash_map<TaskId, PendingCall> shutdown_waiters_ ABSL_GUARDED_BY(mu_);
  absl::Time shutdown_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  TaskId first_to_shut_down_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace cohort::coordination
