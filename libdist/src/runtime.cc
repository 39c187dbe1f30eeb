#include "libdist/src/runtime.h"

#include "libdist/src/store.h"

namespace dist::internal {

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const ResolvedOptions& options,
                                                        EventCallback on_event) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  const cohort::JobSettings& job = options.job;
  if (options.mode == Mode::kAgent) {
    rt->sidecar_ = std::make_unique<SidecarClient>(options.agent_socket, job.token);
    absl::Status s = rt->sidecar_->Attach(job.process_id, job.num_processes, job.restart_attempt,
                                          job.timeouts.initialization, std::move(on_event));
    if (!s.ok()) return s;
    rt->client_ = rt->sidecar_.get();
    return rt;
  }

  if (job.process_id == 0) {
    absl::StatusOr<cohort::coordination::ServerOptions> server_options =
        cohort::coordination::ServerOptionsFor(job, "0.0.0.0");
    if (!server_options.ok()) return server_options.status();
    auto server = cohort::coordination::CoordinationServer::Start(*server_options);
    if (!server.ok()) return server.status();
    rt->server_ = std::move(*server);
  }
  rt->agent_ =
      std::make_unique<cohort::coordination::Agent>(cohort::coordination::AgentOptionsFor(job));
  absl::Status s = rt->agent_->Connect(std::move(on_event));
  if (!s.ok()) return s;
  rt->client_ = rt->agent_.get();
  return rt;
}

absl::Status Runtime::Shutdown() {
  absl::Status s = Store(client_).Shutdown();
  if (sidecar_) sidecar_->Detach();
  if (server_) server_->Stop(options_.job.timeouts.shutdown);
  return s;
}

Runtime::~Runtime() {
  agent_.reset();
  sidecar_.reset();
  server_.reset();
}

}  // namespace dist::internal
