#pragma once

#include <atomic>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/reply_budget.h"

namespace cohort::coordination {

// A unary reactor for one call into the coordination service, which may wait there
// (registration, barrier, blocking get, shutdown). It is referenced by gRPC (until OnDone) and
// by the code that started the call (until it has handed the OpId over), so that a completion
// racing with the start can never free it early. OnCancel (client gone, deadline, server
// shutdown) cancels the call in the service, which completes it with CANCELLED. A directory
// reply's budget charge is held until gRPC is done with the response.
//
// Every transport of every protocol serving unary calls uses it (grpc_service.cc,
// jax_compat_service.cc). Thread-safe.
class WaitingCallReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit WaitingCallReactor(CoordinationService* service) : service_(service) {}

  void Complete(grpc::Status status, ReplyBudget::Charge charge = {}) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
      charge_ = std::move(charge);
    }
    Finish(std::move(status));
  }

  // Hands over the OpId of the call now waiting in the service (0: it does not wait), and drops
  // the starter's reference.
  void Started(OpId op) {
    bool cancel_now = false;
    {
      absl::MutexLock lock(&mu_);
      op_ = op;
      cancel_now = cancelled_ && !finished_ && op != 0;
    }
    if (cancel_now) service_->CancelOp(op);
    Unref();
  }

  void OnCancel() override {
    OpId op = 0;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      op = op_;
    }
    if (op != 0) service_->CancelOp(op);
  }
  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }
  CoordinationService* const service_;
  std::atomic<int> refs_{2};
  absl::Mutex mu_;
  OpId op_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  ReplyBudget::Charge charge_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coordination
