// cohort-sidecar: runs in every job pod. On rank 0's pod it hosts the coordination service; for
// every rank of its pod (spec.processesPerPod of them) it hosts the agent that the rank's libdist
// attaches to over a Unix socket of its own, and it serves /metrics, /healthz and /readyz. Every
// flag falls back to the COHORT_* environment the operator (or cohort-run) sets. See
// docs/sidecar.md.
//
// Exit codes: 0 every trainer shut down cleanly (or the sidecar was stopped before any trainer
// attached); 1 a trainer or the job failed; 2 bad configuration.

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/job_settings.h"
#include "common/log.h"
#include "common/metrics_http_server.h"
#include "common/signals.h"
#include "coordination/client/agent.h"
#include "coordination/server/coordination_server.h"
#include "coordination/server/jax_compat_service.h"
#include "sidecar/agent/agent_rpc_service.h"
#include "sidecar/metrics/sidecar_metrics.h"

namespace cohort {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// --rank and --num-processes not given: they come from the environment.
constexpr int kUnset = -1;

struct Flags {
  int rank = kUnset;           // From COHORT_PROCESS_ID.
  int num_processes = kUnset;  // From COHORT_NUM_PROCESSES.
  int processes_per_pod = kUnset;  // From COHORT_PROCESSES_PER_POD (default 1).
  std::string coordinator_address;
  std::string coordinator_bind_address = "0.0.0.0";
  std::string agent_socket;
  std::string token_file;
  std::string http_address = "0.0.0.0";
  int http_port = 9400;
  std::string http_port_file;
  TimeoutFlags timeouts;
  size_t per_rank_metrics_limit = 4096;
  bool preempt_before_attach = false;
  int jax_port = kUnset;  // From JAX_COORDINATOR_ADDRESS.
  bool no_jax_port = false;
  std::string jax_heartbeat_timeout;
};

int Fail(const std::string& message) {
  LogError(message);
  return kExitUsage;
}

// SIGTERM (a preemption or a pod deletion) and SIGINT are taken by one thread with sigwait, so
// handling them can use locks and RPCs.
struct SignalState {
  absl::Mutex mu;
  int count ABSL_GUARDED_BY(mu) = 0;
};

// One rank served by this sidecar: its agent and the Unix socket its trainer attaches to.
struct RankAgent {
  std::string socket;
  std::unique_ptr<sidecar::AgentRpcService> service;
  std::unique_ptr<grpc::Server> server;
};

// Serves `options.task`'s agent on `socket` (a stale socket of an earlier run is replaced).
// InvalidArgument naming the socket when it cannot be served.
absl::StatusOr<RankAgent> ServeRank(const std::string& socket, coordination::AgentOptions options,
                                    sidecar::SidecarMetrics* metrics) {
  RankAgent a;
  a.socket = socket;
  a.service = std::make_unique<sidecar::AgentRpcService>(std::move(options), metrics);
  std::error_code ec;
  std::filesystem::path socket_path(socket);
  if (socket_path.has_parent_path()) std::filesystem::create_directories(socket_path.parent_path(), ec);
  std::filesystem::remove(socket_path, ec);
  grpc::ServerBuilder builder;
  int unused_port = 0;
  builder.AddListeningPort(absl::StrCat("unix:", socket), grpc::InsecureServerCredentials(),
                           &unused_port);
  builder.RegisterService(a.service.get());
  // libdist pings its attach stream every 10 s, which carries nothing for as long as the program
  // makes no call: without this, the sidecar would end it after ~30 s quiet.
  AllowClientKeepalive(&builder);
  a.server = builder.BuildAndStart();
  if (!a.server) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot serve the agent socket ", socket,
        ": check that its directory exists and is writable"));
  }
  return a;
}

// This pod's name: COHORT_POD_NAME, else the hostname (a pod's hostname is its name).
std::string PodName() {
  if (std::optional<std::string> name = env::Get(env::kPodName)) return *name;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

int Run(int argc, char** argv) {
  InitLogging("cohort-sidecar");
  Flags f;
  CLI::App app{"cohort-sidecar: coordination service (rank 0), agents and metrics for the ranks "
               "of one pod"};
  app.add_option("--rank", f.rank,
                 "The rank of this pod's first process (env COHORT_PROCESS_ID)");
  app.add_option("--processes-per-pod", f.processes_per_pod,
                 "Ranks this sidecar serves, --rank onwards, each on its own socket "
                 "(env COHORT_PROCESSES_PER_POD, default 1)");
  app.add_option("--num-processes", f.num_processes, "Job size (env COHORT_NUM_PROCESSES)");
  app.add_option("--coordinator-address", f.coordinator_address,
                 "host:port of rank 0's coordination service (env COHORT_COORDINATOR_ADDRESS)");
  app.add_option("--coordinator-bind-address", f.coordinator_bind_address,
                 "Rank 0: interface the coordination service listens on; the port comes from "
                 "the coordinator address")
      ->capture_default_str();
  app.add_option("--agent-socket", f.agent_socket,
                 "Unix socket libdist attaches to (env COHORT_AGENT_SOCKET); serving several "
                 "ranks, local process l's is <socket without .sock>-<l>.sock");
  app.add_option("--token-file", f.token_file,
                 "File holding the job token (env COHORT_TOKEN_FILE, or COHORT_TOKEN)");
  app.add_option("--http-address", f.http_address, "Interface of /metrics, /healthz, /readyz")
      ->capture_default_str();
  app.add_option("--http-port", f.http_port, "Port of /metrics, /healthz, /readyz; 0 picks one")
      ->capture_default_str();
  app.add_option("--http-port-file", f.http_port_file, "Write the chosen HTTP port here");
  app.add_option("--initialization-timeout", f.timeouts.initialization,
                 absl::StrCat("How long ranks may take to register (env "
                              "COHORT_INITIALIZATION_TIMEOUT, default ",
                              absl::FormatDuration(kDefaultInitializationTimeout), ")"));
  app.add_option("--heartbeat-timeout", f.timeouts.heartbeat,
                 absl::StrCat("A rank silent this long has failed (env COHORT_HEARTBEAT_TIMEOUT, "
                              "default ", absl::FormatDuration(kDefaultHeartbeatTimeout), ")"));
  app.add_option("--shutdown-timeout", f.timeouts.shutdown,
                 absl::StrCat("Bound on the shutdown barrier, and on how long rank 0 keeps the "
                              "service up for slower ranks (env COHORT_SHUTDOWN_TIMEOUT, default ",
                              absl::FormatDuration(kDefaultShutdownTimeout), ")"));
  app.add_option("--per-rank-metrics-limit", f.per_rank_metrics_limit,
                 "Rank 0 exports per-rank series up to this job size")
      ->capture_default_str();
  app.add_option("--jax-port", f.jax_port,
                 "Rank 0: port that serves XLA's coordination protocol to unmodified "
                 "jax.distributed programs, over the same service (default: the port of "
                 "JAX_COORDINATOR_ADDRESS when it is set; 0 picks one). See docs/jax.md");
  app.add_flag("--no-jax-port", f.no_jax_port, "Rank 0: do not serve JAX's protocol");
  app.add_option("--jax-heartbeat-timeout", f.jax_heartbeat_timeout,
                 absl::StrCat("A JAX process silent this long has failed (JAX heartbeats every "
                              "50 s by default; default ",
                              absl::FormatDuration(coordination::kJaxHeartbeatTimeout), ")"));
  app.add_flag("--preempt-before-attach", f.preempt_before_attach,
               "A SIGTERM that comes before the trainer attached is a preemption notice for the "
               "trainer to come, instead of a reason to exit (cohort-run sets it; under "
               "Kubernetes, SIGTERM reaches the sidecar only after its trainer's container ended, "
               "so the default exits)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // Unset flags come from the environment contract, then the defaults.
  JobSettingsOverrides given;
  if (f.rank != kUnset) given.process_id = f.rank;
  if (f.num_processes != kUnset) given.num_processes = f.num_processes;
  if (!f.coordinator_address.empty()) given.coordinator_address = f.coordinator_address;
  if (!f.token_file.empty()) given.token_file = f.token_file;
  if (absl::Status s = ParseTimeoutFlags(f.timeouts, &given); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  absl::StatusOr<JobSettings> settings = ResolveJobSettings(given);
  if (!settings.ok()) return Fail(std::string(settings.status().message()));
  if (settings->coordinator_address.empty()) {
    return Fail("coordinator address unknown: set COHORT_COORDINATOR_ADDRESS or "
                "--coordinator-address (host:port of rank 0)");
  }
  const int rank = settings->process_id;
  const int num = settings->num_processes;
  int per_pod = f.processes_per_pod;
  if (per_pod == kUnset) {
    absl::StatusOr<std::optional<int64_t>> v = env::GetInt(env::kProcessesPerPod);
    if (!v.ok()) return Fail(std::string(v.status().message()));
    per_pod = static_cast<int>(v->value_or(1));
  }
  if (per_pod < 1 || rank % per_pod != 0 || rank + per_pod > num) {
    return Fail(absl::StrCat("this sidecar would serve ranks ", rank, " to ", rank + per_pod - 1,
                             " (COHORT_PROCESS_ID=", rank, ", COHORT_PROCESSES_PER_POD=", per_pod,
                             ") of a job of ", num,
                             " (COHORT_NUM_PROCESSES): the first rank must be a multiple of the "
                             "processes per pod, and every rank below the job size"));
  }
  if (f.agent_socket.empty()) f.agent_socket = env::Get(env::kAgentSocket).value_or("");
  if (f.agent_socket.empty()) {
    return Fail("agent socket unknown: set COHORT_AGENT_SOCKET or --agent-socket to a path in a "
                "directory shared with the trainer");
  }
  if (f.agent_socket.size() > 100) {
    return Fail(absl::StrCat("agent socket path '", f.agent_socket,
                             "' is too long for a Unix socket (limit ~100 bytes); use a shorter "
                             "path"));
  }
  if (settings->token.empty()) {
    LogWarning("no job token configured (COHORT_TOKEN/COHORT_TOKEN_FILE): RPCs are not "
               "authenticated");
  }

  // Signals go to one thread; block them before any other thread starts.
  sigset_t signals = BlockTerminationSignals();

  // Metrics: one set of series per rank served.
  auto registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry, "sidecar");
  std::vector<std::unique_ptr<sidecar::SidecarMetrics>> metrics;
  for (int local = 0; local < per_pod; ++local) {
    metrics.push_back(std::make_unique<sidecar::SidecarMetrics>(*registry, rank + local));
  }
  metrics[0]->SetJob(num, settings->timeouts.heartbeat);
  sidecar::JaxPortMetrics jax_metrics(*registry);

  // Rank 0: the coordination service.
  std::unique_ptr<coordination::CoordinationServer> coordinator;
  if (rank == 0) {
    absl::StatusOr<coordination::ServerOptions> options =
        coordination::ServerOptionsFor(*settings, f.coordinator_bind_address);
    if (!options.ok()) return Fail(std::string(options.status().message()));
    if (!f.no_jax_port) {
      std::optional<int> jax_port;
      if (f.jax_port != kUnset) {
        jax_port = f.jax_port;
      } else if (std::optional<std::string> jax = env::Get("JAX_COORDINATOR_ADDRESS")) {
        absl::StatusOr<int> port = env::CoordinatorPort(*jax);
        if (!port.ok()) {
          return Fail(absl::StrCat("JAX_COORDINATOR_ADDRESS: ", port.status().message()));
        }
        jax_port = *port;
      }
      coordination::JaxPortOptions jax;
      if (!f.jax_heartbeat_timeout.empty()) {
        absl::StatusOr<absl::Duration> d = env::ParseDuration(f.jax_heartbeat_timeout);
        if (!d.ok()) return Fail(absl::StrCat("--jax-heartbeat-timeout: ", d.status().message()));
        jax.heartbeat_timeout = *d;
      }
      jax.on_rpc = [&metrics = jax_metrics](absl::string_view protocol, absl::string_view method,
                                            absl::StatusCode code, std::optional<absl::Duration> waited) {
        metrics.Count(protocol, method, code, waited);
      };
      if (jax_port) {
        options->attached_port = coordination::JaxPortStarter(
            absl::StrCat(f.coordinator_bind_address, ":", *jax_port), std::move(jax));
      }
    }
    absl::StatusOr<std::unique_ptr<coordination::CoordinationServer>> server =
        coordination::CoordinationServer::Start(*options);
    if (!server.ok()) return Fail(std::string(server.status().message()));
    coordinator = std::move(*server);
  }

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {registry};
  if (coordinator) {
    collectables.push_back(std::make_shared<sidecar::CoordinatorCollector>(
        &coordinator->service(), f.per_rank_metrics_limit));
  }

  // The agent sockets: one per rank served, each with its own agent.
  std::vector<RankAgent> agents;
  const std::string where = per_pod > 1 ? PodName() : "";
  for (int local = 0; local < per_pod; ++local) {
    JobSettings rank_settings = *settings;
    rank_settings.process_id = rank + local;
    coordination::AgentOptions options = coordination::AgentOptionsFor(rank_settings);
    // Failure messages name the pod and the process: "rank 5 (pod demo-1, local process 1,
    // pid 812) failed because its process died".
    if (per_pod > 1) options.where = absl::StrCat("pod ", where, ", local process ", local, ",");
    absl::StatusOr<RankAgent> agent =
        ServeRank(env::AgentSocketPath(f.agent_socket, local, per_pod), std::move(options),
                  metrics[local].get());
    if (!agent.ok()) return Fail(std::string(agent.status().message()));
    agents.push_back(std::move(*agent));
  }
  // Whether `state` holds for any rank's trainer.
  auto any = [&](bool (sidecar::AgentRpcService::*state)() const) {
    for (const RankAgent& a : agents) {
      if ((*a.service.*state)()) return true;
    }
    return false;
  };

  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      f.http_address, f.http_port, collectables, [&]() -> std::string {
        if (rank == 0 && coordinator == nullptr) return "coordination service not running";
        return "";
      });
  if (!http.ok()) return Fail(std::string(http.status().message()));
  std::error_code ec;
  if (!f.http_port_file.empty()) {
    std::string tmp = f.http_port_file + ".tmp";
    std::ofstream(tmp) << (*http)->port() << "\n";
    std::filesystem::rename(tmp, f.http_port_file, ec);
  }
  LogInfo(per_pod == 1 ? absl::StrCat("rank ", rank, "/", num)
                       : absl::StrCat("ranks ", rank, "-", rank + per_pod - 1, "/", num),
          ": agent socket ", agents[0].socket, per_pod > 1 ? " and the next ones" : "",
          ", metrics on port ",
          (*http)->port(),
          rank == 0 ? absl::StrCat(", coordination service on port ", coordinator->port()) : "",
          coordinator && coordinator->attached_port() != nullptr
              ? absl::StrCat(", JAX's coordination protocol on port ", coordinator->attached_port()->port())
              : "",
          settings->restart_attempt ? absl::StrCat(", restart attempt ", *settings->restart_attempt)
                                    : "");

  SignalState signal_state;
  std::thread signal_thread([&] {
    pthread_setname_np(pthread_self(), "signals");
    while (true) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      int count;
      {
        absl::MutexLock lock(&signal_state.mu);
        count = ++signal_state.count;
      }
      if (sig == SIGTERM && count == 1 && any(&sidecar::AgentRpcService::trainer_attached)) {
        LogInfo("SIGTERM: reporting a preemption notice and waiting for the trainers to finish");
        for (RankAgent& a : agents) a.service->OnPreemptionSignal();
        continue;
      }
      if (sig == SIGTERM && count == 1 && f.preempt_before_attach && !any(&sidecar::AgentRpcService::trainer_ever_attached)) {
        LogInfo("SIGTERM before a trainer attached: a preemption notice, reported once they "
                "have joined the job");
        for (RankAgent& a : agents) a.service->OnPreemptionSignal();
        continue;
      }
      LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": exiting");
      for (RankAgent& a : agents) a.service->StopWaiting();
      return;
    }
  });

  // Every rank's trainer, one after the other: each ends (shuts down, fails, or is told of the
  // job's failure) or the signal thread stops the waiting.
  int exit_code = kExitOk;
  for (RankAgent& a : agents) {
    sidecar::TrainerOutcome outcome = a.service->WaitForTrainer(absl::InfiniteFuture());
    // Stopped by a signal with no trainer ever attached (e.g. a program that does not use
    // libdist): nothing failed.
    bool idle_stop =
        outcome == sidecar::TrainerOutcome::kRunning && !a.service->trainer_ever_attached();
    if (outcome != sidecar::TrainerOutcome::kShutDown && !idle_stop) exit_code = kExitFailed;
  }
  if (coordinator) {
    // Keep the service up until every rank shut down or failed, so a fast rank 0 never strands
    // slower peers (bounded by the shutdown timeout).
    LogInfo("waiting for every rank to finish before stopping the coordination service");
    if (!coordinator->Stop(settings->timeouts.shutdown)) exit_code = kExitFailed;
    if (!coordinator->service().JobStatus().ok()) exit_code = kExitFailed;
  }
  LogInfo("exiting with code ", exit_code);
  // A trainer still attached (the sidecar was stopped) is told now; the rest of the grace is
  // for replies in flight.
  for (RankAgent& a : agents) {
    a.service->DetachTrainer(absl::UnavailableError(
        "its cohort-sidecar was stopped (SIGINT or SIGTERM) while the trainer was attached"));
  }
  const absl::Time grace = absl::Now() + absl::Seconds(1);
  for (RankAgent& a : agents) {
    a.server->Shutdown(absl::ToChronoTime(grace));
    std::filesystem::remove(a.socket, ec);
  }
  // The signal thread may be parked in sigwait; the process exit ends it.
  signal_thread.detach();
  std::fflush(nullptr);
  _exit(exit_code);
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) { return cohort::Run(argc, argv); }
