// cohort-run: starts N copies of a program on this machine, each with its own cohort-sidecar
// (rank 0's hosting the coordination service), like torchrun or mpirun for development.
//
//   cohort-run -n 4 -- ./build/bin/demo-trainer --steps 50
//
// Output lines are prefixed with the rank. When any process of the job dies (a trainer or a
// sidecar, at any moment), every rank is told and follows (fate sharing): cohort-run reports a
// death the service cannot see itself (a rank that never registered), stops what cannot be told
// (a trainer whose sidecar is gone), and exits with the status of the process that caused it,
// naming it. Its children die with it (PR_SET_PDEATHSIG). SIGINT or SIGTERM is forwarded to
// every rank as a preemption notice; a second one stops everything. docs/faults.md has the rules.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include "coordination/client/grpc_coordination_stub.h"
#include "coordination/wire/proto_convert.h"

namespace cohort {
namespace {

// How long a process whose partner (a rank's trainer or sidecar) is gone gets to exit by itself
// before cohort-run stops it; also how long ranks get to notice a dead coordination service
// themselves before their sidecars are stopped.
constexpr absl::Duration kOrphanGrace = absl::Milliseconds(500);

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
  bool killed = false;        // SIGKILLed by cohort-run.
  bool stopped_by_us = false;  // Sent SIGINT/SIGTERM by cohort-run to make it exit.
  std::optional<absl::Time> exited_at;
};

// Tells the coordination service that a rank's process died, so that every other rank is told
// at once (and stops waiting in initialize(), a barrier or a key-value get). It matters for a
// rank that never registered, whose death nobody else sees; for a registered one the service
// already knows (its sidecar reported it, or its connection closed) and ignores the report.
class ServiceReporter {
 public:
  ServiceReporter(const std::string& coordinator, const std::string& token)
      : stub_(coordinator, token) {}
  void ReportDeath(int rank, const std::string& what) {
    auto request = std::make_shared<coordination::pb::ReportErrorRequest>();
    request->set_task_id(rank);
    // An observer's report: it holds whether or not the rank registered.
    request->set_incarnation(coordination::kObserverIncarnation);
    request->set_cause(coordination::ToProto(coordination::FailureCause::kProcessExited));
    request->set_message(absl::StrCat(what, " (seen by cohort-run)"));
    auto response = std::make_shared<coordination::pb::ReportErrorResponse>();
    stub_.ReportError(*request, response.get(), kReportTimeout,
                      [request, response](absl::Status) {});
  }

 private:
  static constexpr absl::Duration kReportTimeout = absl::Seconds(2);
  coordination::GrpcCoordinationStub stub_;
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
  const std::string token = GenerateToken();
  {
    std::ofstream(token_file) << token << "\n";
    chmod(token_file.c_str(), 0600);
  }
  // Ports picked one after another may repeat: each must differ from those before it.
  auto pick_another = [](std::vector<int> taken) -> absl::StatusOr<int> {
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<int> port = PickFreePort();
      if (!port.ok() || attempt == 10 ||
          std::find(taken.begin(), taken.end(), *port) == taken.end()) {
        return port;
      }
    }
  };
  absl::StatusOr<int> jax_port = pick_another({f.coordinator_port});
  absl::StatusOr<int> master_port =
      pick_another({f.coordinator_port, jax_port.ok() ? *jax_port : 0});

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
    options.die_with_parent = true;  // Nothing outlives cohort-run, even a kill -9 of it.
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
        // An unmodified JAX program dials rank 0's sidecar, which speaks JAX's protocol there;
        // JAX's process 0 still starts a service of its own, on a loopback port nobody dials.
        {"JAX_COORDINATOR_ADDRESS", absl::StrCat("127.0.0.1:", jax_port.ok() ? *jax_port : 0)},
        {"JAX_COORDINATOR_BIND_ADDRESS", "127.0.0.1:0"},
        {"JAX_NUM_PROCESSES", absl::StrCat(f.num_processes)},
        {"JAX_PROCESS_ID", absl::StrCat(rank)},
        // torch.distributed's env:// as torchrun sets it on one node: rank 0's process hosts
        // the TCPStore on MASTER_PORT.
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", absl::StrCat(master_port.ok() ? *master_port : 0)},
        {"WORLD_SIZE", absl::StrCat(f.num_processes)},
        {"RANK", absl::StrCat(rank)},
        {"LOCAL_RANK", absl::StrCat(rank)},
        {"LOCAL_WORLD_SIZE", absl::StrCat(f.num_processes)},
        {"GROUP_RANK", "0"},
        {"NODE_RANK", "0"},
    };
    if (f.standalone) {
      env[env::kMode] = "standalone";
    } else {
      env[env::kAgentSocket] = (rank_dir / "agent.sock").string();
      std::map<std::string, std::string> sidecar_env = env;
      if (!f.verbose && !env::Get("COHORT_LOG_LEVEL")) sidecar_env["COHORT_LOG_LEVEL"] = "warning";
      Child c;
      c.label = absl::StrCat("sidecar ", rank);
      c.rank = rank;
      c.trainer = false;
      started = start(std::move(c), Subprocess::Options{{sidecar, "--http-port", "0",
                                                         "--http-port-file",
                                                         (rank_dir / "http-port").string(),
                                                         "--preempt-before-attach"},
                                                        sidecar_env});
      if (!started) break;
    }
    Child c;
    c.label = absl::StrCat("rank ", rank);
    c.rank = rank;
    started = start(std::move(c), Subprocess::Options{f.command, env});
  }
  Print(absl::StrCat("cohort-run: started ", f.num_processes, " processes (coordinator ",
                     coordinator, f.standalone ? ", standalone" : ", one sidecar each",
                     "); work dir ", f.work_dir));

  auto find = [&](bool trainer, int rank) -> Child* {
    for (Child& c : children) {
      if (c.trainer == trainer && c.rank == rank) return &c;
    }
    return nullptr;
  };
  // Fate sharing of cohort-run's own: what it sees die, it tells the job (see ServiceReporter).
  ServiceReporter reporter(coordinator, token);
  std::optional<std::pair<std::string, int>> first_failure;  // (who, wait status)
  int signals_seen = 0;
  std::optional<absl::Time> kill_at;
  std::map<int, int> trainer_status;
  std::optional<absl::Time> stop_sidecars_at;  // After the service died.
  if (!started) kill_at = absl::Now();
  auto fail = [&](const Child& c, int status, const std::string& what) {
    if (!first_failure) first_failure = {c.label, status};
    if (!kill_at) kill_at = absl::Now() + *grace;
    // The process hosting the service (rank 0's sidecar; in standalone mode rank 0 itself) took
    // it along: nobody is left to tell. Ranks that reached it notice by themselves; in standalone
    // mode no sidecar can be stopped for the others, so they get the orphans' grace.
    const bool hosted_service = c.rank == 0 && c.trainer == f.standalone;
    if (!hosted_service) {
      reporter.ReportDeath(c.rank, what);
    } else if (f.standalone && *kill_at > absl::Now() + kOrphanGrace) {
      kill_at = absl::Now() + kOrphanGrace;
    }
  };

  while (true) {
    // Reap everything that exited, then judge: a batch may hold a death and the exits it caused.
    std::vector<Child*> exited;
    for (Child& c : children) {
      if (!c.process.running()) continue;
      if (!c.process.Poll()) continue;
      c.exited_at = absl::Now();
      exited.push_back(&c);
    }
    // The cause first: a process killed by someone else, then a trainer's own error, then the
    // rest (a follower's exit 75, a sidecar that exited after its trainer).
    auto rank_of = [](const Child* c) {
      int st = *c->process.status();
      if (WIFSIGNALED(st) && !c->killed && !c->stopped_by_us) return 0;
      int code = Subprocess::ExitCodeOf(st);
      if (c->trainer && code != 0 && code != kPeerFailureExitCode) return 1;
      return 2;
    };
    std::stable_sort(exited.begin(), exited.end(),
                     [&](const Child* a, const Child* b) { return rank_of(a) < rank_of(b); });
    for (Child* c : exited) {
      int st = *c->process.status();
      int code = Subprocess::ExitCodeOf(st);
      std::string what = absl::StrCat(c->label, " ", Subprocess::DescribeStatus(st));
      if (c->trainer) {
        trainer_status[c->rank] = st;
        if (code == 0) continue;
        Print(absl::StrCat("cohort-run: ", what));
        if (code == kPeerFailureExitCode) {
          if (!kill_at) kill_at = absl::Now() + *grace;
        } else {
          fail(*c, st, what);
        }
        continue;
      }
      // A sidecar. Its exit matters unless its trainer finished successfully (rank 0's: unless
      // every trainer did), or cohort-run stopped it. A trainer that exited 75 may have done
      // so because of this very death: a process's connections close a moment before it can
      // be reaped.
      auto unfinished = [&](const Child* t) {
        return t != nullptr && (t->process.running() || *t->process.status() != 0);
      };
      bool needed = false;
      for (const Child& t : children) {
        if (t.trainer && (t.rank == c->rank || c->rank == 0)) needed |= unfinished(&t);
      }
      if (!needed || c->killed || c->stopped_by_us) continue;
      if (code == 0 && !WIFSIGNALED(st)) continue;  // Exited after its trainer shut down.
      // Exit code 1 follows a failure of its trainer or of the job, which is the cause (its
      // trainer may die a moment before it can be reaped); a signal or a bad configuration is
      // the sidecar's own.
      bool own = WIFSIGNALED(st) || code != 1;
      if (own && !first_failure) {
        Print(absl::StrCat("cohort-run: ", what));
        fail(*c, st, what);
      } else if (!kill_at) {
        kill_at = absl::Now() + *grace;
      }
      if (c->rank == 0) {
        // The ranks that reached the service see its connections refused and stop; a rank that
        // never reached it cannot tell a dead service from a late one, so its sidecar is stopped.
        if (!stop_sidecars_at) stop_sidecars_at = absl::Now() + kOrphanGrace;
      }
    }
    if (stop_sidecars_at && absl::Now() >= *stop_sidecars_at) {
      stop_sidecars_at.reset();
      for (Child& c : children) {
        if (!c.trainer && c.process.running() && !c.stopped_by_us) {
          c.stopped_by_us = true;
          c.process.Signal(SIGINT);
        }
      }
    }
    for (Child& c : children) {
      if (!c.process.running() || c.killed) continue;
      Child* partner = find(!c.trainer, c.rank);
      if (partner == nullptr || !partner->exited_at ||
          absl::Now() < *partner->exited_at + kOrphanGrace) {
        continue;
      }
      if (c.trainer) {
        // A sidecar exits cleanly only after its trainer shut down, which may go on working.
        if (*partner->process.status() == 0) continue;
        // Its sidecar is gone: an attached trainer was told and exits by itself; one that was
        // still waiting to attach never will be.
        c.killed = true;
        Print(absl::StrCat("cohort-run: stopping ", c.label, " (SIGKILL): its sidecar is gone"));
        c.process.Signal(SIGKILL);
      } else if (!c.stopped_by_us) {
        // Its trainer is gone: a sidecar that saw it attach exits by itself; one that never did
        // (a program without libdist, or one that died first) is stopped. SIGINT, never SIGTERM:
        // that would be a preemption notice.
        c.stopped_by_us = true;
        c.process.Signal(SIGINT);
      }
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
    // Signals (SIGCHLD included) wake the poll; the timeout only paces the timed steps above.
    int timeout_ms = 50;
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
    if (exit_code == 0) exit_code = 1;  // E.g. a sidecar stopped while its rank ran.
    Print(absl::StrCat("cohort-run: FAILED: ", first_failure->first, " ",
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

int main(int argc, char** argv) {
  int code = cohort::Run(argc, argv);
  // Like cohort-sidecar: gRPC's threads (the service reporter's channel) are not torn down by
  // static destructors racing them at exit.
  std::fflush(nullptr);
  _exit(code);
}
