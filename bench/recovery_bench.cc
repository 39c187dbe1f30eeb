// recovery-bench: how long a gang restart takes, in place beside recreating the pods, on the
// local control plane with real pods (sidecars, cohort-launch, test-trainer processes).
//
//   recovery-bench [--pods 8] [--processes-per-pod 4] [--runs 5] [--runtime process|podman]
//
// It starts cohort-local-cluster (one node, the process runtime unless --runtime podman), applies
// the CRD and starts a real cohort-operator. Then, --runs times, for restartStrategy InPlace and
// Recreate in turn (interleaved, so both see the same machine), it creates a job of --pods pods of
// --processes-per-pod test-trainer processes (restartBackoff 0s), waits until every rank trains,
// SIGKILLs rank 1's process and measures from the kill:
//   gone_s        every process of attempt 0 gone (reaped: its pid no longer exists)
//   registered_s  every rank of attempt 1 registered (its "INITIALIZED rank=R attempt=1" line:
//                 dist::Initialize returns once every rank registered)
//   barrier_s     every rank of attempt 1 through its first rendezvous (its "RENDEZVOUS" line)
//   pods_replaced pods whose uid changed (API writes: each is a delete and a create)
// Each run prints one JSON object; the last line is a summary: median and worst of each figure
// per strategy, and the ratio of the Recreate median to the InPlace median.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "bench/local_operator.h"
#include "operator/client/http_kube_client.h"

namespace cohort::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// How often the logs and processes are looked at: the figures' resolution.
constexpr absl::Duration kPoll = absl::Milliseconds(10);

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

json JobObject(const std::string& name, int pods, int per_pod, const std::string& strategy) {
  json container = {{"name", "trainer"},
                    {"image", "cohort/test-trainer:dev"},
                    {"command", json::array({"test-trainer", "k8s-hold"})}};
  json spec = {{"replicas", pods},
               {"processesPerPod", per_pod},
               {"restartStrategy", strategy},
               {"restartBackoff", "0s"},
               {"maxRestarts", 3},
               {"template", {{"spec", {{"containers", json::array({container})}}}}}};
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "DistributedJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

// The trainer processes of `job` in restart attempt `attempt` (not cohort-launch), by rank.
std::map<int, pid_t> Trainers(const std::string& job, int attempt) {
  std::map<int, pid_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const std::string cmdline = ReadFile(e.path() / "cmdline");
    if (fs::path(cmdline.substr(0, cmdline.find('\0'))).filename() != "test-trainer") continue;
    std::vector<std::string> vars = absl::StrSplit(ReadFile(e.path() / "environ"), '\0');
    std::set<std::string> env(vars.begin(), vars.end());
    if (!env.count(absl::StrCat("COHORT_JOB_NAME=", job)) ||
        !env.count(absl::StrCat("COHORT_RESTART_ATTEMPT=", attempt))) {
      continue;
    }
    for (const std::string& v : vars) {
      int rank = 0;
      if (absl::StartsWith(v, "COHORT_PROCESS_ID=") && absl::SimpleAtoi(v.substr(18), &rank)) out[rank] = pid;
    }
  }
  return out;
}

// How many lines of every pod's trainer log contain `text`.
int CountInLogs(const std::string& dir, const std::string& job, int pods, const std::string& text) {
  int n = 0;
  for (int p = 0; p < pods; ++p) {
    const std::string log = ReadFile(absl::StrCat(dir, "/pods/default_", job, "-", p, "/trainer.log"));
    for (size_t at = 0; (at = log.find(text, at)) != std::string::npos; at += text.size()) ++n;
  }
  return n;
}

std::map<std::string, std::string> PodUids(op::HttpKubeClient& client, const std::string& job) {
  std::map<std::string, std::string> uids;
  absl::StatusOr<json> pods = client.List(op::kPods, "default", absl::StrCat("cohort.dev/job-name=", job));
  if (!pods.ok()) return uids;
  for (const json& p : (*pods)["items"]) {
    if (p["metadata"].contains("deletionTimestamp")) continue;
    uids[p["metadata"].value("name", "")] = p["metadata"].value("uid", "");
  }
  return uids;
}

std::string Phase(op::HttpKubeClient& client, const std::string& job) {
  absl::StatusOr<json> j = client.Get(op::kDistributedJobs, "default", job);
  if (!j.ok() || !j->contains("status")) return "";
  return (*j)["status"].value("phase", "");
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "recovery-bench: %s\n", message.c_str());
  return 1;
}

struct Run1 {
  double gone = -1, registered = -1, barrier = -1;
  int replaced = 0;
};

// One job: created, trained, a rank killed, measured, finished and deleted.
absl::StatusOr<Run1> Measure(op::HttpKubeClient& client, const std::string& dir, const std::string& job, int pods,
                             int per_pod, const std::string& strategy) {
  const int ranks = pods * per_pod;
  absl::StatusOr<json> created = client.Create(op::kDistributedJobs, "default", JobObject(job, pods, per_pod, strategy));
  if (!created.ok()) return created.status();
  absl::Time deadline = absl::Now() + absl::Minutes(5);
  while (CountInLogs(dir, job, pods, "TRAINING") < ranks) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(job, ": not every rank trains"));
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::map<std::string, std::string> before = PodUids(client, job);
  const std::map<int, pid_t> old = Trainers(job, 0);
  if (static_cast<int>(old.size()) != ranks || !old.count(1)) {
    return absl::InternalError(absl::StrCat(job, ": found ", old.size(), " trainer processes of ", ranks));
  }
  Run1 r;
  const absl::Time killed = absl::Now();
  kill(old.at(1), SIGKILL);
  deadline = killed + absl::Minutes(5);
  while (r.gone < 0 || r.registered < 0 || r.barrier < 0) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(job, ": attempt 1 never ran"));
    const double t = absl::ToDoubleSeconds(absl::Now() - killed);
    if (r.gone < 0 && std::all_of(old.begin(), old.end(), [](const auto& e) { return kill(e.second, 0) != 0; })) {
      r.gone = t;
    }
    if (r.registered < 0 && CountInLogs(dir, job, pods, " attempt=1") >= ranks) r.registered = t;
    if (r.barrier < 0 && CountInLogs(dir, job, pods, "RENDEZVOUS rank=") >= ranks) r.barrier = t;
    absl::SleepFor(kPoll);
  }
  while (Phase(client, job) != "Succeeded") {
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(job, ": did not succeed"));
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::map<std::string, std::string> after = PodUids(client, job);
  for (const auto& [pod, uid] : before) r.replaced += after.count(pod) && after.at(pod) == uid ? 0 : 1;
  client.Delete(op::kDistributedJobs, "default", job).IgnoreError();
  while (!PodUids(client, job).empty() || !Trainers(job, 1).empty()) {
    if (absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return r;
}

json Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return json::object();
  return {{"median", v[v.size() / 2]}, {"worst", v.back()}};
}

int Run(int argc, char** argv) {
  int pods = 8, per_pod = 4, runs = 5;
  std::string runtime = "process";
  CLI::App app{"recovery-bench: a gang restart in place beside recreating the pods"};
  app.add_option("--pods", pods, "pods of the job")->check(CLI::Range(2, 1024))->capture_default_str();
  app.add_option("--processes-per-pod", per_pod, "processes per pod")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--runs", runs, "runs of each strategy")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--runtime", runtime, "the local kubelet's runtime")
      ->check(CLI::IsMember({"process", "podman"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  InitLogging("recovery-bench");
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<LocalOperator>> local =
      StartLocalOperator("recovery-bench", {"--runtime", runtime, "--max-pods", "0"}, {});
  if (!local.ok()) return Fail(std::string(local.status().message()));
  op::HttpKubeClient& client = *(*local)->client;
  const std::string& dir = (*local)->dir;

  std::map<std::string, std::map<std::string, std::vector<double>>> figures;  // strategy -> figure -> runs.
  for (int i = 0; i < runs; ++i) {
    for (const std::string strategy : {"InPlace", "Recreate"}) {
      const std::string job = absl::StrCat("rb-", strategy == "InPlace" ? "inplace" : "recreate", "-", i);
      absl::StatusOr<Run1> r = Measure(client, dir, job, pods, per_pod, strategy);
      if (!r.ok()) return Fail(std::string(r.status().message()));
      json one = {{"strategy", strategy},   {"run", i},          {"pods", pods},
                  {"processes_per_pod", per_pod}, {"ranks", pods * per_pod}, {"runtime", runtime},
                  {"gone_s", r->gone},      {"registered_s", r->registered}, {"barrier_s", r->barrier},
                  {"pods_replaced", r->replaced}};
      std::printf("%s\n", one.dump().c_str());
      std::fflush(stdout);
      figures[strategy]["gone_s"].push_back(r->gone);
      figures[strategy]["registered_s"].push_back(r->registered);
      figures[strategy]["barrier_s"].push_back(r->barrier);
      figures[strategy]["pods_replaced"].push_back(r->replaced);
    }
  }
  json summary = {{"summary", true}, {"pods", pods}, {"processes_per_pod", per_pod}, {"ranks", pods * per_pod},
                  {"runs", runs}, {"runtime", runtime}};
  for (auto& [strategy, by_figure] : figures) {
    for (auto& [figure, values] : by_figure) summary[strategy][figure] = Stats(values);
  }
  for (const char* figure : {"gone_s", "registered_s", "barrier_s"}) {
    const double in_place = summary["InPlace"][figure]["median"];
    const double recreate = summary["Recreate"][figure]["median"];
    summary["recreate_over_in_place"][figure] = in_place > 0 ? recreate / in_place : 0;
  }
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) { return cohort::bench::Run(argc, argv); }
