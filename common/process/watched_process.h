#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"

namespace cohort {

// A child process whose output a thread collects line by line, so a caller can wait for a line
// without polling. With an `echo_label`, each line is also written to stderr as "[label] line".
// For tests and benchmarks that drive real daemons. Lifecycle: Start() -> WaitForLine()... ->
// Signal()/WaitForExit() -> destruction (SIGKILL to the process group if it still runs). The
// child is killed too when the thread that started it ends (a test or benchmark that crashed or
// was killed), so no local cluster or operator outlives its driver.
// Thread-safe, except that one thread signals and waits.
class WatchedProcess {
 public:
  static absl::StatusOr<std::unique_ptr<WatchedProcess>> Start(
      std::vector<std::string> argv, std::map<std::string, std::string> env = {},
      std::string echo_label = "");
  ~WatchedProcess();
  WatchedProcess(const WatchedProcess&) = delete;
  WatchedProcess& operator=(const WatchedProcess&) = delete;

  // The first line containing `text` once it is printed; "" if the deadline passes or the
  // process closed its output first.
  std::string WaitForLine(const std::string& text, absl::Duration timeout);
  bool HasLine(const std::string& text);
  // Everything printed so far.
  std::string Output();
  // Sends `sig` to the process group.
  void Signal(int sig) { process_.Signal(sig); }
  // The wait status, or nullopt if it did not exit (and close its output) within `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout);
  pid_t pid() const { return process_.pid(); }

 private:
  WatchedProcess() = default;
  std::string FindLocked(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string echo_label_;
  Subprocess process_;
  std::thread reader_;
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort
