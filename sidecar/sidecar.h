#pragma once

#include <signal.h>

#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/job_settings.h"
#include "common/metrics_http_server.h"
#include "coordination/attempts/attempt_client.h"
#include "coordination/attempts/attempt_hub.h"
#include "coordination/server/coordination_server.h"
#include "sidecar/agent/agent_rpc_service.h"
#include "sidecar/health_watch.h"
#include "sidecar/launch_channel.h"
#include "sidecar/metrics/sidecar_metrics.h"

// cohort-sidecar's parts: its settings, and the running sidecar (the coordination service on
// rank 0, an agent socket per rank of the pod, the metrics endpoints and the signal thread).
// main.cc declares the flags; sidecar_policy.h decides what signals mean and the exit code.
namespace cohort::sidecar {

// A number flag not given: it comes from the environment.
inline constexpr int kUnset = -1;

// The flags as written on the command line. Unset ones fall back to the COHORT_* environment
// the operator (or cohort-run) sets (ResolveConfig).
struct SidecarFlags {
  int rank = kUnset;               // From COHORT_PROCESS_ID.
  int num_processes = kUnset;      // From COHORT_NUM_PROCESSES.
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
  std::string launch_socket;  // From COHORT_LAUNCH_SOCKET; set: restart in place.
};

// What the sidecar runs with: the job's settings and the ranks it serves, resolved.
struct SidecarConfig {
  JobSettings settings;
  int processes_per_pod = 1;  // The ranks served: settings.process_id onwards.
  std::string agent_socket;   // The first rank's; env::AgentSocketPath names the others'.
  // cohort-launch's socket (COHORT_LAUNCH_SOCKET, spec.restartStrategy: InPlace): the sidecar
  // follows the job's attempts (rank 0 hosts their hub) and restarts in place. Empty: it does not.
  std::string launch_socket;
  SidecarFlags flags;  // The rest as given (JAX's port is resolved on rank 0 only).
};

// Resolves `flags` against the environment and checks them. InvalidArgument naming the setting,
// its variable and the fix when one is missing, malformed or out of range. Warns (in the log)
// when no job token is configured.
absl::StatusOr<SidecarConfig> ResolveConfig(SidecarFlags flags);

// The running sidecar.
//
// Lifecycle: Start() -> HandleSignals() -> WaitForTrainers() -> Stop(), all from one thread.
// The process blocks SIGTERM and SIGINT (BlockTerminationSignals) before Start() starts any
// thread; HandleSignals() then takes them on a thread of its own ("signals"), where a preemption
// notice is passed to the agents or the waiting is stopped. The destructor ends that thread.
class Sidecar {
 public:
  // Starts the metrics, the coordination service on rank 0 (with JAX's protocol beside it unless
  // --no-jax-port), the agent sockets and the HTTP endpoints, in that order. InvalidArgument
  // naming the setting when one is malformed or a socket cannot be served; the coordination
  // service's and the HTTP server's own errors when they cannot start.
  static absl::StatusOr<std::unique_ptr<Sidecar>> Start(SidecarConfig config);
  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  // Takes `signals` (SIGTERM, SIGINT) with sigwait on a new thread.
  void HandleSignals(sigset_t signals);

  // Waits for every rank's trainer, one after the other, to end (shut down, fail, or be told of
  // the job's failure) or for a signal to stop the waiting; on rank 0 then keeps the service up
  // until every rank finished (bounded by the shutdown timeout). Returns the exit code.
  // Restarting in place, it first runs attempt after attempt as the hub orders them (each with
  // fresh agents and, on rank 0, a fresh coordination service) until a signal stops it.
  int WaitForTrainers();

  // Tells a trainer still attached why the sidecar stops, gives replies in flight a second, and
  // removes the sockets.
  void Stop();

 private:
  // One rank served by this sidecar: its agent and the Unix socket its trainer attaches to.
  struct RankAgent {
    std::string socket;
    std::unique_ptr<AgentRpcService> service;
    std::unique_ptr<grpc::Server> server;
  };

  explicit Sidecar(SidecarConfig config) : config_(std::move(config)) {}

  void StartMetrics();
  absl::Status StartCoordinator();
  // Adds JAX's protocol on its own port to `options`, when it is asked for.
  absl::Status AddJaxPort(coordination::ServerOptions* options);
  absl::Status ServeAgents();
  // Restarting in place: the attempt hub (rank 0) or a follower of it, and the launch socket.
  absl::Status StartInPlace();
  // Hang detection: this pod's ranks' progress to the hub, and their stacks when it asks.
  void StartHealthWatch();
  // Rank 0, from the hub before the pods hear of `attempt`: the attempt's coordination service.
  void RestartCoordinator(int32_t attempt);
  // Every rank of the pod gets a fresh agent of `attempt`; cohort-launch is told to run it.
  void BeginAttempt(int32_t attempt);
  void OnOrder(int32_t attempt);
  void ReportEnded(const launch::AttemptEnded& ended);
  // Rank 0: a pod's processes of the running attempt ended by themselves (not following another
  // rank; preempted only before they joined): the attempt's coordination service hears it, and
  // fails the job if it did not yet.
  void TellCoordinator(const coordination::attemptspb::AttemptEnd& end);
  coordination::AgentOptions AgentOptionsFor(int local, std::optional<int32_t> attempt) const;
  // Serves `options.task`'s agent on `socket`. InvalidArgument naming the socket when it cannot
  // be served.
  static absl::StatusOr<RankAgent> ServeRank(const std::string& socket,
                                             coordination::AgentOptions options,
                                             SidecarMetrics* metrics);
  absl::Status ServeHttp();
  void LogStarted() const;
  void SignalLoop(sigset_t signals);
  // Whether `state` holds for any rank's trainer.
  bool AnyTrainer(bool (AgentRpcService::*state)() const) const;

  const SidecarConfig config_;
  // Restarting in place: the attempt ordered last and the one the agents serve; a signal that
  // ends the waiting (stop_) or a preemption notice (preempting_) ends the attempts.
  absl::Mutex mu_;
  std::optional<int32_t> ordered_ ABSL_GUARDED_BY(mu_);
  int32_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  // cohort-launch was told to run attempt_: at once on rank 0, else once the hub runs it (a pod
  // that replaces one alone is created for the next attempt while the hub still runs the last).
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool preempting_ ABSL_GUARDED_BY(mu_) = false;
  // Guards agents_ (replaced per attempt) and coordinator_ (restarted per attempt on rank 0)
  // against the signal thread and the HTTP endpoints.
  mutable absl::Mutex parts_mu_;
  std::optional<coordination::ServerOptions> coordinator_options_;
  std::shared_ptr<CoordinatorCollector> coordinator_collector_;
  // Declared in the order they start, so that they stop the other way round (the JAX port's
  // callback counts into jax_metrics_).
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::unique_ptr<SidecarMetrics>> metrics_;  // One set of series per rank served.
  std::unique_ptr<JaxPortMetrics> jax_metrics_;
  std::unique_ptr<coordination::CoordinationServer> coordinator_;  // Rank 0 only.
  std::vector<RankAgent> agents_;
  std::unique_ptr<MetricsHttpServer> http_;
  // In place, unless hang detection is off; destroyed after the hub and the follower, whose
  // threads call it (its own thread is stopped first, in ~Sidecar).
  std::unique_ptr<HealthWatch> health_;
  std::unique_ptr<coordination::AttemptHubServer> hub_;      // Rank 0, in place only.
  std::unique_ptr<coordination::AttemptFollower> follower_;  // Other ranks, in place only.
  std::unique_ptr<LaunchChannel> launch_;
  std::thread signal_thread_;
};

}  // namespace cohort::sidecar
