#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/coordination.grpc.pb.h"
#include "common/grpc_util.h"
#include "sidecar/agent/control_plane.h"
#include "sidecar/agent/session_client.h"
#include "sidecar/coordination/types.h"

namespace cohort::agent {

using coordination::Incarnation;
using coordination::JobEvent;
using coordination::TaskId;

struct AgentOptions {
  std::string coordinator_address;  // host:port of the coordination service.
  TaskId task = 0;
  int32_t num_tasks = 1;
  std::string token;
  absl::Duration initialization_timeout = absl::Minutes(5);
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration shutdown_timeout = absl::Minutes(5);
  int64_t pid = 0;  // The process this rank runs as (the trainer's); 0: this process.
};

// One rank's client of the coordination service: registers (retrying with exponential backoff
// and jitter until the initialization timeout), heartbeats, watches the job for failures and
// preemption notices, and forwards key-value, barrier and shutdown calls with its task id,
// incarnation and barrier counters filled in.
//
// Used by cohort-sidecar (one Agent per attached trainer) and in-process by libdist's
// standalone mode. Threads: one heartbeat thread and one event-watch thread, both started by
// Connect() and joined by the destructor. Calls are asynchronous (gRPC callback API) so the
// sidecar never holds a thread per waiting trainer call. Thread-safe.
class Agent final : public ControlPlane {
 public:
  using EventCallback = std::function<void(const JobEvent&)>;

  explicit Agent(AgentOptions options);
  // Cancels in-flight calls and joins the threads.
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Registers and waits until every task registered. `on_event` then receives each job event
  // once, in order: a peer failure, a preemption notice, or the loss of the service (cause
  // kServiceUnreachable). Errors: InvalidArgument / AlreadyExists from the service (bad rank,
  // size mismatch, duplicate rank), DeadlineExceeded (coordinator unreachable or peers missing
  // within the initialization timeout; the message says which), Aborted (job failed).
  absl::Status Connect(EventCallback on_event);

  bool connected() const { return connected_.load(); }
  Incarnation incarnation() const { return incarnation_; }
  const AgentOptions& options() const { return options_; }

  // Each forwards the request with task id and incarnation set. Blocking ones take their
  // timeout from the request (timeout_ms) or from the options.
  void InsertKeyValue(pb::InsertKeyValueRequest req, Callback<pb::InsertKeyValueResponse> done) override;
  void GetKeyValue(pb::GetKeyValueRequest req, Callback<pb::GetKeyValueResponse> done) override;
  void TryGetKeyValue(pb::TryGetKeyValueRequest req, Callback<pb::TryGetKeyValueResponse> done) override;
  void GetKeyValueDir(pb::GetKeyValueDirRequest req, Callback<pb::GetKeyValueDirResponse> done) override;
  void DeleteKeyValue(pb::DeleteKeyValueRequest req, Callback<pb::DeleteKeyValueResponse> done) override;
  void IncrementKeyValue(pb::IncrementKeyValueRequest req,
                         Callback<pb::IncrementKeyValueResponse> done) override;
  // Sets the counter: this process's k-th call of an id is call k. FailedPrecondition if this
  // process already waits in the same barrier.
  void Barrier(pb::BarrierRequest req, Callback<pb::BarrierResponse> done) override;
  void CancelBarrier(pb::CancelBarrierRequest req, Callback<pb::CancelBarrierResponse> done) override;
  void ReportPreemption(Callback<pb::ReportPreemptionResponse> done) override;
  void ReportError(coordination::FailureCause cause, std::string message,
                   Callback<pb::ReportErrorResponse> done) override;
  // Shutdown barrier; afterwards heartbeats stop and the agent is disconnected.
  void Shutdown(Callback<pb::ShutdownTaskResponse> done) override;

  // Abandons a Connect() in progress (its registration is withdrawn) and stops the threads.
  void Cancel();

  // Whether this process reported a preemption notice (so its death counts as preempted).
  bool preemption_reported() const { return preemption_reported_.load(); }
  // Whether a job failure was delivered.
  bool job_failed() const;

 private:
  template <typename Req, typename Resp, typename Invoke>
  void Unary(Req req, absl::Duration timeout, Invoke invoke, Callback<Resp> done);
  // Sends one call on the Session stream (opened on first use, reopened after it broke).
  // `set` stores the request in the SessionRequest; `get` extracts the typed response.
  template <typename Req, typename Resp, typename Set, typename Get>
  void OnSession(Req req, Set set, Get get, Callback<Resp> done);
  // Ends the session: calls waiting on it fail with `status`.
  void CloseSession(const absl::Status& status);
  void HeartbeatLoop();
  void WatchLoop();
  // Delivers an event once (failures and preemption are deduplicated across stream reconnects).
  void Deliver(const JobEvent& event);
  void StopBackgroundThreads();
  void NotifyStop();

  const AgentOptions options_;
  const Incarnation incarnation_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::CoordinationService::Stub> stub_;
  std::atomic<bool> connected_{false};
  std::atomic<bool> preemption_reported_{false};
  Incarnation service_incarnation_ = 0;

  mutable absl::Mutex mu_;
  EventCallback on_event_ ABSL_GUARDED_BY(mu_);
  bool failure_delivered_ ABSL_GUARDED_BY(mu_) = false;
  bool preemption_delivered_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, int64_t> barrier_counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> barriers_in_progress_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* register_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<SessionClient> session_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  absl::Notification stop_;
  std::thread heartbeat_thread_;
  std::thread watch_thread_;
};

}  // namespace cohort::agent
