#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/job_settings.h"
#include "coordination/client/coordination_stub.h"
#include "coordination/client/job_client.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

struct AgentOptions {
  std::string coordinator_address;  // host:port of the coordination service.
  TaskId task = 0;
  int32_t num_tasks = 1;
  std::string token;
  absl::Duration initialization_timeout = kDefaultInitializationTimeout;
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  absl::Duration shutdown_timeout = kDefaultShutdownTimeout;
  int64_t pid = 0;  // The process this rank runs as (the trainer's); 0: this process.
  // Where the rank runs, for the job's messages ("rank 5 (<where> pid 812) failed ..."); empty:
  // this host's name. A sidecar serving several ranks says "pod demo-1, local process 1,".
  std::string where;
  // The gang's restart attempt this process belongs to (COHORT_RESTART_ATTEMPT), sent with the
  // registration so that the service can turn away a process of another attempt.
  std::optional<int32_t> restart_attempt;
};

// The options of the agent for one rank of the job that `settings` describe.
AgentOptions AgentOptionsFor(const JobSettings& settings);

// One rank's client of the coordination service: registers (retrying with exponential backoff
// and jitter until the initialization timeout), heartbeats, watches the job for failures and
// preemption notices, and serves the JobClient calls with its task id, incarnation and barrier
// counters filled in.
//
// Used by cohort-sidecar (one Agent per attached trainer) and in-process by libdist's
// standalone mode. Threads: one heartbeat thread and one event-watch thread, both started by
// Connect() and joined by Cancel() or the destructor; every timed wait is on the injected
// Clock. Calls are asynchronous, so the sidecar never holds a thread per waiting trainer call.
// When the service is lost, every call still waiting fails at once with Unavailable.
// Thread-safe.
// How often an agent with this heartbeat timeout sends heartbeats (a quarter of it, within
// [50 ms, 10 s]): what a report riding on heartbeats may lag behind.
absl::Duration HeartbeatInterval(absl::Duration heartbeat_timeout);

// A program's progress report that shows a collective in flight for this long is sent to the
// service at once (a heartbeat of its own, at most one per kPromptProgressEvery), not on the next
// heartbeat: the watchdogs of the ranks waiting in it will soon ask the service where everybody
// is, and their answer must not lag by a heartbeat interval (docs/faults.md: the rank that holds a
// collective up is named within its timeout + 1 s, whatever the heartbeat timeout). Only stalled
// collectives cost these calls.
inline constexpr absl::Duration kPromptProgressAfter = absl::Seconds(1);
inline constexpr absl::Duration kPromptProgressEvery = absl::Milliseconds(500);

// How long a probe of the service (a heartbeat that does not wait for the channel) may take
// before the service counts as silent rather than gone.
inline constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

class Agent final : public JobClient {
 public:
  using EventCallback = std::function<void(const JobEvent&)>;

  // Reaches options.coordinator_address over gRPC.
  explicit Agent(AgentOptions options);
  // Reaches the service through `stub`; waits and timeouts on `clock`.
  Agent(AgentOptions options, std::unique_ptr<CoordinationStub> stub, Clock* clock);
  // Stops the threads, fails the calls still waiting (Cancelled) and waits until every call it
  // made on the stub has completed, since their completions reference the agent.
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Registers and waits until every task registered. `on_event` then receives each job event
  // once, in order, on an agent thread: a peer failure, a preemption notice, or the loss of the
  // service (cause kServiceUnreachable). Errors: InvalidArgument / AlreadyExists /
  // FailedPrecondition from the service (bad rank, size mismatch, duplicate rank, another
  // restart attempt), DeadlineExceeded (coordinator unreachable or peers missing within the
  // initialization timeout; the message says which), Aborted (job failed), Cancelled (Cancel()).
  absl::Status Connect(EventCallback on_event);

  bool connected() const { return connected_.load(); }
  Incarnation incarnation() const { return incarnation_; }
  const AgentOptions& options() const { return options_; }

  void InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                      DoneCallback done) override;
  void GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) override;
  void TryGetKeyValue(std::string key, ValueCallback done) override;
  void GetKeyValueDir(std::string directory, EntriesCallback done) override;
  void DeleteKeyValue(std::string key, DoneCallback done) override;
  void IncrementKeyValue(std::string key, int64_t increment, IntCallback done) override;
  void Barrier(std::string id, absl::Duration timeout, std::vector<TaskId> participants,
               DoneCallback done) override;
  void CancelBarrier(std::string id, DoneCallback done) override;
  void ReportPreemption(DoneCallback done) override;
  // Goes out even while the agent is stopping: a trainer's death must reach the job.
  void ReportError(FailureCause cause, std::string message, DoneCallback done) override;
  // Kept for the next heartbeats; `done` runs at once.
  void ReportProgress(std::vector<CollectiveProgress> progress, DoneCallback done) override;
  void ReportStep(int64_t step, DoneCallback done) override;
  void GetJobProgress(ProgressCallback done) override;
  // Afterwards heartbeats stop and the agent is disconnected.
  void Shutdown(DoneCallback done) override;

  // Abandons a Connect() in progress and stops the threads. The service sees the registration's
  // connection close, which fails the rank and the job (a process that goes away mid-way has
  // died, docs/faults.md).
  void Cancel();

  // Whether this process reported a preemption notice (so its death counts as preempted).
  bool preemption_reported() const { return preemption_reported_.load(); }
  // Whether a job failure was delivered.
  bool job_failed() const;

 private:
  using StubCallback = CoordinationStub::StatusCallback;

  // Registers a call that waits for its answer; `fail` completes it early (service lost, agent
  // stopping). Returns 0 when the agent refuses new calls; otherwise the call counts as one on
  // the stub until EndStubCall().
  uint64_t BeginCall(std::function<void(absl::Status)> fail, bool even_when_stopping);
  // Whether call `id` was still waiting (then the caller completes it) and forgets it.
  bool TakeCall(uint64_t id);
  void EndStubCall();
  // Completes every waiting call with `status`.
  void FailCalls(const absl::Status& status);
  // Wraps a completion of a call on the stub, so that the destructor can wait for it.
  StubCallback CountStubCall(StubCallback done);

  template <typename Req, typename Resp, typename Done>
  void OnStub(void (CoordinationStub::*method)(const Req&, Resp*, StubCallback), Req request,
              Done done);
  // `response`, when given, receives the reply (read it in `done`).
  template <typename Req, typename Resp>
  void OnStubWithTimeout(void (CoordinationStub::*method)(const Req&, Resp*, absl::Duration,
                                                          StubCallback),
                         Req request, absl::Duration timeout, bool even_when_stopping,
                         DoneCallback done, std::shared_ptr<Resp> response = nullptr);
  // Runs one unary call on the stub from a background thread and waits for its answer.
  template <typename Req, typename Resp>
  absl::Status CallAndWait(void (CoordinationStub::*method)(const Req&, Resp*, absl::Duration,
                                                            StubCallback),
                           const Req& request, Resp* response, absl::Duration timeout);

  // What a call gets when the agent takes no more: Unavailable once the service was lost,
  // else Cancelled.
  absl::Status Refusal() const;
  // One heartbeat that does not wait for the channel: Unavailable means the service refused or
  // reset the connection (its process is gone).
  absl::Status ProbeService();
  // Delivers the loss of the service (cause kServiceUnreachable); `why` completes the sentence.
  void LoseService(absl::string_view why);
  void HeartbeatLoop();
  void WatchLoop();
  // Delivers an event once (failures and preemption are deduplicated across stream reconnects).
  void Deliver(const JobEvent& event);
  void StopBackgroundThreads();
  void NotifyStop();

  const AgentOptions options_;
  const Incarnation incarnation_;
  const std::unique_ptr<CoordinationStub> stub_;
  Clock* const clock_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> preemption_reported_{false};
  Incarnation service_incarnation_ = 0;  // Set by Connect before the threads start.

  mutable absl::Mutex mu_;
  EventCallback on_event_ ABSL_GUARDED_BY(mu_);
  bool failure_delivered_ ABSL_GUARDED_BY(mu_) = false;
  bool preemption_delivered_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, int64_t> barrier_counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> barriers_in_progress_ ABSL_GUARDED_BY(mu_);
  uint64_t last_call_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::function<void(absl::Status)>> waiting_calls_
      ABSL_GUARDED_BY(mu_);
  int stub_calls_ ABSL_GUARDED_BY(mu_) = 0;  // Calls on the stub not yet completed.
  std::unique_ptr<CoordinationStub::Watch> watch_ ABSL_GUARDED_BY(mu_);
  // The program's last progress report, carried on every heartbeat after it.
  std::vector<CollectiveProgress> progress_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> progress_at_ ABSL_GUARDED_BY(mu_);
  absl::Time progress_sent_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // Sent at once last.
  // The program's last training step and when it reported it.
  std::optional<int64_t> step_ ABSL_GUARDED_BY(mu_);
  absl::Time step_at_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why the service is lost, once it is: later calls fail at once with it.
  std::optional<std::string> service_lost_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread heartbeat_thread_;
  std::thread watch_thread_;
};

}  // namespace cohort::coordination
