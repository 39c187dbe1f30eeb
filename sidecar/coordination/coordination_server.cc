#include "sidecar/coordination/coordination_server.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace cohort::coordination {
namespace {
// Deadline checks run this often: barrier and get timeouts fire within this of their deadline,
// and a stale heartbeat is declared within heartbeat_timeout + this.
constexpr absl::Duration kCheckInterval = absl::Milliseconds(100);
}  // namespace

CoordinationServer::CoordinationServer(ServerOptions options, Clock* clock)
    : options_(std::move(options)),
      service_(std::make_unique<CoordinationService>(options_.service, clock)),
      rpc_(std::make_unique<CoordinationRpcService>(service_.get(), options_.token)) {}

absl::StatusOr<std::unique_ptr<CoordinationServer>> CoordinationServer::Start(
    ServerOptions options, Clock* clock) {
  std::unique_ptr<CoordinationServer> server(new CoordinationServer(std::move(options), clock));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->options_.listen_address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->rpc_.get());
  builder.SetMaxReceiveMessageSize(16 << 20);
  // Agents ping every 10 s to notice a dead connection; allow it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", server->options_.listen_address,
        " for the coordination service: the port is in use or the address is not local; pick "
        "another coordinator port"));
  }
  server->checker_ = std::thread([s = server.get()] { s->CheckerLoop(); });
  LogInfo("coordination service for ", server->options_.service.num_tasks, " tasks listening on port ",
          server->port_, server->options_.token.empty() ? " (no job token: authentication off)" : "");
  return server;
}

void CoordinationServer::CheckerLoop() {
  pthread_setname_np(pthread_self(), "coord-checker");
  while (!stop_checker_.WaitForNotificationWithTimeout(kCheckInterval)) {
    service_->CheckDeadlines();
  }
}

bool CoordinationServer::Stop(absl::Duration bound) {
  if (stopped_) return true;
  stopped_ = true;
  bool all_done = service_->WaitUntilAllTasksDone(absl::Now() + bound);
  if (!all_done) {
    LogWarning("stopping the coordination service after ", absl::FormatDuration(bound),
               " although some tasks have not shut down");
  }
  // Let in-flight replies (the shutdown barrier's) reach their clients, then cancel the rest
  // (the agents' event streams, which never end by themselves).
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(250)));
  stop_checker_.Notify();
  if (checker_.joinable()) checker_.join();
  return all_done;
}

CoordinationServer::~CoordinationServer() {
  if (!stopped_) {
    stopped_ = true;
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
    stop_checker_.Notify();
    if (checker_.joinable()) checker_.join();
  }
  server_->Wait();
  server_.reset();
  rpc_.reset();
  service_.reset();
}

}  // namespace cohort::coordination
