#include "sidecar/sidecar.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/client/agent.h"
#include "coordination/server/jax_compat_service.h"
#include "sidecar/sidecar_policy.h"

namespace cohort::sidecar {
namespace {

// This pod's name: COHORT_POD_NAME, else the hostname (a pod's hostname is its name).
std::string PodName() {
  if (std::optional<std::string> name = env::Get(env::kPodName)) return *name;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The ranks served, checked against the job size.
absl::StatusOr<int> ResolveProcessesPerPod(const SidecarFlags& flags, int rank, int num) {
  int per_pod = flags.processes_per_pod;
  if (per_pod == kUnset) {
    absl::StatusOr<std::optional<int64_t>> v = env::GetInt(env::kProcessesPerPod);
    if (!v.ok()) return v.status();
    per_pod = static_cast<int>(v->value_or(1));
  }
  if (per_pod < 1 || rank % per_pod != 0 || rank + per_pod > num) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this sidecar would serve ranks ", rank, " to ", rank + per_pod - 1,
        " (COHORT_PROCESS_ID=", rank, ", COHORT_PROCESSES_PER_POD=", per_pod, ") of a job of ",
        num,
        " (COHORT_NUM_PROCESSES): the first rank must be a multiple of the processes per pod, "
        "and every rank below the job size"));
  }
  return per_pod;
}

absl::StatusOr<std::string> ResolveAgentSocket(const SidecarFlags& flags) {
  std::string socket = flags.agent_socket;
  if (socket.empty()) socket = env::Get(env::kAgentSocket).value_or("");
  if (socket.empty()) {
    return absl::InvalidArgumentError(
        "agent socket unknown: set COHORT_AGENT_SOCKET or --agent-socket to a path in a "
        "directory shared with the trainer");
  }
  if (socket.size() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent socket path '", socket,
                     "' is too long for a Unix socket (limit ~100 bytes); use a shorter path"));
  }
  return socket;
}

}  // namespace

absl::StatusOr<SidecarConfig> ResolveConfig(SidecarFlags flags) {
  // Unset flags come from the environment contract, then the defaults.
  JobSettingsOverrides given;
  if (flags.rank != kUnset) given.process_id = flags.rank;
  if (flags.num_processes != kUnset) given.num_processes = flags.num_processes;
  if (!flags.coordinator_address.empty()) given.coordinator_address = flags.coordinator_address;
  if (!flags.token_file.empty()) given.token_file = flags.token_file;
  if (absl::Status s = ParseTimeoutFlags(flags.timeouts, &given); !s.ok()) return s;
  absl::StatusOr<JobSettings> settings = ResolveJobSettings(given);
  if (!settings.ok()) return settings.status();
  if (settings->coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator address unknown: set COHORT_COORDINATOR_ADDRESS or --coordinator-address "
        "(host:port of rank 0)");
  }
  absl::StatusOr<int> per_pod =
      ResolveProcessesPerPod(flags, settings->process_id, settings->num_processes);
  if (!per_pod.ok()) return per_pod.status();
  absl::StatusOr<std::string> socket = ResolveAgentSocket(flags);
  if (!socket.ok()) return socket.status();
  if (settings->token.empty()) {
    LogWarning("no job token configured (COHORT_TOKEN/COHORT_TOKEN_FILE): RPCs are not "
               "authenticated");
  }
  SidecarConfig config;
  config.settings = *std::move(settings);
  config.processes_per_pod = *per_pod;
  config.agent_socket = *std::move(socket);
  config.flags = std::move(flags);
  return config;
}

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(SidecarConfig config) {
  std::unique_ptr<Sidecar> sidecar(new Sidecar(std::move(config)));
  sidecar->StartMetrics();
  if (absl::Status s = sidecar->StartCoordinator(); !s.ok()) return s;
  if (absl::Status s = sidecar->ServeAgents(); !s.ok()) return s;
  if (absl::Status s = sidecar->ServeHttp(); !s.ok()) return s;
  sidecar->LogStarted();
  return sidecar;
}

Sidecar::~Sidecar() {
  // The signal thread waits in sigwait: a SIGINT of its own stops it.
  if (signal_thread_.joinable()) {
    pthread_kill(signal_thread_.native_handle(), SIGINT);
    signal_thread_.join();
  }
}

void Sidecar::StartMetrics() {
  registry_ = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry_, "sidecar");
  const int rank = config_.settings.process_id;
  for (int local = 0; local < config_.processes_per_pod; ++local) {
    metrics_.push_back(std::make_unique<SidecarMetrics>(*registry_, rank + local));
  }
  metrics_[0]->SetJob(config_.settings.num_processes, config_.settings.timeouts.heartbeat);
  jax_metrics_ = std::make_unique<JaxPortMetrics>(*registry_);
}

absl::Status Sidecar::StartCoordinator() {
  if (config_.settings.process_id != 0) return absl::OkStatus();
  absl::StatusOr<coordination::ServerOptions> options =
      coordination::ServerOptionsFor(config_.settings, config_.flags.coordinator_bind_address);
  if (!options.ok()) return options.status();
  if (absl::Status s = AddJaxPort(&*options); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<coordination::CoordinationServer>> server =
      coordination::CoordinationServer::Start(*options);
  if (!server.ok()) return server.status();
  coordinator_ = *std::move(server);
  return absl::OkStatus();
}

absl::Status Sidecar::AddJaxPort(coordination::ServerOptions* options) {
  const SidecarFlags& f = config_.flags;
  if (f.no_jax_port) return absl::OkStatus();
  std::optional<int> jax_port;
  if (f.jax_port != kUnset) {
    jax_port = f.jax_port;
  } else if (std::optional<std::string> jax = env::Get(env::kJaxCoordinatorAddress)) {
    absl::StatusOr<int> port = env::CoordinatorPort(*jax);
    if (!port.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("JAX_COORDINATOR_ADDRESS: ", port.status().message()));
    }
    jax_port = *port;
  }
  coordination::JaxPortOptions jax;
  if (!f.jax_heartbeat_timeout.empty()) {
    absl::StatusOr<absl::Duration> d = env::ParseDuration(f.jax_heartbeat_timeout);
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--jax-heartbeat-timeout: ", d.status().message()));
    }
    jax.heartbeat_timeout = *d;
  }
  jax.on_rpc = [metrics = jax_metrics_.get()](absl::string_view protocol,
                                              absl::string_view method, absl::StatusCode code,
                                              std::optional<absl::Duration> waited) {
    metrics->Count(protocol, method, code, waited);
  };
  if (jax_port) {
    options->attached_port = coordination::JaxPortStarter(
        absl::StrCat(f.coordinator_bind_address, ":", *jax_port), std::move(jax));
  }
  return absl::OkStatus();
}

absl::Status Sidecar::ServeAgents() {
  const int rank = config_.settings.process_id;
  const int per_pod = config_.processes_per_pod;
  const std::string where = per_pod > 1 ? PodName() : "";
  for (int local = 0; local < per_pod; ++local) {
    JobSettings rank_settings = config_.settings;
    rank_settings.process_id = rank + local;
    coordination::AgentOptions options = coordination::AgentOptionsFor(rank_settings);
    // Failure messages name the pod and the process: "rank 5 (pod demo-1, local process 1,
    // pid 812) failed because its process died".
    if (per_pod > 1) options.where = absl::StrCat("pod ", where, ", local process ", local, ",");
    absl::StatusOr<RankAgent> agent =
        ServeRank(env::AgentSocketPath(config_.agent_socket, local, per_pod), std::move(options),
                  metrics_[local].get());
    if (!agent.ok()) return agent.status();
    agents_.push_back(*std::move(agent));
  }
  return absl::OkStatus();
}

// A stale socket of an earlier run is replaced.
absl::StatusOr<Sidecar::RankAgent> Sidecar::ServeRank(const std::string& socket,
                                                      coordination::AgentOptions options,
                                                      SidecarMetrics* metrics) {
  RankAgent a;
  a.socket = socket;
  a.service = std::make_unique<AgentRpcService>(std::move(options), metrics);
  std::error_code ec;
  std::filesystem::path socket_path(socket);
  if (socket_path.has_parent_path()) {
    std::filesystem::create_directories(socket_path.parent_path(), ec);
  }
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

absl::Status Sidecar::ServeHttp() {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {registry_};
  if (coordinator_) {
    collectables.push_back(std::make_shared<CoordinatorCollector>(
        &coordinator_->service(), config_.flags.per_rank_metrics_limit));
  }
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      config_.flags.http_address, config_.flags.http_port, collectables, [this]() -> std::string {
        if (config_.settings.process_id == 0 && coordinator_ == nullptr) {
          return "coordination service not running";
        }
        return "";
      });
  if (!http.ok()) return http.status();
  http_ = *std::move(http);
  if (const std::string& file = config_.flags.http_port_file; !file.empty()) {
    // Written aside and renamed, so that a reader never sees half a port.
    std::string tmp = file + ".tmp";
    std::ofstream(tmp) << http_->port() << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
  }
  return absl::OkStatus();
}

void Sidecar::LogStarted() const {
  const int rank = config_.settings.process_id;
  const int num = config_.settings.num_processes;
  const int per_pod = config_.processes_per_pod;
  const std::optional<int>& restart_attempt = config_.settings.restart_attempt;
  LogInfo(per_pod == 1 ? absl::StrCat("rank ", rank, "/", num)
                       : absl::StrCat("ranks ", rank, "-", rank + per_pod - 1, "/", num),
          ": agent socket ", agents_[0].socket, per_pod > 1 ? " and the next ones" : "",
          ", metrics on port ", http_->port(),
          rank == 0 ? absl::StrCat(", coordination service on port ", coordinator_->port()) : "",
          coordinator_ && coordinator_->attached_port() != nullptr
              ? absl::StrCat(", JAX's coordination protocol on port ",
                             coordinator_->attached_port()->port())
              : "",
          restart_attempt ? absl::StrCat(", restart attempt ", *restart_attempt) : "");
}

void Sidecar::HandleSignals(sigset_t signals) {
  signal_thread_ = std::thread([this, signals] { SignalLoop(signals); });
}

// SIGTERM (a preemption or a pod deletion) and SIGINT are taken here, on a thread of their own
// rather than in a handler, so that acting on them can take locks and make RPCs.
void Sidecar::SignalLoop(sigset_t signals) {
  pthread_setname_np(pthread_self(), "signals");
  int count = 0;
  while (true) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    ++count;
    switch (OnSignal(sig, count, AnyTrainer(&AgentRpcService::trainer_attached),
                     config_.flags.preempt_before_attach,
                     AnyTrainer(&AgentRpcService::trainer_ever_attached))) {
      case SignalAction::kReportPreemption:
        LogInfo("SIGTERM: reporting a preemption notice and waiting for the trainers to finish");
        for (RankAgent& a : agents_) a.service->OnPreemptionSignal();
        break;
      case SignalAction::kReportPreemptionBeforeAttach:
        LogInfo("SIGTERM before a trainer attached: a preemption notice, reported once they "
                "have joined the job");
        for (RankAgent& a : agents_) a.service->OnPreemptionSignal();
        break;
      case SignalAction::kStop:
        LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": exiting");
        for (RankAgent& a : agents_) a.service->StopWaiting();
        return;
    }
  }
}

bool Sidecar::AnyTrainer(bool (AgentRpcService::*state)() const) const {
  for (const RankAgent& a : agents_) {
    if ((*a.service.*state)()) return true;
  }
  return false;
}

int Sidecar::WaitForTrainers() {
  std::vector<TrainerEnd> trainers;
  for (RankAgent& a : agents_) {
    TrainerEnd end;
    end.outcome = a.service->WaitForTrainer(absl::InfiniteFuture());
    end.ever_attached = a.service->trainer_ever_attached();
    trainers.push_back(end);
  }
  std::optional<CoordinatorEnd> coordinator;
  if (coordinator_) {
    // Keep the service up until every rank shut down or failed, so a fast rank 0 never strands
    // slower peers (bounded by the shutdown timeout).
    LogInfo("waiting for every rank to finish before stopping the coordination service");
    coordinator.emplace();
    coordinator->stopped_in_time = coordinator_->Stop(config_.settings.timeouts.shutdown);
    coordinator->job_ok = coordinator_->service().JobStatus().ok();
  }
  return ExitCode(trainers, coordinator);
}

void Sidecar::Stop() {
  // A trainer still attached (the sidecar was stopped) is told now; the rest of the grace is
  // for replies in flight.
  for (RankAgent& a : agents_) {
    a.service->DetachTrainer(absl::UnavailableError(
        "its cohort-sidecar was stopped (SIGINT or SIGTERM) while the trainer was attached"));
  }
  const absl::Time grace = absl::Now() + absl::Seconds(1);
  std::error_code ec;
  for (RankAgent& a : agents_) {
    a.server->Shutdown(absl::ToChronoTime(grace));
    std::filesystem::remove(a.socket, ec);
  }
}

}  // namespace cohort::sidecar
