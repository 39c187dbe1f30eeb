// cohort-run: starts N copies of a program on this machine, each with a cohort-sidecar (rank 0's
// hosting the coordination service), like torchrun or mpirun for development.
//
//   cohort-run -n 4 -- ./build/bin/demo-trainer --steps 50
//   cohort-run -n 4 --processes-per-pod 2 -- ./build/bin/demo-trainer   # a cluster's shape
//
// Output lines are prefixed with the rank. With --processes-per-pod K, the ranks form N/K "pods"
// of K processes that share one sidecar and get the environment the operator and cohort-launch
// give the processes of a pod; without it, every rank has a sidecar of its own and the N
// processes are the local processes of one machine (LOCAL_RANK = rank), as under torchrun.
// When any process of the job dies (a trainer or a sidecar, at any moment), every rank is told
// and follows (fate sharing): cohort-run reports a death the service cannot see itself (a rank
// that never registered), stops what cannot be told (a trainer whose sidecar is gone), and
// exits with the status of the process that caused it, naming it. Its children die with it
// (PR_SET_PDEATHSIG). SIGINT or SIGTERM is forwarded to every rank as a preemption notice; a
// second one stops everything. docs/faults.md has the rules.

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
#include "common/process/process_group.h"
#include "common/process/subprocess.h"
#include "common/timeout_flags.h"
#include "common/token.h"
#include "coordination/client/grpc_coordination_stub.h"
#include "coordination/wire/proto_convert.h"
#include "launcher/cpu_binding.h"

namespace cohort {
namespace {

// How long a process whose partner (a rank's trainer or sidecar) is gone gets to exit by itself
// before cohort-run stops it; also how long ranks get to notice a dead coordination service
// themselves before their sidecars are stopped.
constexpr absl::Duration kOrphanGrace = absl::Milliseconds(500);

struct Flags {
  int num_processes = 0;
  int processes_per_pod = 0;  // 0: not given (a sidecar per rank, one machine's processes).
  int coordinator_port = 0;
  std::string job_name = "local";
  std::string work_dir;
  std::string sidecar;
  // Unset: from the environment (COHORT_*_TIMEOUT), else the defaults of common/job_settings.h.
  TimeoutFlags timeouts;
  std::string grace_period = "10s";
  bool verbose = false;
  bool standalone = false;
  std::string cpu_bind;            // Empty: COHORT_CPU_BIND, else kDefaultCpuBind.
  CpuBind bind = kDefaultCpuBind;  // Resolved from the two.
  std::vector<std::string> command;
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

using Child = ProcessGroup::Child;

void Print(const std::string& line) { ProcessGroup::Print(line); }

// The flags, checked; nullopt after printing why (with the exit code in `exit_code`).
std::optional<Flags> ParseFlags(int argc, char** argv, int* exit_code) {
  Flags f;
  CLI::App app{
      "cohort-run: run N processes of a program, with their cohort-sidecars, on this "
      "machine"};
  app.add_option("-n,--num-processes", f.num_processes, "Number of processes (ranks)")->required();
  app.add_option("--processes-per-pod", f.processes_per_pod,
                 "Group the ranks K to a sidecar, with the environment the processes of a pod get "
                 "on Kubernetes (spec.processesPerPod); N must be a multiple of K. Default: a "
                 "sidecar per rank, all ranks local processes of this machine");
  app.add_option("--port", f.coordinator_port, "Coordinator port (default: a free one)");
  app.add_option("--job-name", f.job_name, "COHORT_JOB_NAME of the processes")
      ->capture_default_str();
  app.add_option("--work-dir", f.work_dir,
                 "Where sockets and the job token go (default: a fresh temporary directory)");
  app.add_option("--sidecar", f.sidecar, "cohort-sidecar binary (default: beside cohort-run)");
  AddTimeoutFlags(app, &f.timeouts);
  app.add_option("--grace-period", f.grace_period,
                 "After a failure, how long survivors get to exit before SIGKILL")
      ->capture_default_str();
  app.add_option("--cpu-bind", f.cpu_bind,
                 "cores: each rank on its own share of this machine's CPUs (default); none: the "
                 "kernel places them (env COHORT_CPU_BIND)");
  app.add_flag("-v,--verbose", f.verbose, "Show the sidecars' informational logs too");
  app.add_flag("--standalone", f.standalone,
               "No sidecars: libdist runs the agent in-process and process 0 hosts the service");
  app.add_option("command", f.command, "Program and its arguments (after --)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return std::nullopt;
  }
  *exit_code = 2;
  if (f.num_processes < 1) {
    std::cerr << "cohort-run: -n must be at least 1\n";
    return std::nullopt;
  }
  if (f.processes_per_pod < 0 ||
      (f.processes_per_pod > 0 && f.num_processes % f.processes_per_pod != 0)) {
    std::cerr << "cohort-run: --processes-per-pod " << f.processes_per_pod
              << " must be a positive divisor of -n " << f.num_processes
              << " (every pod runs the same number of processes)\n";
    return std::nullopt;
  }
  absl::StatusOr<CpuBind> bind =
      f.cpu_bind.empty() ? CpuBindFromEnvironment(kDefaultCpuBind) : ParseCpuBind(f.cpu_bind);
  if (!bind.ok()) {
    std::cerr << "cohort-run: " << (f.cpu_bind.empty() ? "" : "--cpu-bind: ")
              << bind.status().message() << "\n";
    return std::nullopt;
  }
  f.bind = *bind;
  if (f.processes_per_pod > 0 && f.standalone) {
    std::cerr << "cohort-run: --processes-per-pod groups ranks by sidecar; --standalone has no "
                 "sidecars: use one or the other\n";
    return std::nullopt;
  }
  return f;
}

// One job on this machine: its processes (a ProcessGroup), what cohort-run does when one of them
// ends, and the exit status that reports it.
class LocalJob {
 public:
  LocalJob(Flags flags, absl::Duration grace, JobTimeouts timeouts)
      : f_(std::move(flags)), grace_(grace), timeouts_(timeouts), group_("cohort-run") {}

  // Prepares the work directory and ports, starts everything, supervises until it ended.
  int Run() {
    if (absl::Status s = Prepare(); !s.ok()) {
      std::cerr << "cohort-run: " << s.message() << "\n";
      return 1;
    }
    bool started = StartProcesses();
    reporter_.emplace(coordinator_, token_);
    if (!started) group_.KillAllAt(absl::Now());
    ProcessGroup::Hooks hooks;
    hooks.on_exits = [this](std::vector<Child*>& exited) { OnExits(exited); };
    hooks.on_tick = [this] { OnTick(); };
    hooks.on_signal = [this](int signo) { OnSignal(signo); };
    group_.Run(hooks);
    int code = ExitCode();
    if (own_work_dir_) {
      std::error_code ec;
      std::filesystem::remove_all(f_.work_dir, ec);
    }
    return code;
  }

 private:
  // Ranks per sidecar, and how many sidecars ("pods").
  int PerPod() const { return f_.processes_per_pod > 0 ? f_.processes_per_pod : 1; }
  int Pods() const { return f_.num_processes / PerPod(); }

  absl::Status Prepare() {
    if (f_.coordinator_port == 0) {
      absl::StatusOr<int> port = PickFreePort();
      if (!port.ok()) return port.status();
      f_.coordinator_port = *port;
    }
    own_work_dir_ = f_.work_dir.empty();
    if (own_work_dir_) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "cohort-run-XXXXXX").string();
      if (mkdtemp(tmpl.data()) == nullptr) {
        return absl::InternalError(absl::StrCat("cannot create a work directory under ",
                                                std::filesystem::temp_directory_path().string()));
      }
      f_.work_dir = tmpl;
    }
    std::filesystem::create_directories(f_.work_dir);
    token_file_ = (std::filesystem::path(f_.work_dir) / "token").string();
    token_ = GenerateToken();
    std::ofstream(token_file_) << token_ << "\n";
    chmod(token_file_.c_str(), 0600);
    // Ports picked one after another may repeat: each must differ from those before it.
    auto pick_another = [](std::vector<int> taken) -> int {
      for (int attempt = 0;; ++attempt) {
        absl::StatusOr<int> port = PickFreePort();
        if (!port.ok()) return 0;
        if (attempt == 10 || std::find(taken.begin(), taken.end(), *port) == taken.end()) {
          return *port;
        }
      }
    };
    jax_port_ = pick_another({f_.coordinator_port});
    master_port_ = pick_another({f_.coordinator_port, jax_port_});
    coordinator_ = absl::StrCat("127.0.0.1:", f_.coordinator_port);
    return absl::OkStatus();
  }

  // What every process of the job shares (env::JobVariables). An unmodified JAX program dials
  // rank 0's sidecar, which speaks JAX's protocol there; torch.distributed's env://, as torchrun
  // sets it, finds rank 0's TCPStore on MASTER_PORT.
  std::map<std::string, std::string> JobEnvironment() const {
    env::JobInputs in;
    in.coordinator_address = coordinator_;
    in.job_name = f_.job_name;
    in.namespace_name = "local";
    in.pod_ip = "127.0.0.1";
    in.token_file = token_file_;
    in.heartbeat_timeout = timeouts_.heartbeat;
    in.initialization_timeout = timeouts_.initialization;
    in.shutdown_timeout = timeouts_.shutdown;
    in.rank0_host = "127.0.0.1";
    in.jax_port = jax_port_;
    in.master_port = master_port_;
    std::map<std::string, std::string> vars;
    for (auto& [name, value] : env::JobVariables(in)) vars[name] = std::move(value);
    return vars;
  }

  // Where rank `rank` sits: in a pod of --processes-per-pod, or (without it) among the N local
  // processes of this one machine.
  env::ProcessPlacement PlacementOf(int rank) const {
    if (f_.processes_per_pod > 0) {
      return {.pod_index = rank / PerPod(),
              .local_index = rank % PerPod(),
              .processes_per_pod = PerPod(),
              .num_pods = Pods()};
    }
    return {
        .pod_index = 0, .local_index = rank, .processes_per_pod = f_.num_processes, .num_pods = 1};
  }

  bool StartProcesses() {
    const std::vector<int> cpus = AllowedCpus();
    const std::string sidecar = FindSidecar(f_.sidecar);
    for (int pod = 0; pod < Pods(); ++pod) {
      const int first_rank = pod * PerPod();
      std::filesystem::path pod_dir =
          std::filesystem::path(f_.work_dir) /
          (f_.processes_per_pod > 0 ? absl::StrCat("pod-", pod) : absl::StrCat("rank-", pod));
      std::filesystem::create_directories(pod_dir);
      const std::string socket_base = (pod_dir / "agent.sock").string();
      if (!f_.standalone) {
        // The sidecar serves the pod's ranks, first_rank onwards, each on a socket of its own.
        std::map<std::string, std::string> env = JobEnvironment();
        for (auto& [name, value] : env::ProcessVariables({.pod_index = pod,
                                   .local_index = 0,
                                   .processes_per_pod = PerPod(),
                                   .num_pods = Pods()},
                                                         false)) {
          env[name] = value;
        }
        env[env::kAgentSocket] = socket_base;
        env[env::kPodName] = absl::StrCat(f_.job_name, "-", pod);
        if (!f_.verbose && !env::Get(env::kLogLevel)) env[env::kLogLevel] = "warning";
        Child c;
        c.label = absl::StrCat("sidecar ", pod);
        c.rank = first_rank;
        c.pod = pod;
        c.trainer = false;
        if (!group_.Start(
                std::move(c),
                Subprocess::Options{{sidecar, "--http-port", "0", "--http-port-file",
                                     (pod_dir / "http-port").string(), "--preempt-before-attach"},
                                    env})) {
          return false;
        }
      }
      for (int local = 0; local < PerPod(); ++local) {
        const int rank = first_rank + local;
        std::map<std::string, std::string> env = JobEnvironment();
        for (auto& [name, value] : env::ProcessVariables(PlacementOf(rank), false)) {
          env[name] = value;
        }
        if (f_.standalone) {
          env[env::kMode] = "standalone";
        } else {
          env[env::kAgentSocket] = env::AgentSocketPath(socket_base, local, PerPod());
        }
        Child c;
        c.label = absl::StrCat("rank ", rank);
        c.rank = rank;
        c.pod = pod;
        Subprocess::Options options{f_.command, env};
        // Every rank of this job runs on this machine: rank r gets share r of its CPUs.
        if (f_.bind == CpuBind::kCores) options.cpus = CpuShare(cpus, rank, f_.num_processes);
        if (!group_.Start(std::move(c), options)) return false;
      }
    }
    Print(absl::StrCat(
        "cohort-run: started ", f_.num_processes, " processes (coordinator ", coordinator_,
        f_.standalone ? ", standalone"
        : f_.processes_per_pod > 0
            ? absl::StrCat(", ", Pods(), " pods of ", PerPod(), " with a sidecar each")
            : ", one sidecar each",
        "); work dir ", f_.work_dir));
    return true;
  }

  // The trainers of a sidecar's pod (rank 0's sidecar: of every pod, since it hosts the service).
  std::vector<const Child*> TrainersServedBy(const Child& sidecar) {
    std::vector<const Child*> out;
    for (const Child& t : group_.children()) {
      if (t.trainer && (t.pod == sidecar.pod || sidecar.pod == 0)) out.push_back(&t);
    }
    return out;
  }

  // Fate sharing of cohort-run's own: what it sees die, it tells the job (see ServiceReporter).
  void Fail(const Child& c, int status, const std::string& what) {
    if (!first_failure_) first_failure_ = {c.label, status};
    group_.KillAllAt(absl::Now() + grace_);
    // The process hosting the service (rank 0's sidecar; in standalone mode rank 0 itself) took
    // it along: nobody is left to tell. Ranks that reached it notice by themselves; in standalone
    // mode no sidecar can be stopped for the others, so they get the orphans' grace.
    const bool hosted_service = c.rank == 0 && c.trainer == f_.standalone;
    if (!hosted_service) {
      // A sidecar's death is the death of every rank it served.
      const int ranks = c.trainer ? 1 : PerPod();
      for (int r = c.rank; r < c.rank + ranks; ++r) reporter_->ReportDeath(r, what);
    } else if (f_.standalone) {
      group_.KillAllAt(absl::Now() + kOrphanGrace);
    }
  }

  void OnExits(std::vector<Child*>& exited) {
    // The cause first, in common/exit_codes.h's order (RootCause's): a process killed by someone
    // else, a trainer's own error, a preempted exit 76, then the rest. A sidecar's own exit code
    // ranks with a follower's: it exits after its trainers or the job failed.
    auto kind = [](const Child* c) {
      const ExitKind k = ClassifyExit(c->Exit());
      if (c->trainer || k == ExitKind::kKilled || k >= ExitKind::kStopped) return k;
      return ExitKind::kFollowed;
    };
    std::stable_sort(exited.begin(), exited.end(),
                     [&](const Child* a, const Child* b) { return kind(a) < kind(b); });
    for (Child* c : exited) {
      int st = c->Status();  // A rank the forwarded preemption notice ended reads as preempted.
      int code = Subprocess::ExitCodeOf(st);
      std::string what =
          absl::StrCat(c->label, " ", Subprocess::DescribeStatus(st),
                       c->EndedByTheNotice() ? " (the preemption notice, SIGTERM, ended it before "
                                               "its program could take it)"
                                             : "");
      if (c->trainer) {
        trainer_status_[c->rank] = st;
        if (code == 0) continue;
        Print(absl::StrCat("cohort-run: ", what));
        if (ClassifyExit(ProcessExit::FromWaitStatus(st, /*stopped=*/false)) ==
            ExitKind::kFollowed) {
          group_.KillAllAt(absl::Now() + grace_);
        } else {
          Fail(*c, st, what);
        }
        continue;
      }
      // A sidecar. Its exit matters unless its trainers finished successfully (rank 0's: unless
      // every trainer did), or cohort-run stopped it. A trainer that exited 75 may have done so
      // because of this very death: a process's connections close a moment before it can be
      // reaped.
      bool needed = false;
      for (const Child* t : TrainersServedBy(*c)) {
        needed |= t->process.running() || *t->process.status() != 0;
      }
      if (!needed || c->killed || c->stopped_by_us) continue;
      if (code == 0 && !WIFSIGNALED(st)) continue;  // Exited after its trainers shut down.
      // Exit code 1 follows a failure of its trainer or of the job, which is the cause (its
      // trainer may die a moment before it can be reaped); a signal or a bad configuration is
      // the sidecar's own.
      bool own = WIFSIGNALED(st) || code != 1;
      if (own && !first_failure_) {
        Print(absl::StrCat("cohort-run: ", what));
        Fail(*c, st, what);
      } else {
        group_.KillAllAt(absl::Now() + grace_);
      }
      if (c->pod == 0) {
        // The ranks that reached the service see its connections refused and stop; a rank that
        // never reached it cannot tell a dead service from a late one, so its sidecar is stopped.
        if (!stop_sidecars_at_) stop_sidecars_at_ = absl::Now() + kOrphanGrace;
      }
    }
  }

  void OnTick() {
    if (stop_sidecars_at_ && absl::Now() >= *stop_sidecars_at_) {
      stop_sidecars_at_.reset();
      for (Child& c : group_.children()) {
        if (!c.trainer && c.process.running() && !c.stopped_by_us) {
          c.stopped_by_us = true;
          c.process.Signal(SIGINT);
        }
      }
    }
    const absl::Time now = absl::Now();
    auto gone_long_enough = [&](const Child& c) {
      return c.exited_at && now >= *c.exited_at + kOrphanGrace;
    };
    for (Child& c : group_.children()) {
      if (!c.process.running() || c.killed) continue;
      if (c.trainer) {
        const Child* sidecar = group_.Find(/*trainer=*/false, c.pod * PerPod());
        // A sidecar exits cleanly only after its trainers shut down, which may go on working.
        if (sidecar == nullptr || !gone_long_enough(*sidecar) || *sidecar->process.status() == 0) {
          continue;
        }
        // Its sidecar is gone: an attached trainer was told and exits by itself; one that was
        // still waiting to attach never will be.
        c.killed = true;
        Print(absl::StrCat("cohort-run: stopping ", c.label, " (SIGKILL): its sidecar is gone"));
        c.process.Signal(SIGKILL);
      } else if (!c.stopped_by_us) {
        // Its trainers are gone: a sidecar that saw them attach exits by itself; one that never
        // did (a program without libdist, or one that died first) is stopped. SIGINT, never
        // SIGTERM: that would be a preemption notice.
        bool all_gone = true;
        for (const Child& t : group_.children()) {
          if (t.trainer && t.pod == c.pod) all_gone &= gone_long_enough(t);
        }
        if (!all_gone) continue;
        c.stopped_by_us = true;
        c.process.Signal(SIGINT);
      }
    }
  }

  void OnSignal(int signo) {
    if (++signals_seen_ == 1) {
      Print(absl::StrCat("cohort-run: ", strsignal(signo),
                         ": forwarding SIGTERM to every rank as a preemption notice "
                         "(send again to stop everything)"));
      for (Child& c : group_.children()) {
        if (!c.trainer || !c.process.running()) continue;
        c.noticed = true;
        c.process.Signal(SIGTERM);
      }
    } else {
      Print("cohort-run: stopping everything");
      group_.KillAllAt(absl::Now());
    }
  }

  int ExitCode() {
    int exit_code = 0;
    if (first_failure_) {
      exit_code = Subprocess::ExitCodeOf(first_failure_->second);
      if (exit_code == 0) exit_code = 1;  // E.g. a sidecar stopped while its rank ran.
      const bool preempted = exit_code == kPreemptedExitCode;
      Print(absl::StrCat(
          "cohort-run: ", preempted ? "PREEMPTED: " : "FAILED: ", first_failure_->first, " ",
          Subprocess::DescribeStatus(first_failure_->second),
          preempted ? " (a preemption, not a failure)" : "", "; the other ranks were stopped"));
      return exit_code;
    }
    for (const auto& [rank, st] : trainer_status_) {
      if (Subprocess::ExitCodeOf(st) != 0) exit_code = Subprocess::ExitCodeOf(st);
    }
    if (static_cast<int>(trainer_status_.size()) != f_.num_processes) exit_code = 1;
    Print(exit_code == 0 ? absl::StrCat("cohort-run: all ", f_.num_processes,
                                        " processes finished successfully")
                         : absl::StrCat("cohort-run: FAILED with exit code ", exit_code));
    return exit_code;
  }

  Flags f_;
  const absl::Duration grace_;
  const JobTimeouts timeouts_;
  ProcessGroup group_;
  bool own_work_dir_ = false;
  std::string coordinator_;
  std::string token_;
  std::string token_file_;
  int jax_port_ = 0;
  int master_port_ = 0;
  std::optional<ServiceReporter> reporter_;
  std::optional<std::pair<std::string, int>> first_failure_;  // (who, wait status)
  int signals_seen_ = 0;
  std::map<int, int> trainer_status_;
  std::optional<absl::Time> stop_sidecars_at_;  // After the service died.
};

int Run(int argc, char** argv) {
  int exit_code = 0;
  std::optional<Flags> f = ParseFlags(argc, argv, &exit_code);
  if (!f) return exit_code;
  absl::StatusOr<absl::Duration> grace = env::ParseDuration(f->grace_period);
  if (!grace.ok()) {
    std::cerr << "cohort-run: --grace-period: " << grace.status().message() << "\n";
    return 2;
  }
  JobSettingsOverrides given;
  if (absl::Status s = ParseTimeoutFlags(f->timeouts, &given); !s.ok()) {
    std::cerr << "cohort-run: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<JobTimeouts> timeouts = ResolveJobTimeouts(given);
  if (!timeouts.ok()) {
    std::cerr << "cohort-run: " << timeouts.status().message() << "\n";
    return 2;
  }
  return LocalJob(std::move(*f), *grace, *timeouts).Run();
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
