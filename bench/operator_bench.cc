// operator-bench: measures cohort-operator against the local control plane.
//
//   operator-bench --workload large-job [--ranks 1000] [--processes-per-pod 8]
//   operator-bench --workload many-jobs [--jobs 500] [--ranks 8]
//   [--kube-api-qps Q] [--kube-api-burst B] [--pod-create-parallelism P]
//                                  (passed to the operator; defaults are its own)
//
// It starts cohort-local-cluster (HTTPS, no kubelet: pods stay Pending, so only the operator
// and the API server are measured), applies the CRD with kubectl, starts a real cohort-operator
// process and waits until it leads with synced informers. Then:
//   large-job  creates one DistributedJob of --ranks ranks. seconds: from the create call until
//              a pod watch has seen every one of its pods.
//   many-jobs  creates --jobs jobs of --ranks ranks at once. seconds: from the first create
//              until every pod exists and every job's status was written (phase Pending).
// --processes-per-pod K makes each job ranks/K pods of K processes (spec.processesPerPod), the
// shape of GPU nodes. Prints one JSON object: workload, ranks, processes_per_pod, jobs, pods,
// seconds, pods_per_second, the
// operator's flags, and operator_peak_rss_mib (VmHWM of the operator process at the end).
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/local_operator.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "kube/http_kube_client.h"
#include "operator/api/distributed_job.h"

namespace cohort::bench {
namespace {

using json = nlohmann::json;

json JobObject(const std::string& name, int ranks, int per_pod) {
  json container = {{"name", "trainer"},
                    {"image", "ghcr.io/cohort-dev/cohort-demo:0.1.0"},
                    {"command", json::array({"demo-trainer"})}};
  json spec = {{"replicas", ranks / per_pod},
               {"processesPerPod", per_pod},
               {"template", {{"spec", {{"containers", json::array({container})}}}}}};
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "DistributedJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "operator-bench: %s\n", message.c_str());
  return 1;
}

int Run(int argc, char** argv) {
  std::string workload = "large-job";
  int ranks = 0;
  int jobs = 500;
  int per_pod = 1;
  std::string qps, burst, parallelism;
  CLI::App app{"operator-bench: cohort-operator against the local control plane"};
  app.add_option("--workload", workload, "large-job or many-jobs")
      ->check(CLI::IsMember({"large-job", "many-jobs"}))
      ->capture_default_str();
  app.add_option("--ranks", ranks, "ranks per job (default: 1000 for large-job, 8 for many-jobs)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--processes-per-pod", per_pod, "processes per pod (spec.processesPerPod)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--jobs", jobs, "jobs for many-jobs")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--kube-api-qps", qps, "the operator's --kube-api-qps (default: its own)");
  app.add_option("--kube-api-burst", burst, "the operator's --kube-api-burst (default: its own)");
  app.add_option("--pod-create-parallelism", parallelism,
                 "the operator's --pod-create-parallelism (default: its own)");
  CLI11_PARSE(app, argc, argv);
  if (ranks == 0) ranks = workload == "large-job" ? 1000 : 8;
  if (workload == "large-job") jobs = 1;
  if (ranks % per_pod != 0) {
    std::fprintf(stderr, "operator-bench: --ranks %d is not a multiple of --processes-per-pod %d\n",
                 ranks, per_pod);
    return 2;
  }
  InitLogging("operator-bench");
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> op_flags;
  if (!qps.empty()) op_flags.insert(op_flags.end(), {"--kube-api-qps", qps});
  if (!burst.empty()) op_flags.insert(op_flags.end(), {"--kube-api-burst", burst});
  if (!parallelism.empty())
    op_flags.insert(op_flags.end(), {"--pod-create-parallelism", parallelism});
  // No kubelet: pods stay Pending, so only the operator and the API server are measured.
  absl::StatusOr<std::unique_ptr<LocalOperator>> local =
      StartLocalOperator("operator-bench", {"--no-kubelet"}, op_flags);
  if (!local.ok()) return Fail(std::string(local.status().message()));
  kube::HttpKubeClient* client = (*local)->client.get();

  // Watch pods and jobs from now on; count what the operator made.
  const size_t want_pods = static_cast<size_t>(jobs) * (ranks / per_pod);
  absl::Mutex mu;
  absl::flat_hash_set<std::string> pods, written;
  absl::Time last_pod, last_status;
  absl::BlockingCounter listed(2);
  auto watch = [&](const kube::Resource& r, const std::string& selector, bool status) {
    absl::StatusOr<json> list = client->List(r, "default", selector);
    listed.DecrementCount();  // The watch starts from this list's version: nothing is missed.
    if (!list.ok()) return;
    kube::WatchOptions options;
    options.label_selector = selector;
    options.resource_version = (*list)["metadata"].value("resourceVersion", "");
    options.timeout = absl::Minutes(10);
    client
        ->Watch(r, "default", options,
                [&](const json& e) {
                  if (e.value("type", "") != "ADDED" && e.value("type", "") != "MODIFIED")
                    return true;
                  const json& o = e["object"];
                  absl::MutexLock lock(&mu);
                  if (!status) {
                    if (pods.insert(o["metadata"].value("name", "")).second) last_pod = absl::Now();
                  } else if (o.contains("status") && o["status"].value("phase", "") == "Pending") {
                    if (written.insert(o["metadata"].value("name", "")).second)
                      last_status = absl::Now();
                  }
                  return true;
                })
        .IgnoreError();
  };
  std::thread pod_watch([&] { watch(kube::kPods, "cohort.dev/job-name", false); });
  std::thread job_watch([&] { watch(op::kDistributedJobs, "", true); });
  listed.Wait();

  std::fprintf(stderr, "operator-bench: creating %d job(s) of %d ranks (%zu pods)\n", jobs, ranks,
               want_pods);
  absl::Time start = absl::Now();
  for (int j = 0; j < jobs; ++j) {
    std::string name = jobs == 1 ? "bench-large" : absl::StrCat("bench-", j);
    absl::StatusOr<json> created =
        client->Create(op::kDistributedJobs, "default", JobObject(name, ranks, per_pod));
    if (!created.ok()) return Fail(std::string(created.status().message()));
  }
  absl::Time deadline = start + absl::Minutes(5);
  bool done = false;
  size_t reported = 0;
  while (!done && absl::Now() < deadline) {
    absl::MutexLock lock(&mu);
    auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return pods.size() >= want_pods && written.size() >= static_cast<size_t>(jobs);
    };
    done = mu.AwaitWithTimeout(absl::Condition(&complete), absl::Seconds(1));
    if (!done && pods.size() != reported) {
      reported = pods.size();
      std::fprintf(stderr, "operator-bench: %zu of %zu pods after %.1f s\n", reported, want_pods,
                   absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  double rss_mib = PeakRssBytes((*local)->op->pid()) / double{1 << 20};
  client->CancelWatches();
  pod_watch.join();
  job_watch.join();
  if (!done)
    return Fail(absl::StrCat("timed out: ", pods.size(), " of ", want_pods, " pods, ",
                             written.size(), " of ", jobs, " statuses"));

  absl::Time end = workload == "large-job" ? last_pod : std::max(last_pod, last_status);
  double seconds = absl::ToDoubleSeconds(end - start);
  json result = {{"workload", workload},
                 {"jobs", jobs},
                 {"ranks", ranks},
                 {"processes_per_pod", per_pod},
                 {"pods", want_pods},
                 {"seconds", seconds},
                 {"pods_per_second", want_pods / seconds},
                 {"kube_api_qps", qps.empty() ? "default" : qps},
                 {"kube_api_burst", burst.empty() ? "default" : burst},
                 {"pod_create_parallelism", parallelism.empty() ? "default" : parallelism},
                 {"operator_peak_rss_mib", rss_mib}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) { return cohort::bench::Run(argc, argv); }
