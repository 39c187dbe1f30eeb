#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include "sidecar/sidecar.h"

// A spare pod's sidecar (COHORT_SPARE set, COHORT_PROCESS_ID not): it holds no rank. It serves
// cohort-launch's socket (cohort-launch waits there), /healthz, /readyz (ready once it follows
// the job's attempt hub) and /metrics, and follows the hub as a spare. When an attempt gives the
// pod the slot of a pod that is gone, it re-executes itself as that pod's sidecar, with
// COHORT_PROCESS_ID = the pod's first rank and COHORT_RESTART_ATTEMPT = the attempt: from there on
// it is any pod's sidecar, which tells cohort-launch to run the attempt as that pod.
namespace cohort::sidecar {

// True when this process is a spare's sidecar (the flags name no rank either).
bool IsSpare(const SidecarFlags& flags);

// Runs the spare until a slot is given (then execs `argv` anew; returns only if that fails) or a
// signal of `signals` (SIGTERM, SIGINT) stops it. The exit code.
int RunSpare(const SidecarFlags& flags, const std::vector<std::string>& argv, sigset_t signals);

}  // namespace cohort::sidecar
