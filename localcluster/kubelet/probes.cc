#include "localcluster/kubelet/probes.h"

#include <algorithm>
#include <chrono>

#include <httplib.h>

namespace cohort::local {

using json = nlohmann::json;

void Probe(Container& c, const std::string& address) {
  if (!c.run.running() || absl::Now() < c.next_probe) return;
  const json probe = c.spec.value("readinessProbe", json());
  if (!probe.is_object() || !probe.contains("httpGet")) {
    c.ready = true;
    return;
  }
  const json& get = probe["httpGet"];
  int port = 0;
  if (get["port"].is_number()) {
    port = get["port"].get<int>();
  } else {
    for (const json& p : c.spec.value("ports", json::array())) {
      if (p.value("name", "") == get["port"]) port = p.value("containerPort", 0);
    }
  }
  httplib::Client http(address, port);
  http.set_connection_timeout(std::chrono::seconds(1));
  http.set_read_timeout(std::chrono::seconds(1));
  httplib::Result r = http.Get(get.value("path", "/"));
  c.ready = r && r->status >= 200 && r->status < 400;
  int period = std::clamp(probe.value("periodSeconds", 10), 1, 10);
  c.next_probe = absl::Now() + absl::Seconds(c.ready ? period : 0) + absl::Milliseconds(200);
}

}  // namespace cohort::local
