// cohort-local-cluster: a one-machine Kubernetes for tests and demos. It serves the API subset
// that cohort-operator and kubectl use, writes a kubeconfig for it, and runs a kubelet that
// starts each pod's containers as local processes on their own loopback address. Runs until
// SIGTERM or SIGINT.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/token.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/kubelet/kubelet.h"
#include "operator/client/http_kube_client.h"

namespace cohort::local {
namespace {

int Run(int argc, char** argv) {
  InitLogging("cohort-local-cluster");
  std::string dir;
  int port = 0;
  bool http = false;
  bool no_kubelet = false;
  std::vector<std::string> bin_dirs;
  std::string pod_network_library;
  // Defaults next to this binary: build/bin and build/lib.
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  bin_dirs.push_back(self.string());
  pod_network_library = (self.parent_path() / "lib" / "libcohort-pod-network.so").string();
  CLI::App app{"cohort-local-cluster: a local Kubernetes API server and kubelet for Cohort's tests and demo"};
  app.add_option("--dir", dir, "State directory: the kubeconfig and each pod's files go here")->required();
  app.add_option("--port", port, "API server port on 127.0.0.1; 0 picks a free one")->capture_default_str();
  app.add_flag("--http", http, "Serve plain HTTP instead of HTTPS with a self-signed certificate");
  app.add_flag("--no-kubelet", no_kubelet, "Serve the API only; pods stay Pending");
  app.add_option("--bin-dir", bin_dirs, "Searched first for container commands")->capture_default_str();
  app.add_option("--pod-network-library", pod_network_library,
                 "LD_PRELOAD library giving pods their address and DNS names")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  sigset_t signals = BlockTerminationSignals();

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "cohort-local-cluster: cannot create --dir " << dir << ": " << ec.message() << "\n";
    return 2;
  }
  ApiServerOptions options;
  options.port = port;
  options.tls = !http;
  options.token = GenerateToken();
  const std::string pods_dir = (std::filesystem::path(dir) / "pods").string();
  if (!no_kubelet) {
    options.pod_logs = [pods_dir](const std::string& ns, const std::string& pod,
                                  const std::string& container) -> absl::StatusOr<std::string> {
      std::ifstream in(Kubelet::LogPath(pods_dir, ns, pod, container), std::ios::binary);
      if (!in) {
        return absl::NotFoundError(absl::StrCat("container \"", container, "\" of pod ", ns, "/", pod,
                                                " has no output yet (not started, or no such container)"));
      }
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
  }
  absl::StatusOr<std::unique_ptr<ApiServer>> server = ApiServer::Start(options, Clock::Real());
  if (!server.ok()) {
    std::cerr << "cohort-local-cluster: " << server.status().message() << "\n";
    return 1;
  }
  std::string kubeconfig = (std::filesystem::path(dir) / "kubeconfig").string();
  {
    std::ofstream out(kubeconfig + ".tmp");
    out << (*server)->Kubeconfig();
  }
  std::filesystem::rename(kubeconfig + ".tmp", kubeconfig, ec);
  std::cout << "cohort-local-cluster: API server at " << (*server)->url() << "; kubeconfig " << kubeconfig
            << std::endl;

  std::unique_ptr<op::HttpKubeClient> client;
  std::unique_ptr<Kubelet> kubelet;
  if (!no_kubelet) {
    op::KubeConfig config;
    config.server = (*server)->url();
    config.ca_pem = (*server)->ca_pem();
    config.token = options.token;
    op::HttpKubeClientOptions client_options;
    client_options.qps = 0;  // The kubelet is not rate limited.
    client_options.user_agent = "cohort-local-kubelet";
    absl::StatusOr<std::unique_ptr<op::HttpKubeClient>> c =
        op::HttpKubeClient::Create(config, client_options, Clock::Real());
    if (!c.ok()) {
      std::cerr << "cohort-local-cluster: kubelet client: " << c.status().message() << "\n";
      return 1;
    }
    client = *std::move(c);
    KubeletOptions kubelet_options;
    kubelet_options.root_dir = pods_dir;
    kubelet_options.bin_dirs = bin_dirs;
    if (std::filesystem::exists(pod_network_library)) {
      kubelet_options.pod_network_library = pod_network_library;
    } else {
      LogWarning("no pod-network library at ", pod_network_library,
                 ": pods share the machine's addresses and cannot resolve cluster DNS names");
    }
    kubelet = std::make_unique<Kubelet>(client.get(), kubelet_options);
    if (absl::Status s = kubelet->Start(); !s.ok()) {
      std::cerr << "cohort-local-cluster: kubelet: " << s.message() << "\n";
      return 1;
    }
  }
  std::cout << "cohort-local-cluster: ready" << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("signal ", sig, ": stopping");
  if (client) client->CancelWatches();
  kubelet.reset();  // Stops every pod's processes.
  return 0;
}

}  // namespace
}  // namespace cohort::local

int main(int argc, char** argv) { return cohort::local::Run(argc, argv); }
