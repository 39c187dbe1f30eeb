// cohort-local-kubelet: one node of the local control plane. cohort-local-cluster starts one per
// node (--nodes); killing one (SIGKILL) loses that node the way a machine is lost: its
// containers die with it (with --runtime podman, a helper process removes its podman pods), its
// Lease stops, and its pods never confirm their deletion. SIGTERM or SIGINT stops its pods'
// containers and exits.
#include <signal.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "kube/http_kube_client.h"
#include "kube/kube_config.h"
#include "localcluster/kubelet/kubelet.h"

namespace cohort::local {
namespace {

struct Flags {
  std::string kubeconfig;
  KubeletOptions options;
  double lease_duration_s = absl::ToDoubleSeconds(options.lease_duration);
  std::string runtime = "process";
  std::string pod_api_server;
};

void AddFlags(CLI::App& app, Flags* f) {
  KubeletOptions& options = f->options;
  app.add_option("--kubeconfig", f->kubeconfig, "How to reach the local API server")->required();
  app.add_option("--node-name", options.node_name,
                 "The Node this kubelet registers and runs pods for")
      ->required();
  app.add_option("--node-address", options.node_address,
                 "The node's address (InternalIP, pods' hostIP)")
      ->capture_default_str();
  app.add_option("--pods-dir", options.root_dir, "Each pod's files and the cluster's hosts file")
      ->required();
  app.add_option("--lease-duration", f->lease_duration_s,
                 "Seconds: the node's Lease is renewed every quarter of this")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--bin-dir", options.bin_dirs, "Searched first for container commands");
  app.add_option("--pod-network-library", options.pod_network_library,
                 "LD_PRELOAD library giving pods their address and DNS names (process runtime)");
  app.add_option("--max-pods", options.max_pods,
                 "Pods this node takes (its allocatable pods); 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--runtime", f->runtime,
                 "How pods run: process (local processes) or podman (containers)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "podman"}));
  app.add_option("--podman-network", options.podman_network,
                 "Podman runtime: the cluster's podman network (pods get their addresses on it)");
  app.add_option("--pod-api-server", f->pod_api_server,
                 "The API server's URL as pods reach it (default: the kubeconfig's server)");
}

// An exit code when the kubelet must not start (--help, or a bad flag).
std::optional<int> ParseFlags(int argc, char** argv, Flags* f) {
  CLI::App app{
      "cohort-local-kubelet: one node of cohort-local-cluster, running its pods as "
      "local processes"};
  AddFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  f->options.lease_duration = absl::Seconds(f->lease_duration_s);
  return std::nullopt;
}

int Run(int argc, char** argv) {
  Flags f;
  if (std::optional<int> exit_code = ParseFlags(argc, argv, &f)) return *exit_code;
  KubeletOptions& options = f.options;
  InitLogging(absl::StrCat("cohort-local-kubelet ", options.node_name));
  sigset_t signals = BlockTerminationSignals();

  absl::StatusOr<kube::KubeConfig> config = kube::LoadKubeConfig(f.kubeconfig);
  if (!config.ok()) {
    std::cerr << "cohort-local-kubelet: " << config.status().message() << "\n";
    return 2;
  }
  options.api_server = f.pod_api_server.empty() ? config->server : f.pod_api_server;
  options.runtime = f.runtime == "podman" ? ContainerRuntime::kPodman : ContainerRuntime::kProcess;
  options.api_ca_pem = config->ca_pem;
  kube::HttpKubeClientOptions client_options;
  client_options.qps = 0;  // The kubelet is not rate limited.
  client_options.user_agent = absl::StrCat("cohort-local-kubelet/", options.node_name);
  absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> client =
      kube::HttpKubeClient::Create(*config, client_options, Clock::Real());
  if (!client.ok()) {
    std::cerr << "cohort-local-kubelet: " << client.status().message() << "\n";
    return 1;
  }
  auto kubelet = std::make_unique<Kubelet>(client->get(), options);
  if (absl::Status s = kubelet->Start(); !s.ok()) {
    std::cerr << "cohort-local-kubelet: cannot register node " << options.node_name << ": "
              << s.message() << "\n";
    return 1;
  }
  LogInfo("node ", options.node_name, " registered; running its pods");
  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("signal ", sig, ": stopping");
  (*client)->CancelWatches();
  kubelet.reset();  // Stops every pod's processes.
  return 0;
}

}  // namespace
}  // namespace cohort::local

int main(int argc, char** argv) { return cohort::local::Run(argc, argv); }
