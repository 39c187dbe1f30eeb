#include "libdist/src/runtime.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/log.h"

namespace dist::internal {
namespace pb = ::cohort::coordination::v1;

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const ResolvedOptions& options,
                                                        EventCallback on_event) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  if (options.mode == Mode::kAgent) {
    rt->sidecar_ = std::make_unique<SidecarClient>(options.agent_socket, options.token);
    absl::Status s = rt->sidecar_->Attach(options.process_id, options.num_processes,
                                          options.initialization_timeout, std::move(on_event));
    if (!s.ok()) return s;
    rt->control_ = rt->sidecar_.get();
    return rt;
  }

  if (options.process_id == 0) {
    absl::StatusOr<int> port = cohort::env::CoordinatorPort(options.coordinator_address);
    if (!port.ok()) return port.status();
    cohort::coordination::ServerOptions server_options;
    server_options.listen_address = absl::StrCat("0.0.0.0:", *port);
    server_options.service.num_tasks = options.num_processes;
    server_options.service.register_timeout = options.initialization_timeout;
    server_options.service.heartbeat_timeout = options.heartbeat_timeout;
    server_options.service.shutdown_timeout = options.shutdown_timeout;
    server_options.token = options.token;
    auto server = cohort::coordination::CoordinationServer::Start(server_options);
    if (!server.ok()) return server.status();
    rt->server_ = std::move(*server);
  }
  cohort::agent::AgentOptions agent_options;
  agent_options.coordinator_address = options.coordinator_address;
  agent_options.task = options.process_id;
  agent_options.num_tasks = options.num_processes;
  agent_options.token = options.token;
  agent_options.initialization_timeout = options.initialization_timeout;
  agent_options.heartbeat_timeout = options.heartbeat_timeout;
  agent_options.shutdown_timeout = options.shutdown_timeout;
  rt->agent_ = std::make_unique<cohort::agent::Agent>(agent_options);
  absl::Status s = rt->agent_->Connect(std::move(on_event));
  if (!s.ok()) return s;
  rt->control_ = rt->agent_.get();
  return rt;
}

absl::Status Runtime::Shutdown() {
  std::promise<absl::Status> promise;
  control_->Shutdown([&promise](absl::Status s, const pb::ShutdownTaskResponse&) {
    promise.set_value(s);
  });
  absl::Status s = promise.get_future().get();
  if (sidecar_) sidecar_->Detach();
  if (server_) server_->Stop(options_.shutdown_timeout);
  return s;
}

Runtime::~Runtime() {
  agent_.reset();
  sidecar_.reset();
  server_.reset();
}

}  // namespace dist::internal
