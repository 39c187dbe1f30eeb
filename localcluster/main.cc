// cohort-local-cluster: a one-machine Kubernetes for tests and demos. It serves the API subset
// that cohort-operator and kubectl use, writes a kubeconfig for it, schedules pods onto its
// nodes (each node a cohort-local-kubelet process that starts each pod's containers as local
// processes on their own loopback address or, with --runtime podman, as podman containers on a
// network of the cluster's own), and marks a node whose kubelet stopped renewing its Lease as
// lost. Runs until SIGTERM or SIGINT.
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
#include "common/subprocess.h"
#include "localcluster/controllers/deployment_controller.h"
#include "localcluster/controllers/node_lifecycle.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/podman.h"
#include "localcluster/controllers/scheduler.h"
#include "operator/client/http_kube_client.h"

namespace cohort::local {
namespace {

int Run(int argc, char** argv) {
  InitLogging("cohort-local-cluster");
  std::string dir;
  int port = 0;
  bool http = false;
  bool no_kubelet = false;
  int nodes = 1;
  double node_grace_s = 40;
  std::vector<std::string> bin_dirs;
  std::string pod_network_library;
  std::string runtime = "process";
  int64_t max_pods = 0;
  // Defaults next to this binary: build/bin and build/lib.
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  bin_dirs.push_back(self.string());
  pod_network_library = (self.parent_path() / "lib" / "libcohort-pod-network.so").string();
  CLI::App app{"cohort-local-cluster: a local Kubernetes API server and kubelet for Cohort's tests and demo"};
  app.add_option("--dir", dir, "State directory: the kubeconfig and each pod's files go here")->required();
  app.add_option("--port", port, "API server port on 127.0.0.1; 0 picks a free one")->capture_default_str();
  app.add_flag("--http", http, "Serve plain HTTP instead of HTTPS with a self-signed certificate");
  app.add_option("--nodes", nodes,
                 "Nodes, each a cohort-local-kubelet process (node-0, node-1, ...); pods spread over them")
      ->capture_default_str()
      ->check(CLI::Range(0, 60));
  app.add_option("--node-monitor-grace-period", node_grace_s,
                 "Seconds without a Lease renewal before a node is marked lost (Ready=Unknown)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-pods", max_pods,
                 "Pods each node takes (its Node's allocatable pods); more stay Pending, Unschedulable. 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-kubelet", no_kubelet, "Serve the API only (same as --nodes 0); pods stay Pending");
  app.add_option("--runtime", runtime,
                 "How kubelets run pods: process (local processes, the image naming the program) or podman "
                 "(real containers from the local image store; docs/operator.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "podman"}));
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
  // Podman: the cluster's network (pods' addresses), and the API server reachable from it.
  const bool podman = runtime == "podman" && !no_kubelet && nodes > 0;
  PodmanNetwork network;
  struct NetworkRemover {
    std::string name;
    ~NetworkRemover() {
      if (!name.empty()) RemoveNetwork(name);
    }
  } network_remover;
  ApiServerOptions options;
  if (podman) {
    if (absl::Status s = CheckPodman(); !s.ok()) {
      std::cerr << "cohort-local-cluster: --runtime podman: " << s.message() << "\n";
      return 2;
    }
    absl::StatusOr<PodmanNetwork> created = CreateClusterNetwork(absl::StrCat("cohort-", GenerateToken().substr(0, 10)));
    if (!created.ok()) {
      std::cerr << "cohort-local-cluster: --runtime podman: " << created.status().message() << "\n";
      return 1;
    }
    network = *created;
    network_remover.name = network.name;
    std::ofstream(std::filesystem::path(dir) / "podman-network") << network.name << "\n";
    options.host = "0.0.0.0";  // The gateway's interface appears only with the first pod.
    options.certificate_addresses = {network.gateway};
  }
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

  if (no_kubelet) nodes = 0;
  std::unique_ptr<op::HttpKubeClient> client;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<NodeLifecycleController> node_lifecycle;
  std::unique_ptr<DeploymentController> deployments;
  std::vector<Subprocess> kubelets;
  if (nodes > 0) {
    op::KubeConfig config;
    config.server = (*server)->url();
    config.ca_pem = (*server)->ca_pem();
    config.token = options.token;
    op::HttpKubeClientOptions client_options;
    client_options.qps = 0;  // The control plane is not rate limited.
    client_options.user_agent = "cohort-local-controllers";
    absl::StatusOr<std::unique_ptr<op::HttpKubeClient>> c =
        op::HttpKubeClient::Create(config, client_options, Clock::Real());
    if (!c.ok()) {
      std::cerr << "cohort-local-cluster: controllers' client: " << c.status().message() << "\n";
      return 1;
    }
    client = *std::move(c);
    // Each node its own pod subnets (127.0.<third>.x), out of 127.0.10-249.
    const int block = 240 / nodes;
    SchedulerOptions scheduler_options;
    scheduler_options.hosts_file = (std::filesystem::path(pods_dir) / "hosts").string();
    std::filesystem::create_directories(pods_dir);
    for (int k = 0; k < nodes; ++k) {
      scheduler_options.subnets[absl::StrCat("node-", k)] =
          PodSubnet{10 + k * block, 10 + (k + 1) * block - 1, podman ? network.prefix : "127.0."};
    }
    scheduler = std::make_unique<Scheduler>(client.get(), scheduler_options);
    scheduler->Start();
    node_lifecycle = std::make_unique<NodeLifecycleController>(client.get(), absl::Seconds(node_grace_s));
    node_lifecycle->Start();
    deployments = std::make_unique<DeploymentController>(client.get());
    deployments->Start();
    if (!podman && !std::filesystem::exists(pod_network_library)) {
      LogWarning("no pod-network library at ", pod_network_library,
                 ": pods share the machine's addresses and cannot resolve cluster DNS names");
      pod_network_library.clear();
    }
    for (int k = 0; k < nodes; ++k) {
      const std::string node = absl::StrCat("node-", k);
      std::vector<std::string> argv = {(self / "cohort-local-kubelet").string(),
                                       "--kubeconfig", kubeconfig,
                                       "--node-name", node,
                                       "--node-address", podman ? network.gateway : absl::StrCat("127.0.1.", k + 1),
                                       "--pods-dir", pods_dir,
                                       "--lease-duration", absl::StrCat(node_grace_s),
                                       "--max-pods", absl::StrCat(max_pods)};
      for (const std::string& d : bin_dirs) argv.insert(argv.end(), {"--bin-dir", d});
      if (podman) {
        argv.insert(argv.end(), {"--runtime", "podman", "--podman-network", network.name, "--pod-api-server",
                                 absl::StrCat(options.tls ? "https://" : "http://", network.gateway, ":", (*server)->port())});
      } else if (!pod_network_library.empty()) {
        argv.insert(argv.end(), {"--pod-network-library", pod_network_library});
      }
      Subprocess::Options kubelet_options;
      kubelet_options.argv = argv;
      kubelet_options.capture_output = false;  // Its log lines join ours, named by node.
      kubelet_options.die_with_parent = true;
      absl::StatusOr<Subprocess> kubelet = Subprocess::Start(kubelet_options);
      if (!kubelet.ok()) {
        std::cerr << "cohort-local-cluster: cannot start the kubelet of " << node << ": " << kubelet.status().message()
                  << "\n";
        return 1;
      }
      // A test loses this node with: kill -9 $(cat <dir>/nodes/<node>/kubelet.pid)
      std::filesystem::path node_dir = std::filesystem::path(dir) / "nodes" / node;
      std::filesystem::create_directories(node_dir);
      std::ofstream(node_dir / "kubelet.pid") << kubelet->pid() << "\n";
      kubelets.push_back(*std::move(kubelet));
    }
    if (!scheduler->WaitForReadyNodes(nodes, absl::Seconds(60))) {
      std::cerr << "cohort-local-cluster: the nodes did not all report Ready within 60 s (see the kubelets' "
                   "lines above)\n";
      return 1;
    }
  }
  std::cout << "cohort-local-cluster: ready (" << nodes << (nodes == 1 ? " node" : " nodes")
            << (podman ? absl::StrCat(", pods as podman containers on network ", network.name) : "") << ")"
            << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("signal ", sig, ": stopping");
  // Each kubelet stops its pods' processes; one that was killed (a lost node) is only reaped.
  for (Subprocess& k : kubelets) k.Signal(SIGTERM);
  for (Subprocess& k : kubelets) k.Wait();
  if (client) client->CancelWatches();
  node_lifecycle.reset();
  scheduler.reset();
  return 0;
}

}  // namespace
}  // namespace cohort::local

int main(int argc, char** argv) { return cohort::local::Run(argc, argv); }
