#pragma once

// What both generations of XLA's coordination protocol share on the JAX port, written once: the
// service, which process holds which task, the preemption notice key, the per-call observer, and
// how the core's task states and failures read in JAX's terms (in XLA's words: xla_errors.h).
// jax_compat_service.cc maps both generations' messages onto it (JaxGenerationService, once over a
// traits struct per generation).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/reply_budget.h"
#include "coordination/server/xla_errors.h"

namespace cohort::coordination {

// Protocol names, as metrics and logs label them.
inline constexpr absl::string_view kXlaCoordinationProtocol = "xla_coordination";
inline constexpr absl::string_view kTensorflowCoordinationProtocol = "tensorflow";
// What the JAX port understands: tensorflow.CoordinationService (jaxlib 0.8.0 to 0.9.x) and
// xla.coordination.CoordinationService (jaxlib 0.10.0 to 0.12.x).
inline constexpr absl::string_view kSupportedJaxlibVersions = "jaxlib 0.8.0 to 0.12.x";
// JAX heartbeats every heartbeat_timeout_seconds / 2 (50 s by default) and never tells the
// service its timeout: a JAX task is declared dead after this without a heartbeat. A dead JAX
// process is noticed much sooner, when its PollForError call breaks.
inline constexpr absl::Duration kJaxHeartbeatTimeout = absl::Seconds(100);
// The key whose value (an RFC 3339 time) tells JAX's preemption sync manager that the job is
// being preempted.
inline constexpr absl::string_view kJaxPreemptionNoticeKey = "RECEIVED_PREEMPTION_NOTICE";

struct JaxPortOptions {
  // Heartbeat timeout of the tasks that register through this port (never below the
  // service's own).
  absl::Duration heartbeat_timeout = kJaxHeartbeatTimeout;
  // Called once per answered call: protocol, method name, status code, and for the calls that
  // wait in the service (RegisterTask, Barrier, GetKeyValue, ShutdownTask) how long they waited.
  // May be empty.
  std::function<void(absl::string_view protocol, absl::string_view method, absl::StatusCode code,
                     std::optional<absl::Duration> waited)>
      on_rpc;
  // The budget directory replies are built under, shared with the service's other transports
  // (CoordinationServer passes its own); null: one of the port's own.
  std::shared_ptr<ReplyBudget> reply_budget;
};

// A task as WatchTasks (jaxlib 0.10+) and WatchJobState (earlier) report it. A task that
// registered is connected from then on, as in XLA's service (whose RegisterTask connects it
// before the connect barrier); one that shut down, or never registered, is disconnected; a
// failed one is in error with the failure the job's processes get.
struct WatchedTask {
  enum class State { kDisconnected, kConnected, kError };
  TaskId task = 0;
  State state = State::kDisconnected;
  Incarnation incarnation = 0;
  absl::Status error;
  bool reported = false;  // It reported the error itself (ReportErrorToService).
};

class JaxBridge : public std::enable_shared_from_this<JaxBridge> {
 public:
  JaxBridge(CoordinationService* service, JaxPortOptions options);

  CoordinationService& core() { return *service_; }
  const std::shared_ptr<ReplyBudget>& reply_budget() const { return options_.reply_budget; }

  RegisterArgs RegisterArgsFor(TaskId task, Incarnation incarnation, absl::string_view protocol,
                               absl::string_view peer) const;
  // Joins the registration barrier; once it passes, remembers which process holds the task.
  OpId Register(TaskId task, Incarnation incarnation, absl::string_view protocol,
                absl::string_view peer, std::function<void(absl::Status)> done);
  void Remember(TaskId task, Incarnation incarnation);
  // The registered incarnation of `task`, or 0 when it has none through this port.
  Incarnation IncarnationOf(TaskId task) const;
  // The task that registered with `incarnation`, or kUnidentifiedTask.
  TaskId TaskOf(Incarnation incarnation) const;

  // The error a task reported (ReportErrorToService), as it reported it: the job's failure, when
  // it is the first, reads as that error in XLA's words.
  void RememberReportedError(TaskId task, absl::Status error);
  void ForgetReportedError(TaskId task);
  std::optional<absl::Status> ReportedError(TaskId task) const;
  // The job's failure, as every task's PollForError hears of it (coordination/server/xla_errors.h).
  XlaError FailureError(const TaskFailure& failure) const;
  // Every task's state as WatchTasks and WatchJobState report it.
  std::vector<WatchedTask> WatchedTasks(const CoordinationService::TaskStates& states) const;

  // A preemption notice reached the job: JAX learns of it from its notice key (first write wins).
  void PublishPreemptionNotice(const PreemptionNotice& notice);
  // After a JAX process set `key`: its own preemption notice (SIGTERM handler) is the job's.
  void AfterInsert(TaskId task, absl::string_view key);

  void Count(absl::string_view protocol, absl::string_view method, absl::StatusCode code,
             std::optional<absl::Duration> waited = std::nullopt) const;

 private:
  CoordinationService* const service_;
  JaxPortOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<TaskId, Incarnation> incarnation_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<Incarnation, TaskId> task_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TaskId, absl::Status> reported_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coordination
