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
namespace {

// Restarting in place, how long a pod's first attempt waits to hear from the attempt hub.
constexpr absl::Duration kFirstOrderPatience = absl::Seconds(10);

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
        " (COHORT_PROCESS_ID=", rank, ", COHORT_PROCESSES_PER_POD=", per_pod, ") of a job of ", num,
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
    LogWarning(
        "no job token configured (COHORT_TOKEN/COHORT_TOKEN_FILE): RPCs are not "
        "authenticated");
  }
  SidecarConfig config;
  config.settings = *std::move(settings);
  config.processes_per_pod = *per_pod;
  config.agent_socket = *std::move(socket);
  config.launch_socket = !flags.launch_socket.empty() ? flags.launch_socket
                                                      : env::Get(env::kLaunchSocket).value_or("");
  config.flags = std::move(flags);
  return config;
}

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(SidecarConfig config) {
  std::unique_ptr<Sidecar> sidecar(new Sidecar(std::move(config)));
  sidecar->StartMetrics();
  if (absl::Status s = sidecar->StartCoordinator(); !s.ok()) return s;
  if (absl::Status s = sidecar->ServeAgents(); !s.ok()) return s;
  if (absl::Status s = sidecar->StartInPlace(); !s.ok()) return s;
  if (absl::Status s = sidecar->ServeHttp(); !s.ok()) return s;
  sidecar->LogStarted();
  return sidecar;
}

Sidecar::~Sidecar() {
  if (health_)
    health_->Stop();  // Its thread sends through the hub or the follower, which go first.
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

coordination::AgentOptions Sidecar::AgentOptionsFor(int local,
                                                    std::optional<int32_t> attempt) const {
  JobSettings rank_settings = config_.settings;
  rank_settings.process_id = config_.settings.process_id + local;
  if (attempt) rank_settings.restart_attempt = *attempt;
  coordination::AgentOptions options = coordination::AgentOptionsFor(rank_settings);
  // Failure messages name the pod and the process: "rank 5 (pod demo-1, local process 1,
  // pid 812) failed because its process died".
  if (config_.processes_per_pod > 1) {
    options.where = absl::StrCat("pod ", PodName(), ", local process ", local, ",");
  }
  return options;
}

absl::Status Sidecar::ServeAgents() {
  const int per_pod = config_.processes_per_pod;
  for (int local = 0; local < per_pod; ++local) {
    absl::StatusOr<RankAgent> agent =
        ServeRank(env::AgentSocketPath(config_.agent_socket, local, per_pod),
                  AgentOptionsFor(local, std::nullopt), metrics_[local].get());
    if (!agent.ok()) return agent.status();
    agents_.push_back(*std::move(agent));
  }
  return absl::OkStatus();
}

absl::Status Sidecar::StartInPlace() {
  if (config_.launch_socket.empty()) return absl::OkStatus();
  const int32_t first = config_.settings.restart_attempt.value_or(0);
  const bool hub_here = config_.settings.process_id == 0;
  {
    absl::MutexLock lock(&mu_);
    attempt_ = first;
    released_ = hub_here;  // Rank 0's hub runs `first` from the start.
  }
  // Before the hub or its follower, whose orders it carries.
  absl::StatusOr<std::unique_ptr<LaunchChannel>> launch = LaunchChannel::Serve(
      config_.launch_socket, hub_here ? std::optional<int32_t>(first) : std::nullopt,
      [this](const launch::AttemptEnded& ended) { ReportEnded(ended); });
  if (!launch.ok()) return launch.status();
  launch_ = *std::move(launch);
  // A spare that took this pod's slot: cohort-launch hears which pod it now is with every order.
  const std::optional<std::string> spare = env::Get(env::kSpare);
  if (spare) launch_->HoldPodIndex(config_.settings.process_id / config_.processes_per_pod);
  const std::string& coordinator = config_.settings.coordinator_address;
  absl::StatusOr<coordination::HangTimeout> hang_timeout =
      coordination::ParseHangTimeout(env::Get(env::kHangTimeout).value_or("auto"));
  if (!hang_timeout.ok()) return hang_timeout.status();
  if (!hang_timeout->off()) {
    // Before the hub and the follower, whose dump orders it takes.
    HealthWatch::Options options;
    options.agent_socket = config_.agent_socket;
    options.first_rank = config_.settings.process_id;
    options.processes_per_pod = config_.processes_per_pod;
    options.pod_index = config_.settings.process_id / config_.processes_per_pod;
    for (auto& m : metrics_) options.metrics.push_back(m.get());
    options.ask_process = [this](int local, uint64_t id, const std::string& directory) {
      absl::MutexLock lock(&parts_mu_);
      return agents_[local].service->RequestDump(id, directory);
    };
    health_ = std::make_unique<HealthWatch>(std::move(options));
    health_->SetAttempt(first);
  }
  if (hub_here) {
    absl::StatusOr<int> port = env::CoordinatorPort(coordinator);
    if (!port.ok()) return port.status();
    absl::StatusOr<std::unique_ptr<coordination::AttemptHubServer>> hub =
        coordination::AttemptHubServer::Start(
            absl::StrCat(config_.flags.coordinator_bind_address, ":",
                         *port + env::kAttemptControlPortOffset),
            first, config_.settings.token);
    if (!hub.ok()) return hub.status();
    hub_ = *std::move(hub);
    hub_->hub().set_before_start([this](int32_t attempt) { RestartCoordinator(attempt); });
    hub_->hub().set_on_end(
        [this](const coordination::attemptspb::AttemptEnd& end) { TellCoordinator(end); });
    hub_->hub().set_hang_detection(*hang_timeout, env::DumpsDir(config_.agent_socket),
                                   [this](uint64_t dump_id, int32_t attempt) {
                                     if (health_) health_->Dump(dump_id, attempt);
                                   });
    hub_->hub().FollowLocally([this](int32_t attempt) { OnOrder(attempt); });
  } else {
    absl::StatusOr<std::string> address = coordination::AttemptControlAddress(coordinator);
    if (!address.ok()) return address.status();
    const int32_t pod_index = config_.settings.process_id / config_.processes_per_pod;
    auto on_order = [this](const coordination::attemptspb::AttemptOrder& order) {
      OnOrder(order.attempt());
      if (order.dump_id() != 0 && health_) health_->Dump(order.dump_id(), order.attempt());
    };
    // A spare that took this slot follows as the spare holding it (the hub lets no one else).
    follower_ = spare ? coordination::AttemptFollower::Spare(*address, config_.settings.token,
                                                             *spare, on_order, pod_index)
                      : std::make_unique<coordination::AttemptFollower>(
                            *address, config_.settings.token, pod_index, on_order, PodName());
  }
  if (health_) StartHealthWatch();
  return absl::OkStatus();
}

void Sidecar::StartHealthWatch() {
  if (hub_) {
    health_->Start([this](const coordination::attemptspb::ReportHealthRequest& report) {
      hub_->hub().ReportHealth(report, absl::Now());
      hub_->hub().CheckHang(absl::Now());  // Rank 0 drives the detector, once a second.
    });
  } else {
    health_->Start([this](const coordination::attemptspb::ReportHealthRequest& report) {
      // The next report follows in a second: a lost one is not worth a retry.
      if (absl::Status s = follower_->ReportHealth(report); !s.ok()) {
        LogDebug("could not tell the attempt hub how this pod's ranks progress: ", s.ToString());
      }
    });
  }
}

void Sidecar::OnOrder(int32_t attempt) {
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    if (!ordered_ || attempt > *ordered_) ordered_ = attempt;
    release = !released_ && attempt == attempt_;
    released_ |= release;
  }
  if (release) launch_->Order(attempt);  // A later one goes through BeginAttempt.
}

void Sidecar::ReportEnded(const launch::AttemptEnded& ended) {
  coordination::attemptspb::AttemptEnd end;
  end.set_pod_index(config_.settings.process_id / config_.processes_per_pod);
  end.set_attempt(ended.attempt);
  end.set_exit_code(ended.exit_code);
  end.set_reason(ended.reason);
  end.set_message(ended.message);
  end.set_finished_unix_ms(ended.finished_unix_ms);
  LogInfo("restart attempt ", ended.attempt, " of this pod ended: exit code ", ended.exit_code,
          " (", ended.reason, ")");
  if (health_) health_->AttemptEnded(ended.attempt);
  if (hub_) {
    hub_->hub().ReportEnd(end);
  } else if (absl::Status s = follower_->ReportEnd(end); !s.ok()) {
    LogWarning("could not report the end of restart attempt ", ended.attempt,
               " to the attempt hub: ", s.ToString());
  }
}

void Sidecar::TellCoordinator(const coordination::attemptspb::AttemptEnd& end) {
  const ExitKind kind = ClassifyExit(ProcessExit::FromContainer(end.exit_code(), end.reason()));
  // A follower's exit (75) is the job's own doing: nothing to tell.
  if (kind == ExitKind::kSucceeded || kind == ExitKind::kFollowed) return;
  absl::MutexLock lock(&parts_mu_);
  if (!coordinator_ || !coordinator_options_ ||
      coordinator_options_->service.restart_attempt != end.attempt())
    return;
  const coordination::TaskId first = end.pod_index() * config_.processes_per_pod;
  // A preempted rank that had joined told the job itself, and the others may still be saving
  // their checkpoint at the agreed step: only one preempted before it joined (the others wait
  // for it in registration) is news.
  if (kind == ExitKind::kPreempted) {
    const coordination::CoordinationService::Snapshot snapshot =
        coordinator_->service().GetSnapshot();
    for (int local = 0; local < config_.processes_per_pod; ++local) {
      const size_t task = static_cast<size_t>(first + local);
      if (task < snapshot.tasks.size() &&
          snapshot.tasks[task].state != coordination::TaskState::kDisconnected)
        return;
    }
  }
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

void Sidecar::RestartCoordinator(int32_t attempt) {
  absl::MutexLock lock(&parts_mu_);
  if (!coordinator_options_) return;
  if (coordinator_collector_) coordinator_collector_->SetService(nullptr);
  // The old attempt's service goes at once: its tasks' calls fail, and a leftover process of it
  // that calls the new one is turned away (its attempt is older).
  coordinator_.reset();
  coordinator_options_->service.restart_attempt = attempt;
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
  LogInfo("coordination service of restart attempt ", attempt, " started");
}

void Sidecar::BeginAttempt(int32_t attempt) {
  {
    absl::MutexLock lock(&parts_mu_);
    const int per_pod = config_.processes_per_pod;
    for (int local = 0; local < per_pod; ++local) {
      RankAgent& old = agents_[local];
      old.service->Retire(absl::AbortedError(absl::StrCat(
          "restart attempt ", attempt, " began: this process belongs to an older one")));
      // At once: the old attempt's processes are gone (cohort-launch reaped them) or about to be
      // killed; a grace per agent would delay every pod's next attempt by it.
      old.server->Shutdown(absl::ToChronoTime(absl::Now()));
      absl::StatusOr<RankAgent> fresh =
          ServeRank(old.socket, AgentOptionsFor(local, attempt), metrics_[local].get());
      if (!fresh.ok()) {
        LogError("restart attempt ", attempt, ": ", fresh.status().ToString());
        continue;
      }
      agents_[local] = *std::move(fresh);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    attempt_ = attempt;
    released_ = true;
  }
  if (health_) health_->SetAttempt(attempt);
  launch_->Order(attempt);
  LogInfo("restart attempt ", attempt, ": agents ready, cohort-launch told");
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
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = MetricsHttpServer::Start(
      config_.flags.http_address, config_.flags.http_port, collectables, [this]() -> std::string {
        absl::MutexLock lock(&parts_mu_);
        if (config_.settings.process_id == 0 && coordinator_ == nullptr) {
          return "coordination service not running";
        }
        return "";
      });
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
      case SignalAction::kReportPreemptionBeforeAttach: {
        LogInfo(
            AnyTrainer(&AgentRpcService::trainer_attached)
                ? "SIGTERM: reporting a preemption notice and waiting for the trainers to finish"
                : "SIGTERM before a trainer attached: a preemption notice, reported once they have "
                  "joined the job");
        absl::MutexLock parts(&parts_mu_);
        for (RankAgent& a : agents_) a.service->OnPreemptionSignal();
        absl::MutexLock lock(&mu_);
        preempting_ = true;
        break;
      }
      case SignalAction::kStop: {
        LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": exiting");
        absl::MutexLock parts(&parts_mu_);
        for (RankAgent& a : agents_) a.service->StopWaiting();
        absl::MutexLock lock(&mu_);
        stop_ = true;
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
  if (launch_) {
    // The first attempt waits for the hub's order (OnOrder): a hub that says nothing within
    // kFirstOrderPatience (unreachable: the job cannot restart in place anyway) does not hold the
    // processes back; one that runs an earlier attempt does (this pod replaces one alone).
    {
      absl::MutexLock lock(&mu_);
      auto heard = +[](Sidecar* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->released_ || s->ordered_.has_value() || s->stop_ || s->preempting_;
      };
      if (!mu_.AwaitWithTimeout(absl::Condition(heard, this), kFirstOrderPatience)) {
        LogWarning("the attempt hub did not answer within ",
                   absl::FormatDuration(kFirstOrderPatience), ": starting restart attempt ",
                   attempt_, " without its order");
        released_ = true;
        launch_->Order(attempt_);
      }
    }
    // Restarting in place: attempt after attempt until a signal ends it.
    while (true) {
      int32_t next = 0;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Sidecar* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
              return s->stop_ || s->preempting_ || (s->ordered_ && *s->ordered_ > s->attempt_);
            },
            this));
        if (stop_ || preempting_) break;
        next = *ordered_;
      }
      BeginAttempt(next);
    }
    // Preempted (the pod evicted or deleted) before its processes of the attempt started: nobody
    // else can say so, and the other pods' processes would wait for its ranks to join.
    bool never_started = false;
    launch::AttemptEnded ended;
    {
      absl::MutexLock lock(&mu_);
      never_started = preempting_ && !released_;
      ended.attempt = attempt_;
    }
    if (never_started) {
      ended.exit_code = kPreemptedExitCode;
      ended.finished_unix_ms = absl::ToUnixMillis(absl::Now());
      ended.reason = "Preempted";
      ended.message = absl::StrCat("the pod was preempted before its processes of restart attempt ",
                                   ended.attempt, " started");
      ReportEnded(ended);
    }
  }
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
