#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordination/client/agent.h"
#include "coordination/client/job_client.h"
#include "coordination/server/coordination_server.h"
#include "libdist/src/options.h"
#include "libdist/src/sidecar_client.h"

namespace dist::internal {

// What an initialized process talks to: its sidecar (agent mode), or an in-process agent plus,
// on process 0, the coordination service itself (standalone mode).
class Runtime {
 public:
  using EventCallback = std::function<void(const cohort::coordination::JobEvent&)>;

  // Starts the service (standalone, process 0) and joins the job; returns once every process
  // joined.
  static absl::StatusOr<std::unique_ptr<Runtime>> Start(const ResolvedOptions& options,
                                                        EventCallback on_event);
  ~Runtime();

  cohort::coordination::JobClient* client() { return client_; }
  // Shutdown barrier, then (process 0, standalone) keeps the service up until every process is
  // done or the shutdown timeout passes.
  absl::Status Shutdown();

 private:
  Runtime() = default;
  ResolvedOptions options_;
  std::unique_ptr<SidecarClient> sidecar_;
  std::unique_ptr<cohort::coordination::CoordinationServer> server_;
  std::unique_ptr<cohort::coordination::Agent> agent_;
  cohort::coordination::JobClient* client_ = nullptr;
};

}  // namespace dist::internal
