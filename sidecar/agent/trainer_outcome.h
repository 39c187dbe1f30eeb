#pragma once

namespace cohort::sidecar {

// How the attached trainer ended, for the sidecar's exit decision. Apart from
// agent_rpc_service.h, which returns it, so that the decision (sidecar_policy.h) builds without
// gRPC.
enum class TrainerOutcome {
  kRunning,   // Still attached (or never attached).
  kShutDown,  // Passed the shutdown barrier.
  kFailed,    // Died, or the job failed.
};

}  // namespace cohort::sidecar
