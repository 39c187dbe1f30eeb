#include "sidecar/sidecar_policy.h"

#include <signal.h>

namespace cohort::sidecar {

SignalAction OnSignal(int signo, int count, bool any_trainer_attached, bool preempt_before_attach,
                      bool any_trainer_ever_attached) {
  if (signo != SIGTERM || count != 1) return SignalAction::kStop;
  if (any_trainer_attached) return SignalAction::kReportPreemption;
  if (preempt_before_attach && !any_trainer_ever_attached) {
    return SignalAction::kReportPreemptionBeforeAttach;
  }
  return SignalAction::kStop;
}

int ExitCode(const std::vector<TrainerEnd>& trainers,
             const std::optional<CoordinatorEnd>& coordinator) {
  int exit_code = kExitOk;
  for (const TrainerEnd& t : trainers) {
    const bool idle_stop = t.outcome == TrainerOutcome::kRunning && !t.ever_attached;
    if (t.outcome != TrainerOutcome::kShutDown && !idle_stop) exit_code = kExitFailed;
  }
  if (coordinator && (!coordinator->stopped_in_time || !coordinator->job_ok)) {
    exit_code = kExitFailed;
  }
  return exit_code;
}

bool ShouldTellCoordinator(ExitKind kind, bool joined) {
  switch (kind) {
    case ExitKind::kSucceeded:
    case ExitKind::kFollowed:
      return false;
    case ExitKind::kPreempted:
      return !joined;
    case ExitKind::kOutOfMemory:
    case ExitKind::kKilled:
    case ExitKind::kError:
    case ExitKind::kStopped:
      return true;
  }
  return true;
}

}  // namespace cohort::sidecar
