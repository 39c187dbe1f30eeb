#pragma once

#include <optional>
#include <vector>

#include "common/exit_codes.h"
#include "sidecar/agent/trainer_outcome.h"

// The sidecar's decisions, as pure functions: what a termination signal means, what rank 0's
// coordination service hears of an attempt's end, and which exit code the sidecar leaves with.
// Sidecar (sidecar.h) gathers the facts and acts on the answers.
namespace cohort::sidecar {

// cohort-sidecar's exit codes (docs/sidecar.md).
inline constexpr int kExitOk = 0;      // Every trainer shut down, or none ever attached.
inline constexpr int kExitFailed = 1;  // A trainer or the job failed.
inline constexpr int kExitUsage = 2;   // Bad configuration.

// What to do about a SIGTERM or SIGINT.
enum class SignalAction {
  // A preemption notice: tell the job through the agents, and keep waiting for the trainers.
  kReportPreemption,
  // The same for trainers still to come (--preempt-before-attach): reported once they joined.
  kReportPreemptionBeforeAttach,
  // Stop waiting for the trainers and exit.
  kStop,
};

// `signo` is SIGTERM or SIGINT, the `count`th signal received (1 for the first). Only the first
// SIGTERM can be a preemption notice: with a trainer attached it always is; with none attached,
// only under --preempt-before-attach and before any trainer ever attached (cohort-run forwards a
// preemption that may come before its trainers do; a trainer that came and went is done). Any
// other signal stops the sidecar.
SignalAction OnSignal(int signo, int count, bool any_trainer_attached, bool preempt_before_attach,
                      bool any_trainer_ever_attached);

// Restarting in place, rank 0: whether the running attempt's coordination service must hear that
// a pod's processes ended by themselves (`kind`: how; `joined`: whether any of them had
// registered with the service). A success and a follower's exit (told by the job: the job's own
// doing) are not news. A preempted process that had joined told the job itself, and the others
// may still be saving their checkpoint at the agreed step: only one preempted before it joined
// (the others wait for it in registration) is. Every other end is: its sidecar tells the service
// when a process it serves dies, but one that died before it joined is known only here.
bool ShouldTellCoordinator(ExitKind kind, bool joined);

// How one rank's trainer ended, as the sidecar saw it when it stopped waiting.
struct TrainerEnd {
  TrainerOutcome outcome = TrainerOutcome::kRunning;
  bool ever_attached = false;
};

// On rank 0: how the coordination service ended.
struct CoordinatorEnd {
  bool stopped_in_time = true;  // Every rank finished within the shutdown timeout.
  bool job_ok = true;           // The job did not fail.
};

// kExitOk when every trainer shut down, or was stopped by a signal without ever having attached
// (e.g. a program that does not use libdist: nothing failed), and the coordination service, if
// this sidecar ran it, saw the job end well in time; kExitFailed otherwise.
int ExitCode(const std::vector<TrainerEnd>& trainers,
             const std::optional<CoordinatorEnd>& coordinator);

}  // namespace cohort::sidecar
