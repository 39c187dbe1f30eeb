#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/coordination/v1/coordination.pb.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/reply_budget.h"

namespace cohort::coordination {

namespace pb = ::cohort::coordination::v1;

// The one mapping of the wire protocol onto CoordinationService, in the shape of XLA's
// CoordinationServiceRpcHandler: one XAsync(request, response, done) per call. Cohort's own
// transports call it — the unary RPCs and the Session stream (grpc_service.h, session_reactor.h),
// and tests in process — so each limit (key and value sizes, the reply budget of directory reads)
// holds on their paths. The JAX port (jax_compat_service.h) maps XLA's protocol onto
// CoordinationService itself, through JaxBridge, and builds its directory replies under this
// handler's shared reply budget. Authentication
// stays with the transport, which alone sees the caller's metadata.
//
// `request` is read only during the call; `response` must stay valid until `done` runs. `done`
// runs exactly once, possibly before XAsync returns, on an arbitrary thread, never under the
// service's lock. Calls that wait in the service (registration, shutdown, blocking get, barrier)
// return the OpId to pass to CancelOp() when their caller goes away; the others return 0.
//
// Thread-safe.
class CoordinationRpcHandler {
 public:
  using StatusCallback = std::function<void(absl::Status)>;
  // A directory reply: `charge` holds its bytes in the reply budget until the transport has
  // sent the response (or dropped it), so it must live as long as the response does.
  using ReplyCallback = std::function<void(absl::Status, ReplyBudget::Charge charge)>;
  using EventCallback = std::function<void(const pb::JobEvent&)>;

  CoordinationRpcHandler(CoordinationService* service, std::shared_ptr<ReplyBudget> reply_budget);
  CoordinationRpcHandler(const CoordinationRpcHandler&) = delete;
  CoordinationRpcHandler& operator=(const CoordinationRpcHandler&) = delete;

  CoordinationService& service() { return *service_; }
  ReplyBudget& reply_budget() { return *reply_budget_; }
  const std::shared_ptr<ReplyBudget>& shared_reply_budget() const { return reply_budget_; }

  OpId RegisterTaskAsync(const pb::RegisterTaskRequest* request, pb::RegisterTaskResponse* response,
                         StatusCallback done);
  OpId HeartbeatAsync(const pb::HeartbeatRequest* request, pb::HeartbeatResponse* response,
                      StatusCallback done);
  OpId ReportErrorAsync(const pb::ReportErrorRequest* request, pb::ReportErrorResponse* response,
                        StatusCallback done);
  OpId ShutdownTaskAsync(const pb::ShutdownTaskRequest* request, pb::ShutdownTaskResponse* response,
                         StatusCallback done);
  OpId InsertKeyValueAsync(const pb::InsertKeyValueRequest* request,
                           pb::InsertKeyValueResponse* response, StatusCallback done);
  OpId GetKeyValueAsync(const pb::GetKeyValueRequest* request, pb::GetKeyValueResponse* response,
                        StatusCallback done);
  OpId TryGetKeyValueAsync(const pb::TryGetKeyValueRequest* request,
                           pb::TryGetKeyValueResponse* response, StatusCallback done);
  // Built under the reply budget: runs when the budget has room (maybe later, on the thread
  // that released it). Never waits on peers, so it returns 0.
  OpId GetKeyValueDirAsync(const pb::GetKeyValueDirRequest* request,
                           pb::GetKeyValueDirResponse* response, ReplyCallback done);
  OpId DeleteKeyValueAsync(const pb::DeleteKeyValueRequest* request,
                           pb::DeleteKeyValueResponse* response, StatusCallback done);
  OpId IncrementKeyValueAsync(const pb::IncrementKeyValueRequest* request,
                              pb::IncrementKeyValueResponse* response, StatusCallback done);
  OpId BarrierAsync(const pb::BarrierRequest* request, pb::BarrierResponse* response,
                    StatusCallback done);
  OpId CancelBarrierAsync(const pb::CancelBarrierRequest* request,
                          pb::CancelBarrierResponse* response, StatusCallback done);
  OpId ReportPreemptionAsync(const pb::ReportPreemptionRequest* request,
                             pb::ReportPreemptionResponse* response, StatusCallback done);
  OpId GetJobProgressAsync(const pb::GetJobProgressRequest* request,
                           pb::GetJobProgressResponse* response, StatusCallback done);

  // Job events for one task: past ones at once, then live ones, until CancelOp(op). Errors:
  // those of CoordinationService::Watch.
  absl::StatusOr<OpId> WatchJob(const pb::WatchJobRequest* request, EventCallback on_event);

  // The caller of a waiting call (or of WatchJob) went away.
  void CancelOp(OpId op) { service_->CancelOp(op); }

 private:
  CoordinationService* const service_;
  const std::shared_ptr<ReplyBudget> reply_budget_;
};

// A handler method that answers with a plain status, for transports that dispatch generically.
template <typename Request, typename Response>
using HandlerMethod = OpId (CoordinationRpcHandler::*)(const Request*, Response*,
                                                       CoordinationRpcHandler::StatusCallback);

}  // namespace cohort::coordination
