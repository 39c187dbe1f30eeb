#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordination/client/job_client.h"
#include "dist/distributed.h"

namespace dist::internal {

// The initialized job as the rest of libdist (the collectives) uses it. `client` keeps the job's
// state alive while it is held, so a Shutdown() on another thread cannot pull it away mid-call.
struct JobHandle {
  std::shared_ptr<cohort::coordination::JobClient> client;
  int process_id = 0;
  int num_processes = 1;
  int restart_attempt = 0;
  int local_process_id = 0;         // COHORT_LOCAL_PROCESS_ID, resolved by Initialize.
  std::string coordinator_address;  // May be empty in agent mode.
  absl::Duration initialization_timeout;
  absl::Duration heartbeat_timeout;
};

// FailedPrecondition when dist::Initialize() has not run.
absl::StatusOr<JobHandle> CurrentJob();

// The job's failure once libdist was told of it; nullopt before (or when not initialized).
std::optional<PeerFailure> JobFailure();

// After a call failed because the job failed: waits, at most `bound`, until the program's
// peer-failure handler returned, so that fate sharing (by default: exit 75) takes its course
// before the program sees the error.
void AwaitFailureHandled(absl::Duration bound);

}  // namespace dist::internal
