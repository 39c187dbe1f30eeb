#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/process/process_group.h"
#include "common/process/subprocess.h"

namespace cohort::testing {

// Real cohort-sidecar and trainer processes on loopback for one test, started one by one: a
// fresh coordinator port, job token and work directory, each process with the job's environment
// (env::JobVariables) and watched by a ProcessGroup (common/process). Output of every process is
// collected by label ("sidecar 2", "rank 2") and echoed to the test log. Not thread-safe.
class JobHarness {
 public:
  struct Config {
    int num_processes = 2;
    std::string heartbeat_timeout = "10s";
    std::string initialization_timeout = "30s";
    std::string shutdown_timeout = "30s";
  };

  explicit JobHarness(Config config);
  ~JobHarness();

  // Environment of rank `rank` (agent mode when `with_sidecar`).
  std::map<std::string, std::string> Env(int rank, bool with_sidecar) const;

  void StartSidecar(int rank, std::map<std::string, std::string> extra_env = {});
  // The trainer's label is "rank <rank>" unless `label` is given.
  void StartTrainer(int rank, const std::string& scenario,
                    std::map<std::string, std::string> extra_env = {}, std::string label = "");
  // Starts every sidecar, then every trainer.
  void StartAll(const std::string& scenario);

  // Reads output until `label` printed a line containing `text`; false at the deadline.
  bool WaitForLine(const std::string& label, const std::string& text, absl::Duration timeout);
  // Waits for the process to exit; returns its wait status, or -1 at the deadline.
  int WaitForExit(const std::string& label, absl::Duration timeout);
  std::vector<std::string> Lines(const std::string& label) const;
  // The first line of `label` containing `text`, or "".
  std::string FindLine(const std::string& label, const std::string& text) const;
  Subprocess& Process(const std::string& label);
  int http_port(int rank) const;
  const Config& config() const { return config_; }
  int coordinator_port() const { return port_; }
  std::string token() const { return token_; }

 private:
  void Start(const std::string& label, std::vector<std::string> argv,
             std::map<std::string, std::string> env);
  // Reads whatever is available within `wait`, and reaps what exited.
  void Pump(absl::Duration wait);

  Config config_;
  int port_ = 0;
  std::string work_dir_;
  std::string token_;
  ProcessGroup group_{"test", ProcessGroup::Options{.take_signals = false}};
  ProcessGroup::Hooks hooks_;
  std::map<std::string, std::vector<std::string>> lines_;  // By label.
};

// Paths of the built binaries.
std::string BinPath(const std::string& name);

// One run of a launcher (cohort-run, cohort-launch), its output read line by line (and echoed to
// the test log).
struct LauncherRun {
  Subprocess process;
  std::vector<std::string> lines;
  LineReader output;
  bool open = true;

  // Reads output until a line contains `text` (or the output ends / the deadline passes).
  bool ReadUntil(const std::string& text, absl::Duration timeout);
  // Reads the rest of the output (up to 60 s) and returns the launcher's wait status.
  int Finish();
  bool Has(const std::string& text) const;
  // The first line containing `text`, or "".
  std::string Find(const std::string& text) const;
};

// Starts cohort-run with `args`, adding `env` to this process's environment.
LauncherRun Launch(std::vector<std::string> args, std::map<std::string, std::string> env = {});
// Starts the program `argv` (argv[0] a path), adding `env` to this process's environment.
LauncherRun StartLauncher(std::vector<std::string> argv,
                          std::map<std::string, std::string> env = {});

}  // namespace cohort::testing
