#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordination/core/coordination_service.h"
#include "coordination/server/reply_budget.h"

namespace cohort::coordination {

// A port that speaks another protocol over a CoordinationServer's service, started and stopped
// with it (ServerOptions::attached_port). The one there is today is the JAX port
// (jax_compat_service.h); the server knows nothing of its protocol, so what links the server
// (libdist's standalone mode) does not carry it.
class ServicePort {
 public:
  virtual ~ServicePort() = default;
  // The port it listens on.
  virtual int port() const = 0;
  // Stops taking calls; calls in flight get until `deadline`, then are cancelled.
  virtual void Shutdown(absl::Time deadline) = 0;
  // Returns once every call is done. The service must outlive this.
  virtual void Wait() = 0;
};

// Starts a port over `service`; directory replies are built under `reply_budget`, the one every
// transport of the service shares. Errors: what keeps the port from listening.
using ServicePortStarter = std::function<absl::StatusOr<std::unique_ptr<ServicePort>>(
    CoordinationService* service, std::shared_ptr<ReplyBudget> reply_budget)>;

}  // namespace cohort::coordination
