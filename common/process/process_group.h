#pragma once

// The supervision cohort-run and cohort-launch share: children started together, each output
// line printed with the child's label ("[rank 3] ..."), exits reaped in batches, SIGINT and
// SIGTERM taken through a signalfd, and a deadline after which every child still running is
// SIGKILLed. What an exit or a signal means is the caller's (its Hooks).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"

namespace cohort {

class ProcessGroup {
 public:
  struct Child {
    std::string label;  // "rank 3", "sidecar 1".
    int rank = 0;       // The rank of a trainer; the first rank of a sidecar's pod.
    int pod = 0;        // The pod (cohort-run: the sidecar) the child belongs to.
    bool trainer = true;
    Subprocess process;
    std::string buffer;
    bool output_open = true;
    bool killed = false;         // SIGKILLed by the group.
    bool stopped_by_us = false;  // Sent SIGINT/SIGTERM by the caller to make it exit.
    std::optional<absl::Time> exited_at;
  };

  struct Hooks {
    // Children that exited since the last call, in the order they were started.
    std::function<void(std::vector<Child*>& exited)> on_exits;
    // SIGINT or SIGTERM reached this process.
    std::function<void(int signo)> on_signal;
    // Once per turn of the loop (at least every 50 ms), after the exits.
    std::function<void()> on_tick;
  };

  // Blocks SIGINT, SIGTERM and SIGCHLD in the calling thread (call it before starting threads)
  // and takes them on a signalfd. `name` ("cohort-run") prefixes the group's own messages.
  explicit ProcessGroup(std::string name);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts a child (output captured, killed with this process: PR_SET_PDEATHSIG). False, with the
  // reason printed to stderr, when it cannot be started. Call before Run().
  bool Start(Child child, Subprocess::Options options);

  // Until every child exited and its output was drained.
  void Run(const Hooks& hooks);

  // SIGKILL every child still running at `at` (the earliest deadline given wins).
  void KillAllAt(absl::Time at);
  std::optional<absl::Time> kill_at() const { return kill_at_; }

  std::vector<Child>& children() { return children_; }
  Child* Find(bool trainer, int rank);

  // Writes `line` to stdout at once (lines of several children never interleave).
  static void Print(const std::string& line);

 private:
  void DrainOutput(Child& child);

  const std::string name_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  std::optional<absl::Time> kill_at_;
};

// The child whose exit caused a failure, out of those that did not succeed: a child killed by a
// signal nobody in the group sent, then one that exited with its own error, then the rest (a
// preempted exit 76, a follower's exit 75, a child the group stopped). Null when every child
// exited 0 (or none exited).
const ProcessGroup::Child* FirstCause(const std::vector<const ProcessGroup::Child*>& exited);

}  // namespace cohort
