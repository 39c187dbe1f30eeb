// cohort-operator: reconciles DistributedJobs (docs/operator.md).
//
// Startup: connect to the API server (--kubeconfig, else in-cluster, else $KUBECONFIG or
// ~/.kube/config), serve /metrics, /healthz and /readyz, win the leader Lease (unless
// --leader-elect=false), then run the controller until SIGTERM/SIGINT or until leadership is
// lost. On SIGTERM the controller stops, watches are cancelled and the Lease is released, so a
// standby replica takes over at once instead of after the lease duration.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/log.h"
#include "common/metrics_http_server.h"
#include "common/signals.h"
#include "kube/http_kube_client.h"
#include "kube/kube_config.h"
#include "kube/leader_election.h"
#include "operator/reconciler/reconciler.h"
#include "operator/runtime/controller.h"
#include "operator/runtime/hub_attempt_watcher.h"
#include "operator/runtime/operator_metrics.h"

namespace cohort::op {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Flags {
  std::string kubeconfig;
  std::string context;
  std::string ns;
  double qps = 500;
  int burst = 1000;
  int max_connections = 16;
  int workers = 4;
  int pod_create_parallelism = 16;
  double force_delete_after_s = 60;
  std::string metrics_address = "0.0.0.0";
  int metrics_port = 8080;
  bool leader_elect = true;
  std::string lease_namespace;
  std::string lease_name = "cohort-operator";
  std::string identity;
  double lease_duration_s = 15;
  double renew_deadline_s = 10;
  double retry_period_s = 2;
  std::string log_level = "info";
};

absl::StatusOr<kube::KubeConfig> LoadConfig(const Flags& f) {
  if (f.kubeconfig.empty() && std::getenv("KUBERNETES_SERVICE_HOST") != nullptr) {
    return kube::LoadInClusterConfig();
  }
  return kube::LoadKubeConfig(f.kubeconfig, f.context);
}

std::string DefaultIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "_", getpid());
}

void AddFlags(CLI::App& app, Flags* f) {
  app.add_option("--kubeconfig", f->kubeconfig,
                 "kubeconfig to use; default: in-cluster when KUBERNETES_SERVICE_HOST is set, "
                 "else $KUBECONFIG, else ~/.kube/config");
  app.add_option("--context", f->context, "kubeconfig context (default: its current-context)");
  app.add_option("--namespace", f->ns, "watch only this namespace (default: all namespaces)");
  app.add_option("--kube-api-qps", f->qps,
                 "client-side limit on API requests per second (<= 0: none)")
      ->capture_default_str();
  app.add_option("--kube-api-burst", f->burst, "requests allowed above the QPS in a burst")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kube-api-max-connections", f->max_connections,
                 "API requests in flight at once (watches aside); each is a TLS connection")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--workers", f->workers, "jobs reconciled at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--pod-create-parallelism", f->pod_create_parallelism,
                 "pods of one job created at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--force-delete-after", f->force_delete_after_s,
                 "seconds after its grace period ended that a pod of an earlier restart attempt, "
                 "still terminating (its node lost), is deleted with grace period 0 so that the "
                 "next attempt can start (negative: never)")
      ->capture_default_str();
  app.add_option("--metrics-address", f->metrics_address, "address of /metrics, /healthz, /readyz")
      ->capture_default_str();
  app.add_option("--metrics-port", f->metrics_port,
                 "port of /metrics, /healthz, /readyz (0: any free)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--leader-elect", f->leader_elect,
                 "hold a coordination.k8s.io Lease so that one replica of several acts")
      ->capture_default_str();
  app.add_option("--leader-election-namespace", f->lease_namespace,
                 "namespace of the Lease (default: the kubeconfig's or service account's "
                 "namespace)");
  app.add_option("--leader-election-id", f->lease_name, "name of the Lease")->capture_default_str();
  app.add_option("--identity", f->identity, "this replica's name in the Lease (default: host_pid)");
  app.add_option("--leader-election-lease-duration", f->lease_duration_s,
                 "seconds a standby waits after the leader's last renewal")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--leader-election-renew-deadline", f->renew_deadline_s,
                 "seconds the leader keeps trying to renew before it steps down")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--leader-election-retry-period", f->retry_period_s,
                 "seconds between Lease attempts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--log-level", f->log_level, "debug, info, warning or error")
      ->capture_default_str()
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
}

// Parses and checks the flags, and sets the log level. An exit code when the operator must not
// start (--help, or a bad flag).
std::optional<int> ParseFlags(int argc, char** argv, Flags* f) {
  CLI::App app{"cohort-operator: runs DistributedJobs (cohort.dev/v1alpha1) as gangs of pods"};
  AddFlags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  SetLogLevel(f->log_level == "debug"     ? LogLevel::kDebug
              : f->log_level == "warning" ? LogLevel::kWarning
              : f->log_level == "error"   ? LogLevel::kError
                                          : LogLevel::kInfo);
  if (!(f->renew_deadline_s < f->lease_duration_s && f->retry_period_s < f->renew_deadline_s)) {
    LogError(
        "--leader-election-retry-period < --leader-election-renew-deadline < "
        "--leader-election-lease-duration must hold (got ",
        f->retry_period_s, ", ", f->renew_deadline_s, ", ", f->lease_duration_s, ")");
    return kExitUsage;
  }
  return std::nullopt;
}

// The API server's client, once the DistributedJob API answers; null (the reason logged) when
// the client cannot be configured or the API is unreachable.
std::unique_ptr<kube::HttpKubeClient> ConnectToApiServer(const Flags& f, kube::KubeConfig* config) {
  absl::StatusOr<kube::KubeConfig> loaded = LoadConfig(f);
  if (!loaded.ok()) {
    LogError("cannot configure the Kubernetes client: ", loaded.status().message(),
             "; pass --kubeconfig or run in a pod with a service account");
    return nullptr;
  }
  *config = *std::move(loaded);
  kube::HttpKubeClientOptions client_options;
  client_options.qps = f.qps;
  client_options.burst = f.burst;
  client_options.max_connections = f.max_connections;
  absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> client =
      kube::HttpKubeClient::Create(*config, client_options, Clock::Real());
  if (!client.ok()) {
    LogError("cannot create the Kubernetes client: ", client.status().message());
    return nullptr;
  }
  // Fail fast with a clear message when the API server or the CRD is missing.
  if (absl::StatusOr<nlohmann::json> probe = (*client)->Call("GET", "/apis/cohort.dev/v1alpha1");
      !probe.ok()) {
    LogError("cannot reach the DistributedJob API at ", config->server, ": ",
             probe.status().message(),
             absl::IsNotFound(probe.status())
                 ? "; install the CRD: kubectl apply -f manifests/crd"
                 : "; check that the API server is up and that --kubeconfig/--context point at it");
    return nullptr;
  }
  return *std::move(client);
}

// Asked to stop by a signal or a lost Lease; both may ask, so Notify() is called only once.
class StopRequest {
 public:
  void Request() {
    std::call_once(once_, [this] { stop_.Notify(); });
  }
  absl::Notification& notification() { return stop_; }

 private:
  absl::Notification stop_;
  std::once_flag once_;
};

// Takes `signals` (SIGTERM, SIGINT) on a thread of its own and asks `stop` to stop at the first.
void HandleSignals(sigset_t signals, StopRequest* stop) {
  std::thread signal_thread([signals, stop] {
    pthread_setname_np(pthread_self(), "signals");
    int sig = 0;
    while (sigwait(&signals, &sig) != 0) {
    }
    LogInfo(sig == SIGTERM ? "SIGTERM" : "SIGINT", ": shutting down");
    stop->Request();
  });
  signal_thread.detach();  // Parked in sigwait when the process exits normally.
}

// What /readyz reports.
struct Readiness {
  std::atomic<bool> leading{false};
  std::atomic<bool> synced{false};
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> ServeMetrics(
    const Flags& f, std::shared_ptr<prometheus::Registry> registry, const Readiness* readiness) {
  return MetricsHttpServer::Start(f.metrics_address, f.metrics_port, {std::move(registry)},
                                  [readiness]() -> std::string {
                                    // A standby is ready (it is doing its job: waiting); the leader
                                    // once its caches synced.
                                    if (readiness->leading && !readiness->synced) {
                                      return "leader, waiting for the informers' first list";
                                    }
                                    return "";
                                  });
}

// Waits to lead (--leader-elect): the elector holding the Lease, or null once `stop` came first.
std::unique_ptr<kube::LeaderElector> Lead(const Flags& f, const kube::KubeConfig& config,
                                          kube::HttpKubeClient* client, StopRequest* stop) {
  kube::LeaderElectionOptions le;
  le.ns = f.lease_namespace.empty() ? config.namespace_ : f.lease_namespace;
  le.name = f.lease_name;
  le.identity = f.identity.empty() ? DefaultIdentity() : f.identity;
  le.lease_duration = absl::Seconds(f.lease_duration_s);
  le.renew_deadline = absl::Seconds(f.renew_deadline_s);
  le.retry_period = absl::Seconds(f.retry_period_s);
  auto elector = std::make_unique<kube::LeaderElector>(client, Clock::Real(), le);
  LogInfo("waiting to lead: Lease ", le.ns, "/", le.name, " as ", le.identity);
  if (!elector->AcquireBlocking(stop->notification())) return nullptr;
  LogInfo("leading as ", le.identity);
  return elector;
}

// Runs the controller until `stop` (or, with an elector, until the Lease is lost), then stops
// it and cancels the watches. The exit code: kExitFailed when the Lease was lost.
int Reconcile(const Flags& f, kube::HttpKubeClient* client, kube::LeaderElector* elector,
              OperatorMetrics* metrics, StopRequest* stop, Readiness* readiness) {
  DecideOptions decide_options;
  decide_options.force_delete_after = f.force_delete_after_s < 0
                                          ? -absl::InfiniteDuration()
                                          : absl::Seconds(f.force_delete_after_s);
  Reconciler reconciler(client, Clock::Real(), nullptr, f.pod_create_parallelism, decide_options);
  ControllerOptions controller_options;
  controller_options.ns = f.ns;
  controller_options.workers = f.workers;
  Controller controller(client, Clock::Real(), &reconciler, metrics, controller_options);
  // One stream per in-place job to its attempt hub; a change queues the job.
  HubAttemptWatcher attempts([&controller](const std::string& key) { controller.Enqueue(key); });
  reconciler.set_attempt_watcher(&attempts);
  controller.Start();
  absl::Notification& stopped = stop->notification();
  std::thread sync_thread([&] {
    while (!stopped.HasBeenNotified() && !controller.WaitForSync(absl::Seconds(1))) {
    }
    if (!stopped.HasBeenNotified()) {
      readiness->synced = true;
      LogInfo("informers synced: reconciling");
    }
  });

  int exit_code = kExitOk;
  if (elector) {
    if (!elector->RenewBlocking(stopped)) {
      // client-go's rule: a replica that lost the Lease exits, so it never acts alongside the new
      // leader; its restart makes it a standby.
      LogError("lost the leader Lease ", elector->options().ns, "/", elector->options().name,
               ": exiting");
      exit_code = kExitFailed;
    }
  } else {
    stopped.WaitForNotification();
  }
  stop->Request();
  client->CancelWatches();
  controller.Stop();
  sync_thread.join();
  return exit_code;
}

int Run(int argc, char** argv) {
  // Reconcile workers, pod-creating threads and informers would each get a malloc arena
  // (up to 8 per core), which inflates the resident set for no speed gain here.
  mallopt(M_ARENA_MAX, 2);
  Flags f;
  if (std::optional<int> exit_code = ParseFlags(argc, argv, &f)) return *exit_code;
  kube::KubeConfig config;
  std::unique_ptr<kube::HttpKubeClient> client = ConnectToApiServer(f, &config);
  if (client == nullptr) return kExitFailed;

  // Signals go to one thread; block them before any other thread starts.
  sigset_t signals = BlockTerminationSignals();
  StopRequest stop;
  HandleSignals(signals, &stop);

  auto registry = std::make_shared<prometheus::Registry>();
  AddBuildInfo(*registry, "operator");
  OperatorMetrics metrics(*registry);
  Readiness readiness;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http = ServeMetrics(f, registry, &readiness);
  if (!http.ok()) {
    LogError("cannot serve metrics: ", http.status().message());
    return kExitFailed;
  }
  LogInfo("cohort-operator: API server ", config.server, ", namespace ",
          f.ns.empty() ? "(all)" : f.ns, ", metrics on port ", (*http)->port());

  std::unique_ptr<kube::LeaderElector> elector;
  if (f.leader_elect) {
    elector = Lead(f, config, client.get(), &stop);
    if (elector == nullptr) {
      LogInfo("stopped before becoming the leader");
      return kExitOk;
    }
  }
  readiness.leading = true;
  metrics.SetLeader(true);
  const int exit_code = Reconcile(f, client.get(), elector.get(), &metrics, &stop, &readiness);
  metrics.SetLeader(false);
  if (elector && exit_code == kExitOk) {
    if (absl::Status released = elector->Release(); !released.ok()) {
      LogWarning("cannot release the leader Lease: ", released.message());
    } else {
      LogInfo("released the leader Lease");
    }
  }
  LogInfo("exiting with code ", exit_code);
  std::fflush(nullptr);
  return exit_code;
}

}  // namespace
}  // namespace cohort::op

int main(int argc, char** argv) { return cohort::op::Run(argc, argv); }
