#include "common/metrics_http_server.h"

#include <prometheus/gauge.h>

#include <httplib.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <pthread.h>

#include "absl/strings/str_cat.h"

namespace cohort {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
    std::function<std::string()> ready) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get("/metrics", [collectables](const httplib::Request&, httplib::Response& res) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& c : collectables) {
      std::vector<prometheus::MetricFamily> more = c->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
    prometheus::TextSerializer serializer;
    res.set_content(serializer.Serialize(families), "text/plain; version=0.0.4");
  });
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->server_->Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
    std::string reason = ready ? ready() : "";
    if (reason.empty()) {
      res.set_content("ok\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(reason + "\n", "text/plain");
    }
  });
  s->server_->set_read_timeout(5, 0);
  s->server_->set_write_timeout(5, 0);
  if (port == 0) {
    s->port_ = s->server_->bind_to_any_port(host);
  } else if (s->server_->bind_to_port(host, port)) {
    s->port_ = port;
  } else {
    s->port_ = -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port,
                                               " for /metrics: the port is in use; pass another "
                                               "--http-port (0 picks a free one)"));
  }
  s->thread_ = std::thread([server = s->server_.get()] {
    pthread_setname_np(pthread_self(), "metrics-http");
    server->listen_after_bind();
  });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void AddBuildInfo(prometheus::Registry& registry, const std::string& component) {
  prometheus::BuildGauge()
      .Name("cohort_build_info")
      .Help("Build information; the value is always 1")
      .Register(registry)
      .Add({{"version", COHORT_VERSION}, {"component", component}})
      .Set(1);
}

}  // namespace cohort
