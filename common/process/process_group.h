#pragma once

#include <signal.h>
#include <sys/wait.h>

// Children supervised together, as cohort-run, cohort-launch and the tests' job harness run
// them: each output line handed on with the child's label ("[rank 3] ..."), exits reaped in
// batches, SIGINT and SIGTERM taken through a signalfd, and a deadline after which every child
// still running is SIGKILLed. What an exit or a signal means is the caller's (its Hooks; the
// meaning of an exit code is common/exit_codes.h's).

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/process/subprocess.h"

namespace cohort {

class ProcessGroup {
 public:
  struct Child {
    std::string label;  // "rank 3", "sidecar 1".
    int rank = 0;       // The rank of a trainer; the first rank of a sidecar's pod.
    int pod = 0;        // The pod (cohort-run: the sidecar) the child belongs to.
    bool trainer = true;
    Subprocess process;
    LineReader output;
    bool output_open = true;
    bool killed = false;         // SIGKILLed by the group.
    bool stopped_by_us = false;  // Sent SIGINT/SIGTERM by the caller to make it exit.
    // Sent a preemption notice (SIGTERM) by the caller, which forwards the one it got.
    bool noticed = false;
    std::optional<absl::Time> exited_at;

    // Its wait status (call once it has exited), as the preemption it was: a child that the
    // preemption notice it was sent killed before its program could take it (no handler yet)
    // reads as having exited kPreemptedExitCode, not as killed by SIGTERM.
    int Status() const {
      const int st = *process.status();
      if (noticed && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) return kPreemptedExitCode << 8;
      return st;
    }
    // Whether Status() is such a reading.
    bool EndedByTheNotice() const { return Status() != *process.status(); }
    // How it ended (call once it has exited): the group's own kills and the caller's stops make
    // it kStopped whatever its status.
    ProcessExit Exit() const {
      return ProcessExit::FromWaitStatus(Status(), killed || stopped_by_us);
    }
  };

  struct Hooks {
    // Children that exited since the last call, in the order they were started.
    std::function<void(std::vector<Child*>& exited)> on_exits;
    // SIGINT or SIGTERM reached this process (only when the group takes signals).
    std::function<void(int signo)> on_signal;
    // Once per turn of the loop (at least every 50 ms in Run), after the exits.
    std::function<void()> on_tick;
    // A line a child printed. Unset: written to stdout as "[label] line" (Print).
    std::function<void(Child& child, std::string line)> on_line;
  };

  struct Options {
    // Block SIGINT, SIGTERM and SIGCHLD in the calling thread (call the constructor before
    // starting threads) and take them on a signalfd (Hooks::on_signal).
    bool take_signals = true;
  };

  // `name` ("cohort-run") prefixes the group's own messages.
  explicit ProcessGroup(std::string name);
  ProcessGroup(std::string name, Options options);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts a child (output captured, killed with this process: PR_SET_PDEATHSIG). Null, with the
  // reason printed to stderr, when it cannot be started. The child stays where it is (children
  // are never moved), so the pointer stays valid for the group's life.
  Child* Start(Child child, Subprocess::Options options);

  // Turns of the loop until every child exited and its output was drained.
  void Run(const Hooks& hooks);
  // One turn: reaps exits (on_exits), on_tick, the kill deadline, then waits up to `wait` for
  // output or a signal and hands them on. False once every child exited and its output was
  // drained.
  bool Step(const Hooks& hooks, absl::Duration wait);

  // SIGKILL every child still running at `at` (the earliest deadline given wins). Until then a
  // child that is stopped (SIGSTOP, a debugger's stop) is SIGKILLed at once: it cannot exit by
  // itself in the time it is given, and waiting for the deadline only delays the job's end.
  void KillAllAt(absl::Time at);
  // Forgets the kill deadline (before a new set of children starts).
  void ClearKillDeadline() { kill_at_.reset(); }
  // With no child running: waits up to `wait` for `fd` to become readable or for a signal
  // (handed to hooks.on_signal). True when `fd` is readable (or closed).
  bool WaitIdle(int fd, const Hooks& hooks, absl::Duration wait);
  std::optional<absl::Time> kill_at() const { return kill_at_; }

  std::deque<Child>& children() { return children_; }
  Child* Find(bool trainer, int rank);
  Child* Find(const std::string& label);

  // Writes `line` to stdout at once (lines of several children never interleave).
  static void Print(const std::string& line);

 private:
  void DrainOutput(Child& child, const Hooks& hooks);

  const std::string name_;
  std::deque<Child> children_;
  int signal_fd_ = -1;
  std::optional<absl::Time> kill_at_;
  absl::Time stops_checked_ = absl::InfinitePast();  // Last look for stopped children.
};

// The child whose exit caused a failure, out of `exited` (RootCause of their exits): one killed
// by a signal nobody in the group sent, then one that exited with its own error, then a preempted
// exit 76, a follower's exit 75, a child the group stopped. Null when every child exited 0 (or
// none exited).
const ProcessGroup::Child* RootCauseChild(const std::vector<const ProcessGroup::Child*>& exited);

}  // namespace cohort
