// cohort-sidecar: runs next to every trainer. On rank 0 it hosts the coordination service; on
// every rank it hosts the agent that libdist attaches to over a Unix socket, and serves
// /metrics, /healthz and /readyz. Every flag falls back to the COHORT_* environment the operator
// (or cohort-run) sets. See docs/sidecar.md.
//
// Exit codes: 0 the trainer shut down cleanly (or the sidecar was stopped before any trainer
// attached); 1 the trainer or the job failed; 2 bad configuration.

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

int Run(int argc, char** argv) {
  InitLogging("cohort-sidecar");
  Flags f;
  CLI::App app{"cohort-sidecar: coordination service (rank 0), agent and metrics for one rank"};
  app.add_option("--rank", f.rank, "This pod's rank (env COHORT_PROCESS_ID)");
  app.add_option("--num-processes", f.num_processes, "Job size (env COHORT_NUM_PROCESSES)");
  app.add_option("--coordinator-address", f.coordinator_address,
                 "host:port of rank 0's coordination service (env COHORT_COORDINATOR_ADDRESS)");
  app.add_option("--coordinator-bind-address", f.coordinator_bind_address,
                 "Rank 0: interface the coordination service listens on; the port comes from "
                 "the coordinator address")
      ->capture_default_str();
  app.add_option("--agent-socket", f.agent_socket,
                 "Unix socket libdist attaches to (env COHORT_AGENT_SOCKET)");
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

  // Metrics.
  auto registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry, "sidecar");
  sidecar::SidecarMetrics metrics(*registry, rank);
  metrics.SetJob(num, settings->timeouts.heartbeat);
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
      if (jax_port) options->jax_listen_address = absl::StrCat(f.coordinator_bind_address, ":", *jax_port);
      if (!f.jax_heartbeat_timeout.empty()) {
        absl::StatusOr<absl::Duration> d = env::ParseDuration(f.jax_heartbeat_timeout);
        if (!d.ok()) return Fail(absl::StrCat("--jax-heartbeat-timeout: ", d.status().message()));
        options->jax.heartbeat_timeout = *d;
      }
      options->jax.on_rpc = [&metrics = jax_metrics](absl::string_view protocol,
                                                     absl::string_view method,
                                                     absl::StatusCode code,
                                                     std::optional<absl::Duration> waited) {
        metrics.Count(protocol, method, code, waited);
      };
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

  // The agent socket.
  sidecar::AgentRpcService agent_service(coordination::AgentOptionsFor(*settings), &metrics);
  std::error_code ec;
  std::filesystem::path socket_path(f.agent_socket);
  if (socket_path.has_parent_path()) std::filesystem::create_directories(socket_path.parent_path(), ec);
  std::filesystem::remove(socket_path, ec);  // A stale socket from an earlier run.
  grpc::ServerBuilder builder;
  int unused_port = 0;
  builder.AddListeningPort(absl::StrCat("unix:", f.agent_socket), grpc::InsecureServerCredentials(),
                           &unused_port);
  builder.RegisterService(&agent_service);
  // libdist pings its attach stream every 10 s, which carries nothing for as long as the program
  // makes no call: without this, the sidecar would end it after ~30 s quiet.
  AllowClientKeepalive(&builder);
  std::unique_ptr<grpc::Server> socket_server = builder.BuildAndStart();
  if (!socket_server) {
    return Fail(absl::StrCat("cannot serve the agent socket ", f.agent_socket,
                             ": check that its directory exists and is writable"));
  }

  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      f.http_address, f.http_port, collectables, [&]() -> std::string {
        if (rank == 0 && coordinator == nullptr) return "coordination service not running";
        return "";
      });
  if (!http.ok()) return Fail(std::string(http.status().message()));
  if (!f.http_port_file.empty()) {
    std::string tmp = f.http_port_file + ".tmp";
    std::ofstream(tmp) << (*http)->port() << "\n";
    std::filesystem::rename(tmp, f.http_port_file, ec);
  }
  LogInfo("rank ", rank, "/", num, ": agent socket ", f.agent_socket, ", metrics on port ",
          (*http)->port(),
          rank == 0 ? absl::StrCat(", coordination service on port ", coordinator->port()) : "",
          coordinator && coordinator->jax_port() != 0
              ? absl::StrCat(", JAX's coordination protocol on port ", coordinator->jax_port())
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
      if (sig == SIGTERM && count == 1 && agent_service.trainer_attached()) {
        LogInfo("SIGTERM: reporting a preemption notice and waiting for the trainer to finish");
        agent_service.OnPreemptionSignal();
        continue;
      }
      if (sig == SIGTERM && count == 1 && f.preempt_before_attach &&
          !agent_service.trainer_ever_attached()) {
        LogInfo("SIGTERM before the trainer attached: a preemption notice, reported once it "
                "has joined the job");
        agent_service.OnPreemptionSignal();
        continue;
      }
      LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": exiting");
      agent_service.StopWaiting();
      return;
    }
  });

  sidecar::TrainerOutcome outcome = agent_service.WaitForTrainer(absl::InfiniteFuture());
  // Stopped by a signal with no trainer ever attached (e.g. a program that does not use
  // libdist): nothing failed.
  bool idle_stop = outcome == sidecar::TrainerOutcome::kRunning && !agent_service.trainer_ever_attached();
  int exit_code = outcome == sidecar::TrainerOutcome::kShutDown || idle_stop ? kExitOk : kExitFailed;
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
  agent_service.DetachTrainer(absl::UnavailableError(
      "its cohort-sidecar was stopped (SIGINT or SIGTERM) while the trainer was attached"));
  socket_server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  std::filesystem::remove(socket_path, ec);
  // The signal thread may be parked in sigwait; the process exit ends it.
  signal_thread.detach();
  std::fflush(nullptr);
  _exit(exit_code);
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) { return cohort::Run(argc, argv); }
