#pragma once

#include <string>
#include <vector>

#include "sidecar/sidecar.h"

// A spare pod's sidecar (COHORT_SPARE set, COHORT_PROCESS_ID not: env::IsSparePod()): it holds no
// rank. Started as any sidecar (Sidecar::Start with SidecarConfig::spare set), it serves
// cohort-launch's socket (cohort-launch waits there), /healthz, /readyz (ready once it follows
// the job's attempt hub) and /metrics, and follows the hub as a spare. When an attempt gives the
// pod the slot of a pod that is gone, it re-executes itself as that pod's sidecar, with
// COHORT_PROCESS_ID = the pod's first rank and COHORT_RESTART_ATTEMPT = the attempt: from there on
// it is any pod's sidecar, which tells cohort-launch to run the attempt as that pod.
namespace cohort::sidecar {

// Waits until an attempt gives the spare a slot (then execs `argv` anew as that pod's sidecar;
// returns only if that fails: 1) or a signal stops it (0).
int RunSpare(Sidecar& sidecar, const SidecarConfig& config, const std::vector<std::string>& argv);

}  // namespace cohort::sidecar
