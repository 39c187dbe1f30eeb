#include "coordination/server/coordination_server.h"

#include <pthread.h>
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/grpc_util.h"
#include "common/log.h"

namespace cohort::coordination {
namespace {
// Deadline checks run this often: barrier and get timeouts fire within this of their deadline,
// and a stale heartbeat is declared within heartbeat_timeout + this.
constexpr absl::Duration kCheckInterval = absl::Milliseconds(100);
}  // namespace

absl::StatusOr<ServerOptions> ServerOptionsFor(const JobSettings& settings,
                                               absl::string_view bind_address) {
  if (settings.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "the coordinator address is not set: set COHORT_COORDINATOR_ADDRESS to host:port of "
        "process 0 (its port is where the coordination service listens)");
  }
  absl::StatusOr<int> port = env::CoordinatorPort(settings.coordinator_address);
  if (!port.ok()) return port.status();
  ServerOptions o;
  o.listen_address = absl::StrCat(bind_address, ":", *port);
  o.service.num_tasks = settings.num_processes;
  o.service.register_timeout = settings.timeouts.initialization;
  o.service.heartbeat_timeout = settings.timeouts.heartbeat;
  o.service.shutdown_timeout = settings.timeouts.shutdown;
  o.service.restart_attempt = settings.restart_attempt;
  o.token = settings.token;
  return o;
}

CoordinationServer::CoordinationServer(ServerOptions options, Clock* clock)
    : options_(std::move(options)),
      service_(std::make_unique<CoordinationService>(options_.service, clock)),
      handler_(std::make_unique<CoordinationRpcHandler>(service_.get(), ReplyBudget::Create())),
      grpc_service_(std::make_unique<CoordinationGrpcService>(handler_.get(), options_.token)) {}

absl::StatusOr<std::unique_ptr<CoordinationServer>> CoordinationServer::Start(ServerOptions options,
                                                                              Clock* clock) {
  std::unique_ptr<CoordinationServer> server(new CoordinationServer(std::move(options), clock));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->options_.listen_address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->grpc_service_.get());
  builder.SetMaxReceiveMessageSize(16 << 20);
  // Agents ping every 10 s to notice a dead connection; allow it.
  AllowClientKeepalive(&builder);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", server->options_.listen_address,
        " for the coordination service: the port is in use or the address is not local; pick "
        "another coordinator port"));
  }
  if (server->options_.attached_port) {
    absl::StatusOr<std::unique_ptr<ServicePort>> port = server->options_.attached_port(
        server->service_.get(), server->handler_->shared_reply_budget());
    if (!port.ok()) {
      server->server_->Shutdown();
      return port.status();
    }
    server->attached_port_ = std::move(*port);
  }
  server->checker_ = std::thread([s = server.get()] { s->CheckerLoop(); });
  LogInfo(
      "coordination service for ", server->options_.service.num_tasks, " tasks listening on port ",
      server->port_, server->options_.token.empty() ? " (no job token: authentication off)" : "",
      server->attached_port_ ? absl::StrCat("; a second port on ", server->attached_port_->port())
                             : "");
  return server;
}

void CoordinationServer::CheckerLoop() {
  pthread_setname_np(pthread_self(), "coord-checker");
  while (!stop_checker_.WaitForNotificationWithTimeout(kCheckInterval)) {
    service_->CheckDeadlines();
  }
}

void CoordinationServer::ShutDownLocked(absl::Duration grace) {
  if (attached_port_) attached_port_->Shutdown(absl::Now() + grace);
  if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  stop_checker_.Notify();
  if (checker_.joinable()) checker_.join();
}

bool CoordinationServer::Stop(absl::Duration bound) {
  absl::MutexLock lock(&stop_mu_);
  if (stop_result_) return *stop_result_;
  stopping_.Notify();
  // After a job failure every live rank was told on its event stream: nothing to wait for.
  bool all_done = service_->WaitUntilJobEnded(absl::Now() + bound);
  if (!all_done) {
    LogWarning("stopping the coordination service after ", absl::FormatDuration(bound),
               " although some tasks have not shut down");
  }
  if (!service_->JobStatus().ok()) {
    // A rank still registering (its pod or process started late) hears of the failure from its
    // next attempt, if the port is still open, instead of finding it closed and retrying until
    // the initialization timeout.
    service_->WaitUntilEveryTaskTold(absl::Now() + std::min(bound, kFailureLinger));
  }
  // Let in-flight replies (the shutdown barrier's) reach their clients, then cancel the rest
  // (the agents' event streams, which never end by themselves).
  ShutDownLocked(absl::Milliseconds(250));
  stop_result_ = all_done;
  return all_done;
}

CoordinationServer::~CoordinationServer() {
  {
    absl::MutexLock lock(&stop_mu_);
    if (!stop_result_) {
      stopping_.Notify();
      ShutDownLocked(absl::ZeroDuration());
      stop_result_ = false;
    }
  }
  if (server_) server_->Wait();  // Null when Start() could not listen.
  server_.reset();
  if (attached_port_) attached_port_->Wait();
  attached_port_.reset();
  grpc_service_.reset();
  handler_.reset();
  service_.reset();
}

}  // namespace cohort::coordination
