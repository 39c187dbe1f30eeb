// cohort-local-cluster: a one-machine Kubernetes for tests and demos. It serves the API subset
// that cohort-operator and kubectl use, writes a kubeconfig for it, schedules pods onto its
// nodes (each node a cohort-local-kubelet process that starts each pod's containers as local
// processes on their own loopback address or, with --runtime podman, as podman containers on a
// network of the cluster's own), and marks a node whose kubelet stopped renewing its Lease as
// lost. Runs until SIGTERM or SIGINT.
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "common/signals.h"
#include "common/token.h"
#include "kube/http_kube_client.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/controllers/deployment_controller.h"
#include "localcluster/controllers/node_lifecycle.h"
#include "localcluster/controllers/scheduler.h"
#include "localcluster/kubelet/kubelet.h"
#include "localcluster/kubelet/podman.h"

namespace cohort::local {
namespace {

struct Flags {
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
};

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("--dir", f->dir, "State directory: the kubeconfig and each pod's files go here")
      ->required();
  app.add_option("--port", f->port, "API server port on 127.0.0.1; 0 picks a free one")
      ->capture_default_str();
  app.add_flag("--http", f->http,
               "Serve plain HTTP instead of HTTPS with a self-signed certificate");
  app.add_option("--nodes", f->nodes,
                 "Nodes, each a cohort-local-kubelet process (node-0, node-1, ...); pods spread "
                 "over them")
      ->capture_default_str()
      ->check(CLI::Range(0, 60));
  app.add_option("--node-monitor-grace-period", f->node_grace_s,
                 "Seconds without a Lease renewal before a node is marked lost (Ready=Unknown)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-pods", f->max_pods,
                 "Pods each node takes (its Node's allocatable pods); more stay Pending, "
                 "Unschedulable. 0: no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-kubelet", f->no_kubelet,
               "Serve the API only (same as --nodes 0); pods stay Pending");
  app.add_option("--runtime", f->runtime,
                 "How kubelets run pods: process (local processes, the image naming the program) "
                 "or podman (real containers from the local image store; docs/operator.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "podman"}));
  app.add_option("--bin-dir", f->bin_dirs, "Searched first for container commands")
      ->capture_default_str();
  app.add_option("--pod-network-library", f->pod_network_library,
                 "LD_PRELOAD library giving pods their address and DNS names")
      ->capture_default_str();
}

// `self` is this binary's directory. An exit code when the cluster must not start (--help, or
// a bad flag).
std::optional<int> ParseFlags(int argc, char** argv, const std::filesystem::path& self, Flags* f) {
  // Defaults next to this binary: build/bin and build/lib.
  f->bin_dirs.push_back(self.string());
  f->pod_network_library = (self.parent_path() / "lib" / "libcohort-pod-network.so").string();
  CLI::App app{
      "cohort-local-cluster: a local Kubernetes API server and kubelet for Cohort's "
      "tests and demo"};
  AddFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

// Removes the cluster's podman network when the cluster stops, however it stops.
struct NetworkRemover {
  std::string name;
  ~NetworkRemover() {
    if (!name.empty()) RemoveNetwork(name);
  }
};

// Podman: the cluster's network (pods' addresses), and the API server reachable from it. An exit
// code when it cannot be made.
std::optional<int> CreatePodmanNetwork(const std::string& dir, PodmanNetwork* network,
                                       NetworkRemover* remover, ApiServerOptions* options) {
  if (absl::Status s = CheckPodman(); !s.ok()) {
    std::cerr << "cohort-local-cluster: --runtime podman: " << s.message() << "\n";
    return 2;
  }
  absl::StatusOr<PodmanNetwork> created =
      CreateClusterNetwork(absl::StrCat("cohort-", GenerateToken().substr(0, 10)));
  if (!created.ok()) {
    std::cerr << "cohort-local-cluster: --runtime podman: " << created.status().message() << "\n";
    return 1;
  }
  *network = *created;
  remover->name = network->name;
  std::ofstream(std::filesystem::path(dir) / "podman-network") << network->name << "\n";
  options->host = "0.0.0.0";  // The gateway's interface appears only with the first pod.
  options->certificate_addresses = {network->gateway};
  return std::nullopt;
}

// `kubectl logs`: the container's output file, as the kubelet writes it under `pods_dir`.
absl::StatusOr<std::string> PodLogs(const std::string& pods_dir, const std::string& ns,
                                    const std::string& pod, const std::string& container) {
  std::ifstream in(Kubelet::LogPath(pods_dir, ns, pod, container), std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("container \"", container, "\" of pod ", ns, "/", pod,
                     " has no output yet (not started, or no such container)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes the server's kubeconfig into `dir` (whole or not at all) and returns its path.
std::string WriteKubeconfig(const std::string& dir, const ApiServer& server) {
  std::string kubeconfig = (std::filesystem::path(dir) / "kubeconfig").string();
  {
    std::ofstream out(kubeconfig + ".tmp");
    out << server.Kubeconfig();
  }
  std::error_code ec;
  std::filesystem::rename(kubeconfig + ".tmp", kubeconfig, ec);
  return kubeconfig;
}

// The nodes' side of the cluster: the controllers and a kubelet process per node. Declared in
// the order they start, so that they stop the other way round.
struct Nodes {
  std::unique_ptr<kube::HttpKubeClient> client;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<NodeLifecycleController> node_lifecycle;
  std::unique_ptr<DeploymentController> deployments;
  std::vector<Subprocess> kubelets;
};

// Where the nodes' pods go and how they reach the cluster.
struct NodeSetup {
  int nodes = 0;
  std::string pods_dir;
  std::string kubeconfig;
  const PodmanNetwork* network = nullptr;  // Null: pods are local processes.
  std::string pod_api_server;              // Podman: the API server as pods reach it.
};

// The scheduler, node lifecycle and Deployment controllers, on a client of their own. False
// (the reason printed) when the client cannot be made.
bool StartControllers(const Flags& f, const ApiServer& server, const std::string& token,
                      const NodeSetup& setup, Nodes* out) {
  kube::KubeConfig config;
  config.server = server.url();
  config.ca_pem = server.ca_pem();
  config.token = token;
  kube::HttpKubeClientOptions client_options;
  client_options.qps = 0;  // The control plane is not rate limited.
  client_options.user_agent = "cohort-local-controllers";
  absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> c =
      kube::HttpKubeClient::Create(config, client_options, Clock::Real());
  if (!c.ok()) {
    std::cerr << "cohort-local-cluster: controllers' client: " << c.status().message() << "\n";
    return false;
  }
  out->client = *std::move(c);
  // Each node its own pod subnets (127.0.<third>.x), out of 127.0.10-249.
  const int block = 240 / setup.nodes;
  SchedulerOptions scheduler_options;
  scheduler_options.hosts_file = (std::filesystem::path(setup.pods_dir) / "hosts").string();
  std::filesystem::create_directories(setup.pods_dir);
  for (int k = 0; k < setup.nodes; ++k) {
    scheduler_options.subnets[absl::StrCat("node-", k)] =
        PodSubnet{10 + k * block, 10 + (k + 1) * block - 1,
                  setup.network != nullptr ? setup.network->prefix : "127.0."};
  }
  out->scheduler = std::make_unique<Scheduler>(out->client.get(), scheduler_options);
  out->scheduler->Start();
  out->node_lifecycle =
      std::make_unique<NodeLifecycleController>(out->client.get(), absl::Seconds(f.node_grace_s));
  out->node_lifecycle->Start();
  out->deployments = std::make_unique<DeploymentController>(out->client.get());
  out->deployments->Start();
  return true;
}

// cohort-local-kubelet's command line for node `k`.
std::vector<std::string> KubeletArgv(const Flags& f, const std::filesystem::path& self,
                                     const NodeSetup& setup, const std::string& pod_network_library,
                                     int k) {
  const PodmanNetwork* network = setup.network;
  std::vector<std::string> argv = {
      (self / "cohort-local-kubelet").string(),
      "--kubeconfig",
      setup.kubeconfig,
      "--node-name",
      absl::StrCat("node-", k),
      "--node-address",
      network != nullptr ? network->gateway : absl::StrCat("127.0.1.", k + 1),
      "--pods-dir",
      setup.pods_dir,
      "--lease-duration",
      absl::StrCat(f.node_grace_s),
      "--max-pods",
      absl::StrCat(f.max_pods)};
  for (const std::string& d : f.bin_dirs) argv.insert(argv.end(), {"--bin-dir", d});
  if (network != nullptr) {
    argv.insert(argv.end(), {"--runtime", "podman", "--podman-network", network->name,
                             "--pod-api-server", setup.pod_api_server});
  } else if (!pod_network_library.empty()) {
    argv.insert(argv.end(), {"--pod-network-library", pod_network_library});
  }
  return argv;
}

// A kubelet process per node. False (the reason printed) when one cannot start.
bool StartKubelets(const Flags& f, const std::filesystem::path& self, const NodeSetup& setup,
                   Nodes* out) {
  std::string pod_network_library = f.pod_network_library;
  if (setup.network == nullptr && !std::filesystem::exists(pod_network_library)) {
    LogWarning("no pod-network library at ", pod_network_library,
               ": pods share the machine's addresses and cannot resolve cluster DNS names");
    pod_network_library.clear();
  }
  for (int k = 0; k < setup.nodes; ++k) {
    const std::string node = absl::StrCat("node-", k);
    Subprocess::Options kubelet_options;
    kubelet_options.argv = KubeletArgv(f, self, setup, pod_network_library, k);
    kubelet_options.capture_output = false;  // Its log lines join ours, named by node.
    kubelet_options.die_with_parent = true;
    absl::StatusOr<Subprocess> kubelet = Subprocess::Start(kubelet_options);
    if (!kubelet.ok()) {
      std::cerr << "cohort-local-cluster: cannot start the kubelet of " << node << ": "
                << kubelet.status().message() << "\n";
      return false;
    }
    // A test loses this node with: kill -9 $(cat <dir>/nodes/<node>/kubelet.pid)
    std::filesystem::path node_dir = std::filesystem::path(f.dir) / "nodes" / node;
    std::filesystem::create_directories(node_dir);
    std::ofstream(node_dir / "kubelet.pid") << kubelet->pid() << "\n";
    out->kubelets.push_back(*std::move(kubelet));
  }
  return true;
}

// The controllers, then the kubelets, until every node reported Ready. False (the reason
// printed) when a part cannot start or a node is not Ready within 60 s.
bool StartNodes(const Flags& f, const std::filesystem::path& self, const ApiServer& server,
                const std::string& token, const NodeSetup& setup, Nodes* out) {
  if (!StartControllers(f, server, token, setup, out)) return false;
  if (!StartKubelets(f, self, setup, out)) return false;
  if (!out->scheduler->WaitForReadyNodes(setup.nodes, absl::Seconds(60))) {
    std::cerr << "cohort-local-cluster: the nodes did not all report Ready within 60 s (see the "
                 "kubelets' lines above)\n";
    return false;
  }
  return true;
}

// Runs until SIGTERM or SIGINT, then stops the nodes.
void ServeUntilSignal(const sigset_t& signals, Nodes* nodes) {
  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("signal ", sig, ": stopping");
  // Each kubelet stops its pods' processes; one that was killed (a lost node) is only reaped.
  for (Subprocess& k : nodes->kubelets) k.Signal(SIGTERM);
  for (Subprocess& k : nodes->kubelets) k.Wait();
  if (nodes->client) nodes->client->CancelWatches();
  nodes->node_lifecycle.reset();
  nodes->scheduler.reset();
}

int Run(int argc, char** argv) {
  InitLogging("cohort-local-cluster");
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  Flags f;
  if (std::optional<int> exit_code = ParseFlags(argc, argv, self, &f)) return *exit_code;

  sigset_t signals = BlockTerminationSignals();

  std::error_code ec;
  std::filesystem::create_directories(f.dir, ec);
  if (ec) {
    std::cerr << "cohort-local-cluster: cannot create --dir " << f.dir << ": " << ec.message()
              << "\n";
    return 2;
  }
  const bool podman = f.runtime == "podman" && !f.no_kubelet && f.nodes > 0;
  PodmanNetwork network;
  NetworkRemover network_remover;
  ApiServerOptions options;
  if (podman) {
    if (std::optional<int> exit_code =
            CreatePodmanNetwork(f.dir, &network, &network_remover, &options)) {
      return *exit_code;
    }
  }
  options.port = f.port;
  options.tls = !f.http;
  options.token = GenerateToken();
  const std::string pods_dir = (std::filesystem::path(f.dir) / "pods").string();
  if (!f.no_kubelet) {
    options.pod_logs = [pods_dir](const std::string& ns, const std::string& pod,
                                  const std::string& container) {
      return PodLogs(pods_dir, ns, pod, container);
    };
  }
  absl::StatusOr<std::unique_ptr<ApiServer>> server = ApiServer::Start(options, Clock::Real());
  if (!server.ok()) {
    std::cerr << "cohort-local-cluster: " << server.status().message() << "\n";
    return 1;
  }
  const std::string kubeconfig = WriteKubeconfig(f.dir, **server);
  std::cout << "cohort-local-cluster: API server at " << (*server)->url() << "; kubeconfig "
            << kubeconfig << std::endl;

  if (f.no_kubelet) f.nodes = 0;
  Nodes nodes;
  if (f.nodes > 0) {
    NodeSetup setup{f.nodes, pods_dir, kubeconfig, podman ? &network : nullptr, ""};
    if (podman) {
      setup.pod_api_server = absl::StrCat(options.tls ? "https://" : "http://", network.gateway,
                                          ":", (*server)->port());
    }
    if (!StartNodes(f, self, **server, options.token, setup, &nodes)) return 1;
  }
  std::cout << "cohort-local-cluster: ready (" << f.nodes << (f.nodes == 1 ? " node" : " nodes")
            << (podman ? absl::StrCat(", pods as podman containers on network ", network.name) : "")
            << ")" << std::endl;
  ServeUntilSignal(signals, &nodes);
  return 0;
}

}  // namespace
}  // namespace cohort::local

int main(int argc, char** argv) { return cohort::local::Run(argc, argv); }
