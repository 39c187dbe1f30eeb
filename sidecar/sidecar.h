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
#include "common/metrics_http_server.h"
#include "coordination/server/coordination_server.h"
#include "sidecar/agent/agent_rpc_service.h"
#include "sidecar/attempt_runner.h"
#include "sidecar/metrics/sidecar_metrics.h"
#include "sidecar/sidecar_config.h"

// The running cohort-sidecar: the coordination service on rank 0, an agent socket per rank of the
// pod, restarting in place (attempt_runner.h), the metrics endpoints and the signal thread. Its
// settings: sidecar_config.h (main.cc declares the flags); sidecar_policy.h decides what signals
// mean, what the coordination service hears of an attempt's end, and the exit code.
namespace cohort::sidecar {

// The running sidecar.
//
// Lifecycle: Start() -> HandleSignals() -> WaitForTrainers() -> Stop(), all from one thread (a
// spare pod's: Start() -> HandleSignals() -> WaitForSlot(), sidecar/spare.h). The process blocks
// SIGTERM and SIGINT (BlockTerminationSignals) before Start() starts any thread; HandleSignals()
// then takes them on a thread of its own ("signals"), where a preemption notice is passed to the
// agents or the waiting is stopped. The destructor ends that thread.
class Sidecar {
 public:
  // Starts the metrics, the coordination service on rank 0 (with JAX's protocol beside it unless
  // --no-jax-port), the agent sockets, restarting in place (AttemptRunner) when there is a launch
  // socket, and the HTTP endpoints, in that order; a spare pod's, only the runner (as a spare) and
  // the HTTP endpoints. InvalidArgument naming the setting when one is malformed or a socket
  // cannot be served; the coordination service's and the HTTP server's own errors when they
  // cannot start.
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

  // A spare pod's: waits until an attempt gives it a slot (nullopt: a signal stopped it first).
  std::optional<SpareSlot> WaitForSlot();
  // A spare pod's, given a slot: lets go of what the sidecar it becomes must find free (the HTTP
  // port, the launch socket, the hub stream).
  void ReleaseForExec();

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
  // Restarting in place (a launch socket is set): the runner, with the hooks it calls back.
  absl::Status StartAttemptRunner();
  // Rank 0, from the hub before the pods hear of the attempt: its coordination service, of its
  // size (an elastic job's attempt may run fewer processes).
  void RestartCoordinator(const AttemptPlace& place);
  // Every rank of the pod gets a fresh agent of the attempt, under the rank the attempt gives it.
  void RenewAgents(const AttemptPlace& place);
  // Rank 0: the operator drains `attempt` (an elastic job's resize): its coordination service
  // gets a preemption notice, so every rank reaches the preemption sync point at the same step.
  void DrainCoordinator(int32_t attempt);
  // Rank 0: a pod's processes of the running attempt ended; the attempt's coordination service
  // hears it when ShouldTellCoordinator says so, and fails the job if it did not yet.
  void TellCoordinator(const coordination::attemptspb::AttemptEnd& end);
  // Local process `local`'s agent: as the pod's environment says, or in `place`'s attempt.
  coordination::AgentOptions AgentOptionsFor(int local, const AttemptPlace* place) const;
  // Serves `options.task`'s agent on `socket`. InvalidArgument naming the socket when it cannot
  // be served.
  static absl::StatusOr<RankAgent> ServeRank(const std::string& socket,
                                             coordination::AgentOptions options,
                                             SidecarMetrics* metrics);
  absl::Status ServeHttp();
  // Why /readyz says no ("" when ready).
  std::string NotReady() const;
  void LogStarted() const;
  void SignalLoop(sigset_t signals);
  // Whether `state` holds for any rank's trainer.
  bool AnyTrainer(bool (AgentRpcService::*state)() const) const;

  const SidecarConfig config_;
  // Guards agents_ (replaced per attempt) and coordinator_ (restarted per attempt on rank 0)
  // against the signal thread and the HTTP endpoints.
  mutable absl::Mutex parts_mu_;
  std::optional<coordination::ServerOptions> coordinator_options_;
  // The running attempt's layout (rank 0, an elastic job's resized attempt): which pod runs
  // which ranks.
  std::optional<AttemptLayout> coordinator_layout_ ABSL_GUARDED_BY(parts_mu_);
  std::shared_ptr<CoordinatorCollector> coordinator_collector_;
  // Declared in the order they start, so that they stop the other way round (the JAX port's
  // callback counts into jax_metrics_).
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::unique_ptr<SidecarMetrics>> metrics_;  // One set of series per rank served.
  std::unique_ptr<JaxPortMetrics> jax_metrics_;
  std::unique_ptr<coordination::CoordinationServer> coordinator_;  // Rank 0 only.
  std::vector<RankAgent> agents_;
  // Restarting in place. Its threads call back into the parts above: destroyed before them.
  std::unique_ptr<AttemptRunner> runner_;
  std::unique_ptr<MetricsHttpServer> http_;
  std::thread signal_thread_;
};

}  // namespace cohort::sidecar
