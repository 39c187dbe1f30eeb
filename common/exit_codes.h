#pragma once

// What a process's exit means, decided once: libdist sets the two codes below, and the three
// supervisors that read exits (cohort-launch for a pod's processes, cohort-run for a machine's,
// the operator for a job's pods) classify each exit with ClassifyExit and pick the one that
// caused a failure with RootCause. libdist's public header repeats the two codes for programs
// (dist::kPeerFailureExitCode, dist::kPreemptedExitCode) and checks at compile time that they
// agree with these.

#include <sys/wait.h>

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "common/failure_cause.h"

namespace cohort {

// A process that exited because another process of the job failed (libdist's default
// peer-failure handler): it followed a failure and did not cause it.
inline constexpr int kPeerFailureExitCode = 75;

// A process that saved its checkpoint at the preemption sync point and stops because the job is
// being preempted: the gang restarts without counting a failure.
inline constexpr int kPreemptedExitCode = 76;

// How one process ended, as its supervisor saw it.
struct ProcessExit {
  int code = 0;             // Its exit code, or 128 + N when signal N killed it (as a shell and
                            // Kubernetes report it).
  bool signaled = false;    // A signal killed it.
  bool oom_killed = false;  // The kernel's OOM killer killed it (Kubernetes: reason OOMKilled).
  bool stopped = false;     // Its supervisor signalled it to stop (a fate-sharing kill, a
                            // stopped orphan): whatever it exited with, it did not cause this.

  // From waitpid's status; `stopped` when the supervisor itself signalled the process.
  static ProcessExit FromWaitStatus(int wait_status, bool stopped) {
    ProcessExit e;
    e.signaled = WIFSIGNALED(wait_status);
    e.code = e.signaled ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
    e.stopped = stopped;
    return e;
  }
  // From a container's terminated state: its exit code (over 128: killed by signal code - 128)
  // and its reason.
  static ProcessExit FromContainer(int exit_code, std::string_view reason) {
    ProcessExit e;
    e.code = exit_code;
    e.signaled = exit_code > 128;
    e.oom_killed = reason == "OOMKilled";
    return e;
  }
};

// What an exit means, from the most to the least likely cause of a failure (RootCause's order).
enum class ExitKind {
  kOutOfMemory,  // The OOM killer.
  kKilled,       // A signal nobody in its supervisor sent (kill -9, SIGSEGV; a SIGTERM its
                 // supervisor forwarded as a preemption notice reads as kPreempted instead:
                 // ProcessGroup::Child::Status).
  kError,        // Its own non-zero exit code.
  kPreempted,    // kPreemptedExitCode: it checkpointed and stopped for a preemption.
  kFollowed,     // kPeerFailureExitCode: it followed another process's failure.
  kStopped,      // Its supervisor stopped it (after another failure).
  kSucceeded,    // Exit code 0: no cause of anything.
};

constexpr ExitKind ClassifyExit(const ProcessExit& e) {
  if (e.code == 0 && !e.signaled) return ExitKind::kSucceeded;
  if (e.stopped) return ExitKind::kStopped;
  if (e.oom_killed) return ExitKind::kOutOfMemory;
  if (e.signaled) return ExitKind::kKilled;
  if (e.code == kPeerFailureExitCode) return ExitKind::kFollowed;
  if (e.code == kPreemptedExitCode) return ExitKind::kPreempted;
  return ExitKind::kError;
}

// Which of several exits (in the order they happened or were seen) caused the failure: the first
// of the most likely kind. A process's own failure (the OOM killer, a signal, its own error) is
// the cause before a preemption, so a program that crashes while saving its preemption checkpoint
// counts as a failure; a preemption before a follower's exit, since the followers exit because of
// it; a process its supervisor stopped last. nullopt when every exit succeeded (or none).
inline std::optional<size_t> RootCause(const std::vector<ExitKind>& exits) {
  std::optional<size_t> cause;
  for (size_t i = 0; i < exits.size(); ++i) {
    if (exits[i] == ExitKind::kSucceeded) continue;
    if (!cause || exits[i] < exits[*cause]) cause = i;
  }
  return cause;
}

// The failure cause an exit names by itself (kFollowed: the cause it was told is in the line
// libdist's handler wrote, common/termination_message.h; without it, kUnspecified).
constexpr FailureCause FailureCauseOf(ExitKind kind) {
  switch (kind) {
    case ExitKind::kOutOfMemory:
      return FailureCause::kOutOfMemory;
    case ExitKind::kKilled:
      return FailureCause::kKilledBySignal;
    case ExitKind::kPreempted:
      return FailureCause::kPreempted;
    case ExitKind::kFollowed:
    case ExitKind::kSucceeded:
      return FailureCause::kUnspecified;
    case ExitKind::kError:
    case ExitKind::kStopped:
      return FailureCause::kProcessExited;
  }
  return FailureCause::kUnspecified;
}

}  // namespace cohort
