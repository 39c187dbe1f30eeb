#include "sidecar/sidecar.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/exit_codes.h"
#include "common/files.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/client/agent.h"
#include "coordination/server/jax_compat_service.h"
#include "sidecar/sidecar_policy.h"

namespace cohort::sidecar {
absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(SidecarConfig config) {
  std::unique_ptr<Sidecar> sidecar(new Sidecar(std::move(config)));
  sidecar->StartMetrics();
  if (absl::Status s = sidecar->StartCoordinator(); !s.ok()) return s;
  if (absl::Status s = sidecar->ServeAgents(); !s.ok()) return s;
  if (absl::Status s = sidecar->StartAttemptRunner(); !s.ok()) return s;
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
  http_.reset();    // Its readiness asks the runner.
  runner_.reset();  // Its threads call back into the agents and the coordination service.
}

void Sidecar::StartMetrics() {
  registry_ = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry_, "sidecar");
  jax_metrics_ = std::make_unique<JaxPortMetrics>(*registry_);
  if (!config_.spare.empty()) return;  // No rank to count for.
  const int rank = config_.settings.process_id;
  for (int local = 0; local < config_.processes_per_pod; ++local) {
    metrics_.push_back(std::make_unique<SidecarMetrics>(*registry_, rank + local));
  }
  metrics_[0]->SetJob(config_.settings.num_processes, config_.settings.timeouts.heartbeat);
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
  coordinator_options_ = *std::move(options);
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
  jax.on_rpc = [metrics = jax_metrics_.get()](absl::string_view protocol, absl::string_view method,
                                              absl::StatusCode code,
                                              std::optional<absl::Duration> waited) {
    metrics->Count(protocol, method, code, waited);
  };
  if (jax_port) {
    options->attached_port = coordination::JaxPortStarter(
        absl::StrCat(f.coordinator_bind_address, ":", *jax_port), std::move(jax));
  }
  return absl::OkStatus();
}

coordination::AgentOptions Sidecar::AgentOptionsFor(int local, const AttemptPlace* place) const {
  JobSettings rank_settings = config_.settings;
  rank_settings.process_id = config_.settings.process_id + local;
  if (place != nullptr) {
    rank_settings.restart_attempt = place->attempt;
    rank_settings.process_id = place->first_rank + local;
    rank_settings.num_processes = place->num_processes;
  }
  coordination::AgentOptions options = coordination::AgentOptionsFor(rank_settings);
  // Failure messages name the pod and the process: "rank 5 (pod demo-1, local process 1,
  // pid 812) failed because its process died".
  if (config_.processes_per_pod > 1) {
    options.where = absl::StrCat("pod ", PodName(), ", local process ", local, ",");
  }
  return options;
}

absl::Status Sidecar::ServeAgents() {
  if (!config_.spare.empty()) return absl::OkStatus();
  const int per_pod = config_.processes_per_pod;
  for (int local = 0; local < per_pod; ++local) {
    absl::StatusOr<RankAgent> agent =
        ServeRank(env::AgentSocketPath(config_.agent_socket, local, per_pod),
                  AgentOptionsFor(local, nullptr), metrics_[local].get());
    if (!agent.ok()) return agent.status();
    agents_.push_back(*std::move(agent));
  }
  return absl::OkStatus();
}

absl::Status Sidecar::StartAttemptRunner() {
  if (config_.launch_socket.empty()) return absl::OkStatus();
  AttemptRunner::Hooks hooks;
  hooks.restart_coordinator = [this](const AttemptPlace& place) { RestartCoordinator(place); };
  hooks.renew_agents = [this](const AttemptPlace& place) { RenewAgents(place); };
  hooks.on_end = [this](const coordination::attemptspb::AttemptEnd& end) { TellCoordinator(end); };
  hooks.drain = [this](int32_t attempt) { DrainCoordinator(attempt); };
  hooks.ask_process = [this](int local, uint64_t id, const std::string& directory) {
    absl::MutexLock lock(&parts_mu_);
    return agents_[local].service->RequestDump(id, directory);
  };
  std::vector<SidecarMetrics*> metrics;
  for (auto& m : metrics_) metrics.push_back(m.get());
  absl::StatusOr<std::unique_ptr<AttemptRunner>> runner =
      AttemptRunner::Start(config_, std::move(metrics), std::move(hooks));
  if (!runner.ok()) return runner.status();
  runner_ = *std::move(runner);
  return absl::OkStatus();
}

void Sidecar::TellCoordinator(const coordination::attemptspb::AttemptEnd& end) {
  const ExitKind kind = ClassifyExit(ProcessExit::FromContainer(end.exit_code(), end.reason()));
  if (!ShouldTellCoordinator(kind, /*joined=*/false)) return;  // Not news whoever joined.
  absl::MutexLock lock(&parts_mu_);
  if (!coordinator_ || !coordinator_options_ ||
      coordinator_options_->service.restart_attempt != end.attempt())
    return;
  // The pod's first rank in the attempt (an elastic job's may place it elsewhere, or not run it).
  coordination::TaskId first = end.pod_index() * config_.processes_per_pod;
  if (coordinator_layout_) {
    std::optional<int32_t> position = coordinator_layout_->Position(end.pod_index());
    if (!position) return;  // The attempt runs without that pod.
    first = *position * config_.processes_per_pod;
  }
  bool joined = false;  // Any of the pod's processes registered with the attempt's service.
  if (kind == ExitKind::kPreempted) {
    const coordination::CoordinationService::Snapshot snapshot =
        coordinator_->service().GetSnapshot();
    for (int local = 0; local < config_.processes_per_pod; ++local) {
      const size_t task = static_cast<size_t>(first + local);
      joined |= task < snapshot.tasks.size() &&
                snapshot.tasks[task].state != coordination::TaskState::kDisconnected;
    }
  }
  if (!ShouldTellCoordinator(kind, joined)) return;
  absl::string_view last_line = end.message();
  if (size_t nl = last_line.rfind('\n'); nl != absl::string_view::npos)
    last_line.remove_prefix(nl + 1);
  // Its sidecar tells the service when a process it serves dies; one that died before it joined
  // (killed at once) is known only here. The service fails the job once: a later report is moot.
  coordinator_->service()
      .ReportError(first, coordination::kObserverIncarnation, FailureCauseOf(kind),
                   absl::StrCat("pod ", end.pod_index(), "'s processes of restart attempt ",
                                end.attempt(), " ended: ", last_line))
      .IgnoreError();
}

void Sidecar::DrainCoordinator(int32_t attempt) {
  absl::MutexLock lock(&parts_mu_);
  if (!coordinator_ || !coordinator_options_ ||
      coordinator_options_->service.restart_attempt != attempt) {
    return;
  }
  // As a preemption notice about rank 0 from outside its process: every rank hears it.
  absl::Status s = coordinator_->service().ReportPreemption(0, coordination::kObserverIncarnation);
  if (s.ok()) {
    LogInfo("restart attempt ", attempt,
            " drains: a preemption notice went to every rank (they stop at the sync point)");
  } else {
    LogWarning("restart attempt ", attempt, " cannot drain: ", s.message());
  }
}

void Sidecar::RestartCoordinator(const AttemptPlace& place) {
  const int32_t attempt = place.attempt;
  absl::MutexLock lock(&parts_mu_);
  if (!coordinator_options_) return;
  if (coordinator_collector_) coordinator_collector_->SetService(nullptr);
  // The old attempt's service goes at once: its tasks' calls fail, and a leftover process of it
  // that calls the new one is turned away (its attempt is older).
  coordinator_.reset();
  coordinator_options_->service.restart_attempt = attempt;
  coordinator_options_->service.num_tasks = place.num_processes;
  coordinator_layout_ = place.layout;
  absl::StatusOr<std::unique_ptr<coordination::CoordinationServer>> server =
      coordination::CoordinationServer::Start(*coordinator_options_);
  for (int tries = 1; !server.ok() && tries < 20; ++tries) {  // The port is free a moment later.
    absl::SleepFor(absl::Milliseconds(50));
    server = coordination::CoordinationServer::Start(*coordinator_options_);
  }
  if (!server.ok()) {
    LogError("cannot start the coordination service of restart attempt ", attempt, ": ",
             server.status().ToString());
    return;
  }
  coordinator_ = *std::move(server);
  if (coordinator_collector_) coordinator_collector_->SetService(&coordinator_->service());
  LogInfo("coordination service of restart attempt ", attempt, " started",
          place.layout ? absl::StrCat(" for ", place.num_processes, " processes (",
                                      place.layout->Describe(), ")")
                       : std::string());
}

void Sidecar::RenewAgents(const AttemptPlace& place) {
  const int32_t attempt = place.attempt;
  absl::MutexLock lock(&parts_mu_);
  const int per_pod = config_.processes_per_pod;
  for (int local = 0; local < per_pod; ++local) {
    RankAgent& old = agents_[local];
    old.service->Retire(absl::AbortedError(
        absl::StrCat("restart attempt ", attempt, " began: this process belongs to an older one")));
    // At once: the old attempt's processes are gone (cohort-launch reaped them) or about to be
    // killed; a grace per agent would delay every pod's next attempt by it.
    old.server->Shutdown(absl::ToChronoTime(absl::Now()));
    absl::StatusOr<RankAgent> fresh =
        ServeRank(old.socket, AgentOptionsFor(local, &place), metrics_[local].get());
    if (!fresh.ok()) {
      LogError("restart attempt ", attempt, ": ", fresh.status().ToString());
      continue;
    }
    agents_[local] = *std::move(fresh);
  }
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
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve the agent socket ", socket,
                     ": check that its directory exists and is writable"));
  }
  return a;
}

absl::Status Sidecar::ServeHttp() {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {registry_};
  if (coordinator_) {
    coordinator_collector_ = std::make_shared<CoordinatorCollector>(
        &coordinator_->service(), config_.flags.per_rank_metrics_limit);
    collectables.push_back(coordinator_collector_);
  }
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
      MetricsHttpServer::Start(config_.flags.http_address, config_.flags.http_port, collectables,
                               [this] { return NotReady(); });
  if (!http.ok()) return http.status();
  http_ = *std::move(http);
  if (const std::string& file = config_.flags.http_port_file; !file.empty()) {
    // At once, so that a reader never sees half a port.
    if (absl::Status s = WriteFileAtomically(file, absl::StrCat(http_->port(), "\n")); !s.ok()) {
      LogWarning("--http-port-file: ", s.message());
    }
  }
  return absl::OkStatus();
}

std::string Sidecar::NotReady() const {
  if (!config_.spare.empty()) {
    return runner_ != nullptr && runner_->following()
               ? ""
               : "the spare does not follow the job's attempt hub yet";
  }
  absl::MutexLock lock(&parts_mu_);
  if (config_.settings.process_id == 0 && coordinator_ == nullptr)
    return "coordination service not running";
  return "";
}

void Sidecar::LogStarted() const {
  if (!config_.spare.empty()) {
    LogInfo("spare ", config_.spare, ": holding no rank; following the attempt hub at ",
            runner_->hub_address(), ", metrics on port ", http_->port());
    return;
  }
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
    // A spare holds no rank: any signal ends it.
    const SignalAction action =
        !config_.spare.empty()
            ? SignalAction::kStop
            : OnSignal(sig, count, AnyTrainer(&AgentRpcService::trainer_attached),
                       config_.flags.preempt_before_attach,
                       AnyTrainer(&AgentRpcService::trainer_ever_attached));
    switch (action) {
      case SignalAction::kReportPreemption:
      case SignalAction::kReportPreemptionBeforeAttach: {
        LogInfo(
            AnyTrainer(&AgentRpcService::trainer_attached)
                ? "SIGTERM: reporting a preemption notice and waiting for the trainers to finish"
                : "SIGTERM before a trainer attached: a preemption notice, reported once they have "
                  "joined the job");
        absl::MutexLock parts(&parts_mu_);
        for (RankAgent& a : agents_) a.service->OnPreemptionSignal();
        if (runner_) runner_->Preempting();
        break;
      }
      case SignalAction::kStop: {
        LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": exiting",
                config_.spare.empty() ? "" : ", no rank held");
        absl::MutexLock parts(&parts_mu_);
        for (RankAgent& a : agents_) a.service->StopWaiting();
        if (runner_) runner_->Stop();
        return;
      }
    }
  }
}

bool Sidecar::AnyTrainer(bool (AgentRpcService::*state)() const) const {
  absl::MutexLock lock(&parts_mu_);
  for (const RankAgent& a : agents_) {
    if ((*a.service.*state)()) return true;
  }
  return false;
}

int Sidecar::WaitForTrainers() {
  if (runner_) runner_->Run();  // Attempt after attempt until a signal ends it.
  std::vector<TrainerEnd> trainers;
  for (RankAgent& a : agents_) {
    TrainerEnd end;
    end.outcome = a.service->WaitForTrainer(absl::InfiniteFuture());
    end.ever_attached = a.service->trainer_ever_attached();
    trainers.push_back(end);
  }
  std::optional<CoordinatorEnd> coordinator;
  absl::MutexLock parts(&parts_mu_);
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

std::optional<SpareSlot> Sidecar::WaitForSlot() {
  if (runner_ == nullptr) return std::nullopt;
  return runner_->AwaitSlot();
}

void Sidecar::ReleaseForExec() {
  http_.reset();  // First: its readiness asks the runner.
  std::unique_ptr<AttemptRunner> runner;
  {
    absl::MutexLock lock(&parts_mu_);  // The signal thread may be telling it to stop.
    runner = std::move(runner_);
  }
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
