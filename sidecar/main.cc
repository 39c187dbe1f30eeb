// cohort-sidecar: runs in every job pod. On rank 0's pod it hosts the coordination service; for
// every rank of its pod (spec.processesPerPod of them) it hosts the agent that the rank's libdist
// attaches to over a Unix socket of its own, and it serves /metrics, /healthz and /readyz. Every
// flag falls back to the COHORT_* environment the operator (or cohort-run) sets. See
// docs/sidecar.md.
//
// Exit codes: 0 every trainer shut down cleanly (or the sidecar was stopped before any trainer
// attached); 1 a trainer or the job failed; 2 bad configuration.

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/timeout_flags.h"
#include "coordination/server/jax_compat_service.h"
#include "sidecar/sidecar.h"
#include "sidecar/sidecar_policy.h"
#include "sidecar/spare.h"

namespace cohort::sidecar {
namespace {

int Fail(const std::string& message) {
  LogError(message);
  return kExitUsage;
}

void AddFlags(CLI::App& app, SidecarFlags* f) {
  app.add_option("--rank", f->rank, "The rank of this pod's first process (env COHORT_PROCESS_ID)");
  app.add_option("--processes-per-pod", f->processes_per_pod,
                 "Ranks this sidecar serves, --rank onwards, each on its own socket "
                 "(env COHORT_PROCESSES_PER_POD, default 1)");
  app.add_option("--num-processes", f->num_processes, "Job size (env COHORT_NUM_PROCESSES)");
  app.add_option("--coordinator-address", f->coordinator_address,
                 "host:port of rank 0's coordination service (env COHORT_COORDINATOR_ADDRESS)");
  app.add_option("--coordinator-bind-address", f->coordinator_bind_address,
                 "Rank 0: interface the coordination service listens on; the port comes from "
                 "the coordinator address")
      ->capture_default_str();
  app.add_option("--agent-socket", f->agent_socket,
                 "Unix socket libdist attaches to (env COHORT_AGENT_SOCKET); serving several "
                 "ranks, local process l's is <socket without .sock>-<l>.sock");
  app.add_option("--token-file", f->token_file,
                 "File holding the job token (env COHORT_TOKEN_FILE, or COHORT_TOKEN)");
  app.add_option("--http-address", f->http_address, "Interface of /metrics, /healthz, /readyz")
      ->capture_default_str();
  app.add_option("--http-port", f->http_port, "Port of /metrics, /healthz, /readyz; 0 picks one")
      ->capture_default_str();
  app.add_option("--http-port-file", f->http_port_file, "Write the chosen HTTP port here");
  AddTimeoutFlags(app, &f->timeouts);
  app.add_option("--per-rank-metrics-limit", f->per_rank_metrics_limit,
                 "Rank 0 exports per-rank series up to this job size")
      ->capture_default_str();
  app.add_option("--jax-port", f->jax_port,
                 "Rank 0: port that serves XLA's coordination protocol to unmodified "
                 "jax.distributed programs, over the same service (default: the port of "
                 "JAX_COORDINATOR_ADDRESS when it is set; 0 picks one). See docs/jax.md");
  app.add_flag("--no-jax-port", f->no_jax_port, "Rank 0: do not serve JAX's protocol");
  app.add_option("--jax-heartbeat-timeout", f->jax_heartbeat_timeout,
                 absl::StrCat("A JAX process silent this long has failed (JAX heartbeats every "
                              "50 s by default; default ",
                              absl::FormatDuration(coordination::kJaxHeartbeatTimeout), ")"));
  app.add_option("--launch-socket", f->launch_socket,
                 "Unix socket cohort-launch connects to (env COHORT_LAUNCH_SOCKET; the operator "
                 "sets it for spec.restartStrategy: InPlace): the sidecar then follows the job's "
                 "restart attempts and restarts its ranks in place (docs/operator.md)");
  app.add_flag("--preempt-before-attach", f->preempt_before_attach,
               "A SIGTERM that comes before the trainer attached is a preemption notice for the "
               "trainer to come, instead of a reason to exit (cohort-run sets it; under "
               "Kubernetes, SIGTERM reaches the sidecar only after its trainer's container ended, "
               "so the default exits)");
}

int Run(int argc, char** argv) {
  InitLogging("cohort-sidecar");
  SidecarFlags flags;
  CLI::App app{
      "cohort-sidecar: coordination service (rank 0), agents and metrics for the ranks "
      "of one pod"};
  AddFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  absl::StatusOr<SidecarConfig> config = ResolveConfig(std::move(flags));
  if (!config.ok()) return Fail(std::string(config.status().message()));

  // Signals go to one thread; block them before any other thread starts.
  sigset_t signals = BlockTerminationSignals();
  absl::StatusOr<std::unique_ptr<Sidecar>> sidecar = Sidecar::Start(*config);
  if (!sidecar.ok()) return Fail(std::string(sidecar.status().message()));
  (*sidecar)->HandleSignals(signals);
  int exit_code = 0;
  if (!config->spare.empty()) {
    exit_code = RunSpare(**sidecar, *config, std::vector<std::string>(argv, argv + argc));
  } else {
    exit_code = (*sidecar)->WaitForTrainers();
    LogInfo("exiting with code ", exit_code);
    (*sidecar)->Stop();
  }
  // _exit: the signal thread may be parked in sigwait, and the process exit ends it.
  std::fflush(nullptr);
  _exit(exit_code);
}

}  // namespace
}  // namespace cohort::sidecar

int main(int argc, char** argv) { return cohort::sidecar::Run(argc, argv); }
