#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/coordination.pb.h"

namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

// How an Agent reaches the coordination service: every call of the protocol, asynchronous, in
// the shape of the service's CoordinationRpcHandler (XLA's agent is built on a
// CoordinationClient the same way). GrpcCoordinationStub is the real one; the Agent's unit
// tests put the service's handler right behind a stub, in process, and inject faults there.
//
// `response` must stay valid until `done` runs; `done` runs exactly once, on an arbitrary
// thread, possibly before the call returns. Thread-safe.
class CoordinationStub {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  using EventCallback = std::function<void(const pb::JobEvent&)>;

  // A running WatchJob stream; destroying the handle cancels it.
  class Watch {
   public:
    virtual ~Watch() = default;
    // Ends the stream; its `on_end` runs soon after (if it has not already).
    virtual void Cancel() = 0;
  };

  virtual ~CoordinationStub() = default;

  // Unary calls. `timeout` bounds the call, including the wait for the service to be reachable,
  // except for Heartbeat: it does not wait, so a service whose connection is refused or reset
  // (its process died) fails it at once with Unavailable, and only a silent service (a frozen or
  // partitioned host) runs into the timeout.
  virtual void RegisterTask(const pb::RegisterTaskRequest& request,
                            pb::RegisterTaskResponse* response, absl::Duration timeout,
                            StatusCallback done) = 0;
  virtual void Heartbeat(const pb::HeartbeatRequest& request, pb::HeartbeatResponse* response,
                         absl::Duration timeout, StatusCallback done) = 0;
  virtual void ReportError(const pb::ReportErrorRequest& request, pb::ReportErrorResponse* response,
                           absl::Duration timeout, StatusCallback done) = 0;
  virtual void ReportPreemption(const pb::ReportPreemptionRequest& request,
                                pb::ReportPreemptionResponse* response, absl::Duration timeout,
                                StatusCallback done) = 0;
  virtual void ShutdownTask(const pb::ShutdownTaskRequest& request,
                            pb::ShutdownTaskResponse* response, absl::Duration timeout,
                            StatusCallback done) = 0;
  virtual void GetJobProgress(const pb::GetJobProgressRequest& request,
                              pb::GetJobProgressResponse* response, absl::Duration timeout,
                              StatusCallback done) = 0;

  // Key-value and barrier calls. Their timeouts travel in the requests and the service enforces
  // them; a transport may carry them as messages on one stream.
  virtual void InsertKeyValue(const pb::InsertKeyValueRequest& request,
                              pb::InsertKeyValueResponse* response, StatusCallback done) = 0;
  virtual void GetKeyValue(const pb::GetKeyValueRequest& request, pb::GetKeyValueResponse* response,
                           StatusCallback done) = 0;
  virtual void TryGetKeyValue(const pb::TryGetKeyValueRequest& request,
                              pb::TryGetKeyValueResponse* response, StatusCallback done) = 0;
  virtual void GetKeyValueDir(const pb::GetKeyValueDirRequest& request,
                              pb::GetKeyValueDirResponse* response, StatusCallback done) = 0;
  virtual void DeleteKeyValue(const pb::DeleteKeyValueRequest& request,
                              pb::DeleteKeyValueResponse* response, StatusCallback done) = 0;
  virtual void IncrementKeyValue(const pb::IncrementKeyValueRequest& request,
                                 pb::IncrementKeyValueResponse* response, StatusCallback done) = 0;
  virtual void Barrier(const pb::BarrierRequest& request, pb::BarrierResponse* response,
                       StatusCallback done) = 0;
  virtual void CancelBarrier(const pb::CancelBarrierRequest& request,
                             pb::CancelBarrierResponse* response, StatusCallback done) = 0;

  // Streams the job's events (past ones first) to `on_event` until the stream ends; `on_end`
  // then runs once with the reason (Cancelled after Watch::Cancel).
  virtual std::unique_ptr<Watch> WatchJob(const pb::WatchJobRequest& request,
                                          EventCallback on_event, StatusCallback on_end) = 0;

  // Whether the service was ever reached, to tell "coordinator unreachable" from "reached, but
  // peers are missing" when registration times out.
  virtual bool ServiceReached() const = 0;
  // Whether a connection to the service is open right now (and so ServiceReached() from then on).
  virtual bool ServiceConnected() const = 0;

  // Cancels every call in flight; each completes (Cancelled) soon after. Later calls still go
  // out.
  virtual void CancelAll() = 0;
};

}  // namespace cohort::coordination
