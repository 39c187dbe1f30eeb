// cohort-run: starts N copies of a program on this machine, each with its own cohort-sidecar
// (rank 0's hosting the coordination service), like torchrun or mpirun for development.
//
//   cohort-run -n 4 -- ./build/bin/demo-trainer --steps 50
//
// Output lines are prefixed with the rank. When any rank fails, the others follow (fate
// sharing) and cohort-run stops everything and exits with the failed rank's code. SIGINT or
// SIGTERM is forwarded to every rank as a preemption notice; a second one stops everything.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/env.h"
#include "common/exit_codes.h"
#include "common/job_settings.h"
#include "common/subprocess.h"
#include "common/token.h"

namespace cohort {
namespace {

struct Flags {
  int num_processes = 0;
  int coordinator_port = 0;
  std::string job_name = "local";
  std::string work_dir;
  std::string sidecar;
  // Unset: from the environment (COHORT_*_TIMEOUT), else the defaults of common/job_settings.h.
  TimeoutFlags timeouts;
  std::string grace_period = "10s";
  bool verbose = false;
  bool standalone = false;
  std::vector<std::string> command;
};

struct Child {
  std::string label;  // "rank 3" or "sidecar 3"
  int rank = 0;
  bool trainer = true;
  Subprocess process;
  std::string buffer;
  bool output_open = true;
  bool killed = false;
};

std::string FindSidecar(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    std::filesystem::path beside = self.parent_path() / "cohort-sidecar";
    if (std::filesystem::exists(beside)) return beside.string();
  }
  return "cohort-sidecar";  // From PATH.
}

void Print(const std::string& line) {
  std::string out = line + "\n";
  fwrite(out.data(), 1, out.size(), stdout);
  fflush(stdout);
}

int Run(int argc, char** argv) {
  Flags f;
  CLI::App app{"cohort-run: run N processes of a program, each with its cohort-sidecar, on "
               "this machine"};
  app.add_option("-n,--num-processes", f.num_processes, "Number of processes")->required();
  app.add_option("--port", f.coordinator_port, "Coordinator port (default: a free one)");
  app.add_option("--job-name", f.job_name, "COHORT_JOB_NAME of the processes")->capture_default_str();
  app.add_option("--work-dir", f.work_dir,
                 "Where sockets and the job token go (default: a fresh temporary directory)");
  app.add_option("--sidecar", f.sidecar, "cohort-sidecar binary (default: beside cohort-run)");
  app.add_option("--heartbeat-timeout", f.timeouts.heartbeat,
                 absl::StrCat("A rank silent this long has failed (env COHORT_HEARTBEAT_TIMEOUT, "
                              "default ", absl::FormatDuration(kDefaultHeartbeatTimeout), ")"));
  app.add_option("--initialization-timeout", f.timeouts.initialization,
                 absl::StrCat("How long ranks may take to join (env "
                              "COHORT_INITIALIZATION_TIMEOUT, default ",
                              absl::FormatDuration(kDefaultInitializationTimeout), ")"));
  app.add_option("--shutdown-timeout", f.timeouts.shutdown,
                 absl::StrCat("Bound on the shutdown barrier (env COHORT_SHUTDOWN_TIMEOUT, "
                              "default ", absl::FormatDuration(kDefaultShutdownTimeout), ")"));
  app.add_option("--grace-period", f.grace_period,
                 "After a failure, how long survivors get to exit before SIGKILL")
      ->capture_default_str();
  app.add_flag("-v,--verbose", f.verbose, "Show the sidecars' informational logs too");
  app.add_flag("--standalone", f.standalone,
               "No sidecars: libdist runs the agent in-process and process 0 hosts the service");
  app.add_option("command", f.command, "Program and its arguments (after --)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (f.num_processes < 1) {
    std::cerr << "cohort-run: -n must be at least 1\n";
    return 2;
  }
  absl::StatusOr<absl::Duration> grace = env::ParseDuration(f.grace_period);
  if (!grace.ok()) {
    std::cerr << "cohort-run: --grace-period: " << grace.status().message() << "\n";
    return 2;
  }
  JobSettingsOverrides given;
  if (absl::Status s = ParseTimeoutFlags(f.timeouts, &given); !s.ok()) {
    std::cerr << "cohort-run: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<JobTimeouts> timeouts = ResolveJobTimeouts(given);
  if (!timeouts.ok()) {
    std::cerr << "cohort-run: " << timeouts.status().message() << "\n";
    return 2;
  }
  if (f.coordinator_port == 0) {
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) {
      std::cerr << "cohort-run: " << port.status().message() << "\n";
      return 1;
    }
    f.coordinator_port = *port;
  }
  bool own_work_dir = f.work_dir.empty();
  if (own_work_dir) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cohort-run-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::cerr << "cohort-run: cannot create a work directory under "
                << std::filesystem::temp_directory_path() << "\n";
      return 1;
    }
    f.work_dir = tmpl;
  }
  std::filesystem::create_directories(f.work_dir);
  std::string token_file = (std::filesystem::path(f.work_dir) / "token").string();
  {
    std::ofstream(token_file) << GenerateToken() << "\n";
    chmod(token_file.c_str(), 0600);
  }
  absl::StatusOr<int> jax_port = PickFreePort();

  // Signals arrive on a signalfd polled with the children's output.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  std::string coordinator = absl::StrCat("127.0.0.1:", f.coordinator_port);
  std::vector<Child> children;
  auto start = [&](Child child, Subprocess::Options options) -> bool {
    absl::StatusOr<Subprocess> p = Subprocess::Start(options);
    if (!p.ok()) {
      std::cerr << "cohort-run: " << child.label << ": " << p.status().message() << "\n";
      return false;
    }
    child.process = std::move(*p);
    fcntl(child.process.output_fd(), F_SETFL, O_NONBLOCK);
    children.push_back(std::move(child));
    return true;
  };
  std::string sidecar = FindSidecar(f.sidecar);
  bool started = true;
  for (int rank = 0; rank < f.num_processes && started; ++rank) {
    std::filesystem::path rank_dir = std::filesystem::path(f.work_dir) / absl::StrCat("rank-", rank);
    std::filesystem::create_directories(rank_dir);
    std::map<std::string, std::string> env = {
        {env::kCoordinatorAddress, coordinator},
        {env::kNumProcesses, absl::StrCat(f.num_processes)},
        {env::kProcessId, absl::StrCat(rank)},
        {env::kRestartAttempt, "0"},
        {env::kJobName, f.job_name},
        {env::kNamespace, "local"},
        {env::kPodIp, "127.0.0.1"},
        {env::kTokenFile, token_file},
        {env::kHeartbeatTimeout, absl::FormatDuration(timeouts->heartbeat)},
        {env::kInitializationTimeout, absl::FormatDuration(timeouts->initialization)},
        {env::kShutdownTimeout, absl::FormatDuration(timeouts->shutdown)},
        {"JAX_COORDINATOR_ADDRESS", absl::StrCat("127.0.0.1:", jax_port.ok() ? *jax_port : 0)},
        {"JAX_NUM_PROCESSES", absl::StrCat(f.num_processes)},
        {"JAX_PROCESS_ID", absl::StrCat(rank)},
    };
    if (f.standalone) {
      env[env::kMode] = "standalone";
    } else {
      env[env::kAgentSocket] = (rank_dir / "agent.sock").string();
      std::map<std::string, std::string> sidecar_env = env;
      if (!f.verbose && !env::Get("COHORT_LOG_LEVEL")) sidecar_env["COHORT_LOG_LEVEL"] = "warning";
      started = start(Child{absl::StrCat("sidecar ", rank), rank, false, {}, {}, true, false},
                      Subprocess::Options{{sidecar, "--http-port", "0", "--http-port-file",
                                           (rank_dir / "http-port").string()},
                                          sidecar_env});
      if (!started) break;
    }
    started = start(Child{absl::StrCat("rank ", rank), rank, true, {}, {}, true, false},
                    Subprocess::Options{f.command, env});
  }
  Print(absl::StrCat("cohort-run: started ", f.num_processes, " processes (coordinator ",
                     coordinator, f.standalone ? ", standalone" : ", one sidecar each",
                     "); work dir ", f.work_dir));

  std::optional<std::pair<int, int>> first_failure;  // (rank, wait status)
  int trainers_left = f.num_processes;
  int signals_seen = 0;
  std::optional<absl::Time> kill_at;
  std::map<int, int> trainer_status;
  bool sidecars_told = false;
  if (!started) kill_at = absl::Now();

  while (true) {
    // Reap.
    for (Child& c : children) {
      if (!c.process.running()) continue;
      std::optional<int> st = c.process.Poll();
      if (!st) continue;
      if (c.trainer) {
        --trainers_left;
        trainer_status[c.rank] = *st;
        int code = Subprocess::ExitCodeOf(*st);
        if (code != 0) {
          Print(absl::StrCat("cohort-run: rank ", c.rank, " ",
                             Subprocess::DescribeStatus(*st)));
          if (!first_failure && code != kPeerFailureExitCode) first_failure = {c.rank, *st};
          if (!kill_at) kill_at = absl::Now() + *grace;
        }
      }
    }
    // Every rank finished: sidecars whose trainer shut down exit by themselves (rank 0 once
    // every rank is done); SIGTERM stops the others (e.g. under a program without libdist).
    if (trainers_left == 0 && !sidecars_told) {
      sidecars_told = true;
      for (Child& c : children) {
        if (!c.trainer && c.process.running()) c.process.Signal(SIGTERM);
      }
      if (!kill_at) kill_at = absl::Now() + *grace;
    }
    bool any_running = false;
    for (const Child& c : children) any_running |= c.process.running();
    bool outputs_open = false;
    for (const Child& c : children) outputs_open |= c.output_open;
    if (!any_running && !outputs_open) break;
    if (kill_at && absl::Now() >= *kill_at) {
      for (Child& c : children) {
        if (c.process.running() && !c.killed) {
          c.killed = true;
          Print(absl::StrCat("cohort-run: stopping ", c.label, " (SIGKILL)"));
          c.process.Signal(SIGKILL);
        }
      }
    }

    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    fds.push_back(pollfd{sig_fd, POLLIN, 0});
    owners.push_back(nullptr);
    for (Child& c : children) {
      if (c.output_open) {
        fds.push_back(pollfd{c.process.output_fd(), POLLIN, 0});
        owners.push_back(&c);
      }
    }
    int timeout_ms = 200;
    poll(fds.data(), fds.size(), timeout_ms);
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(sig_fd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGCHLD) continue;
        ++signals_seen;
        if (signals_seen == 1) {
          Print(absl::StrCat("cohort-run: ", strsignal(info.ssi_signo),
                             ": forwarding SIGTERM to every rank as a preemption notice "
                             "(send again to stop everything)"));
          for (Child& c : children) {
            if (c.trainer && c.process.running()) c.process.Signal(SIGTERM);
          }
        } else {
          Print("cohort-run: stopping everything");
          kill_at = absl::Now();
        }
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child* c = owners[i];
      std::vector<std::string> lines;
      bool open = ReadLines(c->process.output_fd(), &c->buffer, &lines);
      for (const std::string& line : lines) Print(absl::StrCat("[", c->label, "] ", line));
      if (!open) {
        c->output_open = false;
        c->process.CloseOutput();
      }
    }
  }

  int exit_code = 0;
  if (first_failure) {
    exit_code = Subprocess::ExitCodeOf(first_failure->second);
    Print(absl::StrCat("cohort-run: FAILED: rank ", first_failure->first, " ",
                       Subprocess::DescribeStatus(first_failure->second),
                       "; the other ranks were stopped"));
  } else {
    for (const auto& [rank, st] : trainer_status) {
      if (Subprocess::ExitCodeOf(st) != 0) exit_code = Subprocess::ExitCodeOf(st);
    }
    if (static_cast<int>(trainer_status.size()) != f.num_processes) exit_code = 1;
    Print(exit_code == 0 ? absl::StrCat("cohort-run: all ", f.num_processes,
                                        " processes finished successfully")
                         : absl::StrCat("cohort-run: FAILED with exit code ", exit_code));
  }
  if (own_work_dir) {
    std::error_code ec;
    std::filesystem::remove_all(f.work_dir, ec);
  }
  return exit_code;
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) { return cohort::Run(argc, argv); }
