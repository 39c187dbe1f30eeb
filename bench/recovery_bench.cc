// recovery-bench: how long a gang restart takes, in place beside recreating the pods, on the
// local control plane with real pods (sidecars, cohort-launch, trainer processes).
//
//   recovery-bench [--pods 8] [--processes-per-pod 4] [--runs 5] [--runtime process|podman]
//                  [--step-ms 5] [--lose process|node] [--keep]
//
// It starts cohort-local-cluster (one node, the process runtime unless --runtime podman), applies
// the CRD and starts a real cohort-operator. Then, --runs times, for restartStrategy InPlace and
// Recreate in turn (interleaved, so both see the same machine), it creates a job of --pods pods of
// --processes-per-pod trainer processes (restartBackoff 0s), waits until every rank trains,
// SIGKILLs rank 1's process and measures from the kill:
//   gone_s        every process of attempt 0 gone (reaped: its pid no longer exists)
//   registered_s  every rank of attempt 1 registered (dist::Initialize returned, which it does once
//                 every rank registered)
//   barrier_s     every rank of attempt 1 through its first barrier
//   pods_replaced pods whose uid changed (API writes: each is a delete and a create)
// With --lose node it measures a lost node instead, for a job with one hot spare ("Spare") beside
// one without ("NoSpare", the replacement pod created and scheduled), both restarting in place:
// the cluster has a node per pod (--max-pods 1) and enough spare nodes for every run, and each
// run kills the kubelet of pod 1's node (which kills its processes, as a machine lost) and
// measures from there:
//   detected_s    the operator marked the job Restarting (it knows of the loss)
//   registered_s, barrier_s  as above
//   pods_created  pods created for the job after the loss before every rank registered
//                 (replacements, not new spares, which are created after the slot is taken)
// The target: with a spare, registered_s within detected_s + 2 s.
// The trainer is test-trainer (process runtime) or, in containers, demo-trainer from
// localhost/cohort-demo:dev (`make images`). Each run prints one JSON object; the last line is a
// summary: median and worst of each figure per strategy, the ratio of the Recreate median to the
// InPlace median, and start_floor_s: how long starting as many processes of the trainer's binary
// at once takes on this machine with nothing else running (each exits after main() began), the
// least any restart that starts new processes can cost here.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/local_operator.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "kube/http_kube_client.h"
#include "localcluster/lose_node.h"
#include "operator/api/distributed_job.h"

namespace cohort::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// How often the logs and processes are looked at: the figures' resolution.
constexpr absl::Duration kPoll = absl::Milliseconds(10);

// The trainer's image in containers (`make images` builds it).
constexpr char kDemoImage[] = "localhost/cohort-demo:dev";

// The file's contents; "" when it cannot be read (a /proc file of a process that just exited fails
// mid-read, which libstdc++'s stream buffer reports by throwing).
std::string ReadFile(const fs::path& path) {
  try {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::exception&) {
    return "";
  }
}

// What a run's pods run, and the lines of its log that mark each stage.
struct Workload {
  std::string
      binary;      // The trainer's executable: its processes are found (and one killed) by name.
  json container;  // The job's trainer container.
  std::string trains;                   // Every rank of attempt 0 printed it: the job trains.
  std::string registered;               // dist::Initialize returned.
  std::string barrier;                  // The first barrier passed.
  std::vector<std::string> floor_argv;  // The binary, exiting right after main() began.
  bool finishes =
      false;  // Attempt 1 ends by itself (Succeeded); else the job is deleted once measured.
};

Workload ProcessWorkload(int step_ms) {
  // test-trainer's "k8s-hold": attempt 0 trains (steps of `step_ms`) until killed, attempt 1 runs
  // its rendezvous, whose first step is a barrier, and ends. The process runtime ignores the image.
  return {"test-trainer",
          {{"name", "trainer"},
           {"image", "cohort/test-trainer:dev"},
           {"command", json::array({"test-trainer", "k8s-hold"})},
           {"env",
            json::array({{{"name", "TEST_TRAINER_STEP_MS"}, {"value", absl::StrCat(step_ms)}}})}},
          "TRAINING",
          "INITIALIZED rank=",
          "BARRIER rank=",
          {absl::StrCat(COHORT_BIN_DIR, "/test-trainer"),
           "init-only"},  // No job in the environment: exits 3.
          /*finishes=*/true};
}

Workload ContainerWorkload() {
  // demo-trainer prints "joined as rank" once dist::Initialize returned and "collectives:" once
  // its communicator is up, which every rank reaches together (a rendezvous of the ranks'
  // addresses): the first barrier. Enough steps that attempt 0 trains until the kill.
  return {"demo-trainer",
          {{"name", "trainer"},
           {"image", kDemoImage},
           {"command", json::array({"demo-trainer", "--steps", "1000000", "--step-ms", "20"})}},
          "collectives: ",
          "joined as rank",
          "collectives: ",
          {absl::StrCat(COHORT_BIN_DIR, "/demo-trainer"), "--help"}};
}

json JobObject(const std::string& name, int pods, int per_pod, const std::string& strategy,
               const Workload& w, int spares = 0) {
  json spec = {{"replicas", pods},
               {"spares", spares},
               {"processesPerPod", per_pod},
               {"restartStrategy", strategy},
               {"restartBackoff", "0s"},
               {"maxRestarts", 3},
               {"template", {{"spec", {{"containers", json::array({w.container})}}}}}};
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "DistributedJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

// The trainer processes (named `binary`, not cohort-launch) of `job` in restart attempt
// `attempt`, by rank.
std::map<int, pid_t> Trainers(const std::string& binary, const std::string& job, int attempt) {
  std::map<int, pid_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const std::string cmdline = ReadFile(e.path() / "cmdline");
    if (fs::path(cmdline.substr(0, cmdline.find('\0'))).filename() != binary) continue;
    std::vector<std::string> vars = absl::StrSplit(ReadFile(e.path() / "environ"), '\0');
    std::set<std::string> env(vars.begin(), vars.end());
    if (!env.count(absl::StrCat("COHORT_JOB_NAME=", job)) ||
        !env.count(absl::StrCat("COHORT_RESTART_ATTEMPT=", attempt))) {
      continue;
    }
    for (const std::string& v : vars) {
      int rank = 0;
      if (absl::StartsWith(v, "COHORT_PROCESS_ID=") && absl::SimpleAtoi(v.substr(18), &rank))
        out[rank] = pid;
    }
  }
  return out;
}

// The trainer logs of every pod of `job` there is or was: its ranks' pods, replacements and spares.
std::vector<std::string> TrainerLogs(const std::string& dir, const std::string& job) {
  std::vector<std::string> logs;
  const std::string prefix = absl::StrCat("default_", job, "-");
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(dir) / "pods", ec)) {
    if (absl::StartsWith(e.path().filename().string(), prefix))
      logs.push_back((e.path() / "trainer.log").string());
  }
  return logs;
}

// Where a pod's trainer log stood: its file, held open so that its inode cannot be handed to the
// log of a pod recreated under the same name, and its length.
struct LogMark {
  LogMark() = default;
  LogMark(LogMark&& o) noexcept : fd(std::exchange(o.fd, -1)), inode(o.inode), size(o.size) {}
  LogMark& operator=(LogMark&&) = delete;
  ~LogMark() {
    if (fd >= 0) close(fd);
  }
  int fd = -1;
  ino_t inode = 0;
  size_t size = 0;
};

std::map<std::string, LogMark> MarkLogs(const std::string& dir, const std::string& job) {
  std::map<std::string, LogMark> marks;
  for (const std::string& path : TrainerLogs(dir, job)) {
    LogMark& mark = marks[path];
    mark.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (mark.fd >= 0 && fstat(mark.fd, &st) == 0) {
      mark.inode = st.st_ino;
      mark.size = static_cast<size_t>(st.st_size);
    }
  }
  return marks;
}

// How many lines of the job's trainer logs contain `text`, counting only what was written after
// `since` (all of a log that is not the file marked).
int CountInLogs(const std::string& dir, const std::string& job, const std::string& text,
                const std::map<std::string, LogMark>& since = {}) {
  int n = 0;
  for (const std::string& path : TrainerLogs(dir, job)) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    const std::string log = ReadFile(path);
    auto mark = since.find(path);
    size_t at = mark != since.end() && mark->second.inode == st.st_ino ? mark->second.size : 0;
    for (; (at = log.find(text, at)) != std::string::npos; at += text.size()) ++n;
  }
  return n;
}

std::map<std::string, std::string> PodUids(kube::HttpKubeClient& client, const std::string& job) {
  std::map<std::string, std::string> uids;
  absl::StatusOr<json> pods =
      client.List(kube::kPods, "default", absl::StrCat("cohort.dev/job-name=", job));
  if (!pods.ok()) return uids;
  for (const json& p : (*pods)["items"]) {
    if (p["metadata"].contains("deletionTimestamp")) continue;
    uids[p["metadata"].value("name", "")] = p["metadata"].value("uid", "");
  }
  return uids;
}

std::string Phase(kube::HttpKubeClient& client, const std::string& job) {
  absl::StatusOr<json> j = client.Get(op::kDistributedJobs, "default", job);
  if (!j.ok() || !j->contains("status")) return "";
  return (*j)["status"].value("phase", "");
}

// Leaves the local cluster's directory behind, with the operator's log in it.
void KeepDir(LocalOperator& local) {
  std::ofstream(local.dir + "/operator.log") << local.op->Output();
  std::ofstream(local.dir + "/cluster.log") << local.cluster->Output();
  local.dir.clear();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "recovery-bench: %s\n", message.c_str());
  return 1;
}

struct Run1 {
  double gone = -1, registered = -1, barrier = -1;
  double detected = -1;  // --lose node only.
  int replaced = 0;
  int created = 0;  // --lose node only: pods created after the loss before every rank registered.
};

// What a run takes away: rank 1's process (SIGKILL), or pod 1's node (its kubelet SIGKILLed).
enum class Loss { kProcess, kNode };

// One job: created, trained, a rank killed, measured, finished (or, one that would train on,
// deleted once measured) and gone.
absl::StatusOr<Run1> Measure(kube::HttpKubeClient& client, const std::string& dir,
                             const std::string& job, int pods, int per_pod,
                             const std::string& strategy, const Workload& w,
                             Loss loss = Loss::kProcess, int spares = 0) {
  const int ranks = pods * per_pod;
  absl::StatusOr<json> created = client.Create(op::kDistributedJobs, "default",
                                               JobObject(job, pods, per_pod, strategy, w, spares));
  if (!created.ok()) return created.status();
  absl::Time deadline = absl::Now() + absl::Minutes(5);
  auto ready_spares = [&] {
    absl::StatusOr<json> j = client.Get(op::kDistributedJobs, "default", job);
    return j.ok() ? (*j)["status"].value("readySpares", 0) : 0;
  };
  while (CountInLogs(dir, job, w.trains) < ranks || ready_spares() < spares) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          job, ": not every rank trains (or the spares are not ready) after 5 minutes; see ", dir,
          "/pods"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::map<std::string, std::string> before = PodUids(client, job);
  const std::map<int, pid_t> old = Trainers(w.binary, job, 0);
  if (static_cast<int>(old.size()) != ranks || !old.count(1)) {
    return absl::InternalError(
        absl::StrCat(job, ": found ", old.size(), " ", w.binary, " processes of ", ranks));
  }
  Run1 r;
  const std::map<std::string, LogMark> marks = MarkLogs(dir, job);
  std::string node;  // Pod 1's, for --lose node.
  if (loss == Loss::kNode) {
    absl::StatusOr<json> pod1 = client.Get(kube::kPods, "default", absl::StrCat(job, "-1"));
    if (!pod1.ok()) return pod1.status();
    node = (*pod1)["spec"].value("nodeName", "");
  }
  // A spare's name (<job>-spare<n>): the new spare is not a pod created for the slot.
  auto is_spare = [&](const std::string& pod) {
    return absl::StartsWith(pod, absl::StrCat(job, "-spare"));
  };
  const absl::Time killed = absl::Now();
  if (loss == Loss::kNode) {
    if (absl::Status s = local::LoseLocalNode(dir, node); !s.ok()) return s;
  } else {
    kill(old.at(1), SIGKILL);
  }
  deadline = killed + absl::Minutes(5);
  while (r.gone < 0 || r.registered < 0 || r.barrier < 0) {
    if (absl::Now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(job, ": attempt 1 never ran"));
    const double t = absl::ToDoubleSeconds(absl::Now() - killed);
    if (r.gone < 0 &&
        std::all_of(old.begin(), old.end(), [](const auto& e) { return kill(e.second, 0) != 0; })) {
      r.gone = t;
    }
    if (loss == Loss::kNode && r.detected < 0 && Phase(client, job) != "Running") r.detected = t;
    if (r.registered < 0 && CountInLogs(dir, job, w.registered, marks) >= ranks) {
      r.registered = t;
      if (loss == Loss::kNode) {
        for (const auto& [pod, uid] : PodUids(client, job)) {
          r.created += !before.count(pod) && !is_spare(pod);
        }
      }
    }
    if (r.barrier < 0 && CountInLogs(dir, job, w.barrier, marks) >= ranks) r.barrier = t;
    absl::SleepFor(kPoll);
  }
  const std::map<std::string, std::string> after = PodUids(client, job);
  for (const auto& [pod, uid] : before) {
    if (is_spare(pod)) continue;  // A spare that took a slot replaced nothing.
    r.replaced += after.count(pod) && after.at(pod) == uid ? 0 : 1;
  }
  if (w.finishes) {
    while (Phase(client, job) != "Succeeded") {
      if (absl::Now() > deadline)
        return absl::DeadlineExceededError(absl::StrCat(job, ": did not succeed"));
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  client.Delete(op::kDistributedJobs, "default", job).IgnoreError();
  while (!PodUids(client, job).empty() || !Trainers(w.binary, job, 1).empty()) {
    if (absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return r;
}

// How long `n` processes of `argv` started at once take until the last has exited.
double StartFloor(const std::vector<std::string>& argv, int n) {
  std::vector<Subprocess> children;
  const absl::Time start = absl::Now();
  for (int i = 0; i < n; ++i) {
    Subprocess::Options options(argv, {}, /*capture_output=*/false);
    options.output_path = "/dev/null";
    absl::StatusOr<Subprocess> child = Subprocess::Start(options);
    if (child.ok()) children.push_back(*std::move(child));
  }
  for (Subprocess& c : children) c.Wait();
  return absl::ToDoubleSeconds(absl::Now() - start);
}

json Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return json::object();
  return {{"median", v[v.size() / 2]}, {"worst", v.back()}};
}

int Run(int argc, char** argv) {
  int pods = 8, per_pod = 4, runs = 5;
  std::string runtime = "process";
  CLI::App app{
      "recovery-bench: a gang restart in place beside recreating the pods, or a lost node with a "
      "hot "
      "spare beside one without"};
  app.add_option("--pods", pods, "pods of the job")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  app.add_option("--processes-per-pod", per_pod, "processes per pod")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--runs", runs, "runs of each strategy")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--runtime", runtime, "the local kubelet's runtime")
      ->check(CLI::IsMember({"process", "podman"}))
      ->capture_default_str();
  int step_ms = 5;
  app.add_option("--step-ms", step_ms,
                 "test-trainer's step time while attempt 0 trains (process runtime)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  std::string lose = "process";
  app.add_option("--lose", lose,
                 "what a run takes away: rank 1's process (InPlace beside Recreate), or pod 1's "
                 "node (a job with "
                 "a hot spare beside one without)")
      ->check(CLI::IsMember({"process", "node"}))
      ->capture_default_str();
  bool keep = false;
  app.add_flag("--keep", keep,
               "keep the local cluster's directory (pods' logs; the operator's, at debug level, in "
               "operator.log; the cluster's in cluster.log)");
  CLI11_PARSE(app, argc, argv);
  InitLogging("recovery-bench");
  signal(SIGPIPE, SIG_IGN);

  const Workload workload = runtime == "podman" ? ContainerWorkload() : ProcessWorkload(step_ms);
  if (runtime == "podman") {
    // The settings podman needs on sandboxed machines (docs/images.md), unless the caller has its
    // own.
    setenv("CONTAINERS_CONF", COHORT_SOURCE_DIR "/images/containers.conf", /*overwrite=*/0);
    absl::StatusOr<Subprocess> exists =
        Subprocess::Start(Subprocess::Options{{"podman", "image", "exists", kDemoImage}});
    if (!exists.ok() || Subprocess::ExitCodeOf(exists->Wait()) != 0) {
      return Fail(
          absl::StrCat(kDemoImage, " is not in podman's local store: build it with `make images`"));
    }
  }
  std::vector<double> floors;
  for (int i = 0; i < 5; ++i) floors.push_back(StartFloor(workload.floor_argv, pods * per_pod));

  const Loss loss = lose == "node" ? Loss::kNode : Loss::kProcess;
  // Losing nodes: a node per pod (the job's pods, its spare, the new spare or the replacement), and
  // one more for each node a run loses; pods stuck terminating on a lost node are force-deleted 2 s
  // after their grace period.
  std::vector<std::string> cluster_flags = {"--runtime", runtime, "--max-pods", "0"};
  std::vector<std::string> operator_flags;
  if (loss == Loss::kNode) {
    cluster_flags = {"--runtime",
                     runtime,
                     "--max-pods",
                     "1",
                     "--nodes",
                     absl::StrCat(pods + 2 + 2 * runs),
                     "--node-monitor-grace-period",
                     "2"};
    operator_flags = {"--force-delete-after", "2"};
  }
  if (keep) operator_flags.insert(operator_flags.end(), {"--log-level", "debug"});
  absl::StatusOr<std::unique_ptr<LocalOperator>> local =
      StartLocalOperator("recovery-bench", cluster_flags, operator_flags);
  if (!local.ok()) return Fail(std::string(local.status().message()));
  kube::HttpKubeClient& client = *(*local)->client;
  const std::string dir = (*local)->dir;

  std::map<std::string, std::map<std::string, std::vector<double>>>
      figures;  // strategy -> figure -> runs.
  const std::vector<std::string> variants = loss == Loss::kNode
                                                ? std::vector<std::string>{"Spare", "NoSpare"}
                                                : std::vector<std::string>{"InPlace", "Recreate"};
  for (int i = 0; i < runs; ++i) {
    for (const std::string& strategy : variants) {
      const std::string job = absl::StrCat("rb-", absl::AsciiStrToLower(strategy), "-", i);
      absl::StatusOr<Run1> r = loss == Loss::kNode
                                   ? Measure(client, dir, job, pods, per_pod, "InPlace", workload,
                                             loss, strategy == "Spare" ? 1 : 0)
                                   : Measure(client, dir, job, pods, per_pod, strategy, workload);
      if (!r.ok()) {
        KeepDir(**local);
        return Fail(
            absl::StrCat(r.status().message(), " (the cluster's directory is kept: ", dir, ")"));
      }
      json one = {{"strategy", strategy},
                  {"run", i},
                  {"pods", pods},
                  {"processes_per_pod", per_pod},
                  {"ranks", pods * per_pod},
                  {"runtime", runtime},
                  {"gone_s", r->gone},
                  {"registered_s", r->registered},
                  {"barrier_s", r->barrier},
                  {"pods_replaced", r->replaced}};
      if (loss == Loss::kNode) {
        one["lost"] = "node";
        one["detected_s"] = r->detected;
        one["pods_created"] = r->created;
        figures[strategy]["detected_s"].push_back(r->detected);
        figures[strategy]["pods_created"].push_back(r->created);
        figures[strategy]["registered_after_detected_s"].push_back(r->registered - r->detected);
      }
      std::printf("%s\n", one.dump().c_str());
      std::fflush(stdout);
      figures[strategy]["gone_s"].push_back(r->gone);
      figures[strategy]["registered_s"].push_back(r->registered);
      figures[strategy]["barrier_s"].push_back(r->barrier);
      figures[strategy]["pods_replaced"].push_back(r->replaced);
    }
  }
  json summary = {{"summary", true},
                  {"pods", pods},
                  {"processes_per_pod", per_pod},
                  {"ranks", pods * per_pod},
                  {"runs", runs},
                  {"runtime", runtime},
                  {"start_floor_s", Stats(floors)}};
  for (auto& [strategy, by_figure] : figures) {
    for (auto& [figure, values] : by_figure) summary[strategy][figure] = Stats(values);
  }
  for (const char* figure : {"gone_s", "registered_s", "barrier_s"}) {
    if (loss == Loss::kNode) {
      const double spare = summary["Spare"][figure]["median"];
      const double none = summary["NoSpare"][figure]["median"];
      summary["no_spare_over_spare"][figure] = spare > 0 ? none / spare : 0;
      continue;
    }
    const double in_place = summary["InPlace"][figure]["median"];
    const double recreate = summary["Recreate"][figure]["median"];
    summary["recreate_over_in_place"][figure] = in_place > 0 ? recreate / in_place : 0;
  }
  if (loss == Loss::kNode) {
    summary["lost"] = "node";
    // The target: with a spare, every rank registered within the detection time + 2 s (worst run).
    summary["spare_within_detected_plus_2s"] =
        summary["Spare"]["registered_after_detected_s"]["worst"] <= 2.0;
  }
  std::printf("%s\n", summary.dump().c_str());
  if (keep) {
    KeepDir(**local);
    std::fprintf(stderr, "recovery-bench: the cluster's directory is kept: %s\n", dir.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) { return cohort::bench::Run(argc, argv); }
