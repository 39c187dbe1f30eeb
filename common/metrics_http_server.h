#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace cohort {

// /metrics (Prometheus text format of every collectable: prometheus-cpp registries and custom
// collectors), /healthz and /readyz over cpp-httplib, on its own thread pool. `ready` returns ""
// when ready, else the reason shown on /readyz with status 503.
class MetricsHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      std::function<std::string()> ready);
  ~MetricsHttpServer();
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// Registers cohort_build_info{version, component} (always 1).
void AddBuildInfo(prometheus::Registry& registry, const std::string& component);

}  // namespace cohort
