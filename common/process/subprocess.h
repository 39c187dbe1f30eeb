#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace cohort {

// A child process in its own process group, its stdout and stderr joined into one pipe the
// parent reads (LineReader). Used by ProcessGroup (cohort-run, cohort-launch), the local kubelet
// and the tests' processes. Not thread-safe.
class Subprocess {
 public:
  struct Options {
    Options() = default;
    // The common case; set the rarer fields by name.
    Options(std::vector<std::string> argv, std::map<std::string, std::string> env_set = {},
            bool capture_output = true)
        : argv(std::move(argv)), env_set(std::move(env_set)), capture_output(capture_output) {}

    std::vector<std::string> argv;               // argv[0] is searched in PATH when no '/'.
    std::map<std::string, std::string> env_set;  // Added to (or replacing in) our environment.
    bool capture_output = true;                  // Else the child inherits our stdout/stderr.
    bool inherit_env = true;                     // Else the child's environment is env_set alone.
    std::string output_path;  // Append stdout and stderr to this file (instead of capturing).
    std::string working_dir;  // Empty: ours.
    // SIGKILL the child (its own process, not its group) when the thread that started it ends,
    // e.g. when the parent is killed, so that it never outlives its parent.
    bool die_with_parent = false;
    // The CPUs the child may run on (sched_setaffinity before exec); empty: ours.
    std::vector<int> cpus;
  };

  // Errors: NotFound (program missing), Internal (fork/pipe failure).
  static absl::StatusOr<Subprocess> Start(const Options& options);

  Subprocess() = default;  // Not started.
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  // Kills the process group (SIGKILL) and reaps it if still running.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  int output_fd() const { return output_fd_; }  // -1 when not captured or closed.
  void CloseOutput();

  // Sends `sig` to the whole process group.
  void Signal(int sig) const;
  // Non-blocking: the wait status once exited, else nullopt.
  std::optional<int> Poll();
  // Blocks until exit; returns the wait status.
  int Wait();
  bool running() const { return pid_ > 0 && !status_.has_value(); }
  std::optional<int> status() const { return status_; }

  // "exit code 3", "killed by signal 9 (Killed)".
  static std::string DescribeStatus(int wait_status);
  // Exit code, or 128 + signal.
  static int ExitCodeOf(int wait_status);

 private:
  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::optional<int> status_;
};

// A child's output (a pipe, usually Subprocess::output_fd()) read as lines. Read() takes what is
// available: on a non-blocking fd it never waits, on a blocking one it waits for some output.
class LineReader {
 public:
  LineReader() = default;
  explicit LineReader(int fd) : fd_(fd) {}

  // Appends the complete lines read to `lines` and keeps a partial one for the next call. False
  // once the output ended (a final partial line is then appended as a line) or with no fd.
  bool Read(std::vector<std::string>* lines);
  int fd() const { return fd_; }
  // What was read after the last complete line.
  const std::string& partial() const { return partial_; }

 private:
  int fd_ = -1;
  std::string partial_;
};

// The peak resident set (VmHWM) of running process `pid`, in bytes; -1 if it cannot be read.
int64_t PeakRssBytes(pid_t pid);

// A free TCP port on 127.0.0.1 (bound and released; the caller binds it promptly), from below the
// kernel's ephemeral range when there is room (10000 up to it): a released ephemeral port can be
// taken by any outgoing connection before the caller binds it.
absl::StatusOr<int> PickFreePort();

}  // namespace cohort
