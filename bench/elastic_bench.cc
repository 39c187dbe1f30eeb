// elastic-bench: elastic replica groups on the local control plane with real pods (sidecars,
// cohort-launch, demo-trainer processes), beside the same job without spec.elastic.
//
//   elastic-bench [--groups 4] [--pods-per-group 2] [--processes-per-pod 2] [--min-replicas 4]
//                 [--shrink-after 5] [--runs 5] [--runtime process|podman] [--wait-cap 30]
//                 [--keep]
//
// Each run starts a fresh cohort-local-cluster with a node per pod and one more, cordoned (room
// for one pod per node: --max-pods 1), and a real cohort-operator, creates a job of --groups
// replica groups of --pods-per-group pods of --processes-per-pod demo-trainer processes
// (restartBackoff 0s, checkpoints into a directory every pod sees), waits until every rank
// trains, and loses the node of the last pod (its kubelet SIGKILLed: a machine lost). Measured
// from there:
//   Elastic (spec.elastic: minReplicas, podsPerGroup, shrinkAfterSeconds):
//     shrunk_s     every rank of the smaller attempt trains (demo-trainer's "global batch" line)
//     then the cordoned node is uncordoned (capacity back), measured from there:
//     grown_s      every rank of the full-size attempt trains again
//     drain_to_full_s  from the drain's preemption notice reaching the ranks to every rank of the
//                  full-size attempt joined (by the trainers' log stamps): the grow's own cost,
//                  beside
//     restart_s    an in-place restart of the same job, from one trainer process SIGKILLed to
//                  every rank joined again: the floor the grow is held to (plus one checkpoint)
//     steps_lost   the step every rank resumed from, less the step they checkpointed at (0: none)
//     restarts     status.restarts at the end (the loss is one; the resizes count nothing)
//     then kubectl scale's path (the scale subresource): scale_down_s and scale_up_s, each to every
//     rank training at the new size, with their steps_lost.
//   Fixed (no spec.elastic): waited_s, how long the job stayed without training after the loss
//     (capped at --wait-cap; trains_again false: it waits until capacity returns), then back_s,
//     from the uncordon to every rank training again.
// Each run prints one JSON object per variant; the last line is a summary: median and worst of
// each figure, and whether the targets held (shrunk within shrinkAfterSeconds + 2 s; the grow no
// more than an in-place restart plus 1 s of checkpoint, worst runs).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
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
#include "common/files.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "kube/http_kube_client.h"
#include "localcluster/lose_node.h"
#include "operator/api/distributed_job.h"

namespace cohort::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr absl::Duration kPoll = absl::Milliseconds(20);
constexpr absl::Duration kPatience = absl::Minutes(3);
constexpr char kDemoImage[] = "localhost/cohort-demo:dev";

struct Shape {
  int groups = 4, pods_per_group = 2, per_pod = 2, min_replicas = 4, shrink_after = 5;
  int pods() const { return groups * pods_per_group; }
};

json JobObject(const std::string& name, const Shape& s, bool elastic, const std::string& ckpt) {
  json spec = {
      {"replicas", s.pods()},
      {"processesPerPod", s.per_pod},
      {"restartBackoff", "0s"},
      {"maxRestarts", 5},
      {"template",
       {{"spec",
         {{"terminationGracePeriodSeconds", 2},
          {"containers",
           json::array(
               {{{"name", "trainer"},
                 {"image", kDemoImage},
                 {"command", json::array({"demo-trainer", "--steps", "100000000", "--step-ms", "20",
                                          "--checkpoint-dir", "/ckpt"})},
                 {"volumeMounts", json::array({{{"name", "ckpt"}, {"mountPath", "/ckpt"}}})}}})},
          {"volumes", json::array({{{"name", "ckpt"}, {"hostPath", {{"path", ckpt}}}}})}}}}}};
  if (elastic) {
    spec["elastic"] = {{"minReplicas", s.min_replicas},
                       {"podsPerGroup", s.pods_per_group},
                       {"shrinkAfterSeconds", s.shrink_after}};
  }
  return {{"apiVersion", "cohort.dev/v1alpha1"},
          {"kind", "DistributedJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

// Every trainer log of the job's pods (there are or were): its text, by path.
std::map<std::string, std::string> Logs(const std::string& dir, const std::string& job) {
  std::map<std::string, std::string> logs;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(fs::path(dir) / "pods", ec)) {
    if (absl::StartsWith(e.path().filename().string(), absl::StrCat("default_", job, "-")))
      logs[(e.path() / "trainer.log").string()] =
          ReadFile((e.path() / "trainer.log").string()).value_or("");
  }
  return logs;
}
using Mark = std::map<std::string, size_t>;
Mark MarkNow(const std::string& dir, const std::string& job) {
  Mark m;
  for (const auto& [path, text] : Logs(dir, job)) m[path] = text.size();
  return m;
}
// The lines written since `since` that match `pattern`, every log together.
std::vector<std::smatch> Since(const std::string& dir, const std::string& job, const Mark& since,
                               const std::regex& pattern, std::vector<std::string>* keep) {
  std::vector<std::smatch> out;
  keep->clear();
  for (auto& [path, text] : Logs(dir, job)) {
    auto it = since.find(path);
    keep->push_back(text.substr(it != since.end() && it->second <= text.size() ? it->second : 0));
  }
  for (const std::string& text : *keep) {
    for (auto m = std::sregex_iterator(text.begin(), text.end(), pattern);
         m != std::sregex_iterator(); ++m)
      out.push_back(*m);
  }
  return out;
}

// Waits until `ranks` ranks printed "global batch <b>: <ranks> ranks" since `since`; seconds
// from `from`, or -1 after kPatience.
double UntilTraining(const std::string& dir, const std::string& job, const Mark& since, int ranks,
                     absl::Time from, absl::Duration patience = kPatience) {
  const std::regex line(absl::StrCat(R"(global batch \d+: )", ranks, " ranks"));
  std::vector<std::string> keep;
  while (absl::Now() < from + patience) {
    if (static_cast<int>(Since(dir, job, since, line, &keep).size()) >= ranks)
      return absl::ToDoubleSeconds(absl::Now() - from);
    absl::SleepFor(kPoll);
  }
  return -1;
}

// The steps lost by a resize: the step every rank resumed from since `since`, less the one the
// ranks checkpointed at (-1 when they did not agree or did not say within 10 s: demo-trainer
// says where it resumed just after its "global batch" line).
int64_t StepsLost(const std::string& dir, const std::string& job, const Mark& since) {
  std::vector<std::string> keep;
  std::set<int64_t> saved, resumed;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       resumed.empty() && absl::Now() < give_up; absl::SleepFor(kPoll)) {
    saved.clear();
    for (const std::smatch& m :
         Since(dir, job, since, std::regex(R"(checkpoint written at step (\d+))"), &keep))
      saved.insert(std::stoll(m[1].str()));
    for (const std::smatch& m :
         Since(dir, job, since, std::regex(R"(resumed from the checkpoint at step (\d+))"), &keep))
      resumed.insert(std::stoll(m[1].str()));
  }
  if (saved.size() != 1 || resumed.size() != 1) return -1;
  return *resumed.begin() - *saved.begin();
}

// Seconds since midnight of a log line's stamp ("HH:MM:SS.mmm", common/log.h's, in local time),
// and of `t` as it would stamp it: the trainers' own clock for the stages between their lines.
double DayTime(const std::smatch& m, int first) {
  return std::stoi(m[first].str()) * 3600.0 + std::stoi(m[first + 1].str()) * 60.0 +
         std::stoi(m[first + 2].str()) + std::stoi(m[first + 3].str()) / 1000.0;
}
double DayTimeOf(absl::Time t) {
  const std::string stamp = absl::FormatTime("%H:%M:%E3S", t, absl::LocalTimeZone());
  const std::regex hms(R"((\d\d):(\d\d):(\d\d)\.(\d\d\d))");
  std::smatch m;
  return std::regex_search(stamp, m, hms) ? DayTime(m, 1) : -1;
}
// From the ranks' first line matching `from` (or `start`, a time of day, when `from` is empty)
// to the last of `ranks` lines "process R of <ranks> joined the job" since `since`: -1 when
// there are not as many.
double StageSeconds(const std::string& dir, const std::string& job, const Mark& since,
                    const std::string& from, double start, int ranks) {
  std::vector<std::string> keep;
  const std::string stamp = R"((\d\d):(\d\d):(\d\d)\.(\d\d\d) INFO libdist\] )";
  std::vector<std::smatch> joined =
      Since(dir, job, since,
            std::regex(absl::StrCat(stamp, R"(process \d+ of )", ranks, " joined the job")), &keep);
  if (static_cast<int>(joined.size()) < ranks) return -1;
  double last = 0;
  for (const std::smatch& m : joined) last = std::max(last, DayTime(m, 1));
  if (!from.empty()) {
    std::vector<std::string> keep_from;
    std::vector<std::smatch> first =
        Since(dir, job, since, std::regex(absl::StrCat(stamp, from)), &keep_from);
    if (first.empty()) return -1;
    start = DayTime(first[0], 1);
    for (const std::smatch& m : first) start = std::min(start, DayTime(m, 1));
  }
  return last - start;
}

json Status(kube::HttpKubeClient& client, const std::string& job) {
  absl::StatusOr<json> j = client.Get(op::kDistributedJobs, "default", job);
  return j.ok() ? j->value("status", json::object()) : json::object();
}
absl::Status Cordon(kube::HttpKubeClient& client, const std::string& node, bool on) {
  return client
      .MergePatch(kube::kNodes, "", node,
                  {{"spec", {{"unschedulable", on ? json(true) : json(nullptr)}}}})
      .status();
}

// The pid of rank `rank`'s demo-trainer of `job`.
pid_t TrainerPid(const std::string& job, int rank) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc", ec)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const std::string cmd = ReadFile((e.path() / "cmdline").string()).value_or("");
    if (fs::path(cmd.substr(0, cmd.find('\0'))).filename() != "demo-trainer") continue;
    std::vector<std::string> vars =
        absl::StrSplit(ReadFile((e.path() / "environ").string()).value_or(""), '\0');
    std::set<std::string> env(vars.begin(), vars.end());
    if (env.count(absl::StrCat("COHORT_JOB_NAME=", job)) &&
        env.count(absl::StrCat("COHORT_PROCESS_ID=", rank)))
      return pid;
  }
  return -1;
}

// Creates the job (`elastic` or not), waits until every rank trains and loses the node of its
// last pod (no room anywhere: the spare node is cordoned): where the logs stood, and when.
struct Loss {
  Mark mark;
  absl::Time at;
};
absl::StatusOr<Loss> StartAndLoseLastNode(LocalOperator& local, const Shape& s,
                                          const std::string& job, bool elastic) {
  kube::HttpKubeClient& client = *local.client;
  const std::string& dir = local.dir;
  const std::string ckpt = absl::StrCat(dir, "/ckpt-", job);
  fs::create_directories(ckpt);
  fs::permissions(ckpt, fs::perms::all);
  absl::StatusOr<json> made =
      client.Create(op::kDistributedJobs, "default", JobObject(job, s, elastic, ckpt));
  if (!made.ok()) return made.status();
  if (UntilTraining(dir, job, {}, s.pods() * s.per_pod, absl::Now()) < 0)
    return absl::DeadlineExceededError(absl::StrCat(job, ": not every rank trains"));
  absl::StatusOr<json> last =
      client.Get(kube::kPods, "default", absl::StrCat(job, "-", s.pods() - 1));
  if (!last.ok()) return last.status();
  Loss loss{MarkNow(dir, job), absl::Now()};
  if (absl::Status st = local::LoseLocalNode(dir, (*last)["spec"].value("nodeName", "")); !st.ok())
    return st;
  return loss;
}

absl::StatusOr<json> RunElastic(LocalOperator& local, const Shape& s, const std::string& job) {
  kube::HttpKubeClient& client = *local.client;
  const std::string& dir = local.dir;
  const int full = s.pods() * s.per_pod;
  const int smaller = (s.pods() - s.pods_per_group) * s.per_pod;
  json r = {{"variant", "Elastic"}};
  absl::StatusOr<Loss> lost = StartAndLoseLastNode(local, s, job, /*elastic=*/true);
  if (!lost.ok()) return lost.status();
  Mark mark = std::move(lost->mark);
  absl::Time t = lost->at;
  r["shrunk_s"] = UntilTraining(dir, job, mark, smaller, t);
  if (r["shrunk_s"] < 0) return absl::DeadlineExceededError(absl::StrCat(job, ": never shrank"));
  // Capacity back.
  mark = MarkNow(dir, job);
  t = absl::Now();
  if (absl::Status st = Cordon(client, absl::StrCat("node-", s.pods()), false); !st.ok()) return st;
  r["grown_s"] = UntilTraining(dir, job, mark, full, t);
  if (r["grown_s"] < 0) return absl::DeadlineExceededError(absl::StrCat(job, ": never grew"));
  // The grow's own cost, by the trainers' clock: from the drain's notice reaching them to every
  // rank of the full-size attempt joined (the sync point, the checkpoint, the restart).
  r["drain_to_full_s"] = StageSeconds(dir, job, mark, "preemption notice from process", 0, full);
  r["grow_steps_lost"] = StepsLost(dir, job, mark);
  // The floor: an in-place restart of the same job.
  absl::SleepFor(absl::Seconds(1));  // Past the first barrier of the grown attempt.
  const pid_t victim = TrainerPid(job, 1);
  if (victim < 0) return absl::InternalError(absl::StrCat(job, ": rank 1's trainer not found"));
  mark = MarkNow(dir, job);
  t = absl::Now();
  kill(victim, SIGKILL);
  if (UntilTraining(dir, job, mark, full, t) < 0)
    return absl::DeadlineExceededError(absl::StrCat(job, ": never restarted"));
  // The same end point, from the kill.
  r["restart_s"] = StageSeconds(dir, job, mark, "", DayTimeOf(t), full);
  // kubectl scale's path: the scale subresource, down a group and back up.
  for (const auto& [figure, replicas] :
       {std::pair{"scale_down", s.pods() - s.pods_per_group}, std::pair{"scale_up", s.pods()}}) {
    absl::SleepFor(absl::Seconds(1));
    mark = MarkNow(dir, job);
    t = absl::Now();
    const json patch = {{"spec", {{"replicas", replicas}}}};
    absl::StatusOr<json> scaled =
        client.Call("PATCH",
                    absl::StrCat("/apis/cohort.dev/v1alpha1/namespaces/default/distributedjobs/",
                                 job, "/scale"),
                    &patch, "application/merge-patch+json");
    if (!scaled.ok()) return scaled.status();
    r[absl::StrCat(figure, "_s")] = UntilTraining(dir, job, mark, replicas * s.per_pod, t);
    r[absl::StrCat(figure, "_steps_lost")] = StepsLost(dir, job, mark);
  }
  const json st = Status(client, job);
  r["restarts"] = st.value("restarts", 0);
  client.Delete(op::kDistributedJobs, "default", job).IgnoreError();
  return r;
}

absl::StatusOr<json> RunFixed(LocalOperator& local, const Shape& s, const std::string& job,
                              absl::Duration wait_cap) {
  kube::HttpKubeClient& client = *local.client;
  const std::string& dir = local.dir;
  const int full = s.pods() * s.per_pod;
  json r = {{"variant", "Fixed"}};
  absl::StatusOr<Loss> lost = StartAndLoseLastNode(local, s, job, /*elastic=*/false);
  if (!lost.ok()) return lost.status();
  Mark mark = std::move(lost->mark);
  absl::Time t = lost->at;
  // Any size: does it train again at all before capacity returns?
  const std::regex any(R"(global batch \d+: \d+ ranks)");
  std::vector<std::string> keep;
  bool trains = false;
  while (absl::Now() < t + wait_cap && !trains) {
    trains = static_cast<int>(Since(dir, job, mark, any, &keep).size()) >= full;
    absl::SleepFor(kPoll);
  }
  r["waited_s"] = absl::ToDoubleSeconds(absl::Now() - t);
  r["trains_again"] = trains;
  mark = MarkNow(dir, job);
  t = absl::Now();
  if (absl::Status st = Cordon(client, absl::StrCat("node-", s.pods()), false); !st.ok()) return st;
  r["back_s"] = UntilTraining(dir, job, mark, full, t);
  r["restarts"] = Status(client, job).value("restarts", 0);
  client.Delete(op::kDistributedJobs, "default", job).IgnoreError();
  return r;
}

json Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return json::object();
  return {{"median", v[v.size() / 2]}, {"worst", v.back()}};
}

int Run(int argc, char** argv) {
  Shape s;
  int runs = 5, wait_cap_s = 30;
  std::string runtime = "process";
  bool keep = false;
  CLI::App app{
      "elastic-bench: elastic replica groups (shrink, grow, kubectl scale) beside a job "
      "without spec.elastic, on the local control plane"};
  app.add_option("--groups", s.groups, "replica groups the job wants")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_option("--pods-per-group", s.pods_per_group, "pods of a replica group")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--processes-per-pod", s.per_pod, "processes per pod")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  app.add_option("--min-replicas", s.min_replicas, "spec.elastic.minReplicas (pods)")
      ->capture_default_str();
  app.add_option("--shrink-after", s.shrink_after, "spec.elastic.shrinkAfterSeconds")
      ->check(CLI::Range(0, 600))
      ->capture_default_str();
  app.add_option("--runs", runs, "runs of each variant")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--runtime", runtime, "the local kubelet's runtime")
      ->check(CLI::IsMember({"process", "podman"}))
      ->capture_default_str();
  app.add_option("--wait-cap", wait_cap_s,
                 "how long the job without spec.elastic is watched after the loss (seconds)")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_flag("--keep", keep, "keep each run's local cluster directory (pods' logs)");
  CLI11_PARSE(app, argc, argv);
  InitLogging("elastic-bench");
  signal(SIGPIPE, SIG_IGN);
  if (runtime == "podman") {
    setenv("CONTAINERS_CONF", COHORT_SOURCE_DIR "/images/containers.conf", /*overwrite=*/0);
    absl::StatusOr<Subprocess> exists =
        Subprocess::Start(Subprocess::Options{{"podman", "image", "exists", kDemoImage}});
    if (!exists.ok() || Subprocess::ExitCodeOf(exists->Wait()) != 0) {
      std::fprintf(stderr, "elastic-bench: %s is not in podman's local store: `make images`\n",
                   kDemoImage);
      return 1;
    }
  }
  std::map<std::string, std::map<std::string, std::vector<double>>> figures;
  for (int i = 0; i < runs; ++i) {
    for (const char* variant : {"Elastic", "Fixed"}) {
      // A node per pod and one more, cordoned: the capacity a loss leaves nowhere to go.
      absl::StatusOr<std::unique_ptr<LocalOperator>> local =
          StartLocalOperator("elastic-bench",
                             {"--runtime", runtime, "--max-pods", "1", "--nodes",
                              absl::StrCat(s.pods() + 1), "--node-monitor-grace-period", "2"},
                             {"--force-delete-after", "2"});
      if (!local.ok()) {
        std::fprintf(stderr, "elastic-bench: %s\n", std::string(local.status().message()).c_str());
        return 1;
      }
      if (absl::Status c = Cordon(*(*local)->client, absl::StrCat("node-", s.pods()), true);
          !c.ok()) {
        std::fprintf(stderr, "elastic-bench: cordon: %s\n", std::string(c.message()).c_str());
        return 1;
      }
      const std::string job = absl::StrCat("eb-", absl::AsciiStrToLower(variant), "-", i);
      absl::StatusOr<json> r = std::string(variant) == "Elastic"
                                   ? RunElastic(**local, s, job)
                                   : RunFixed(**local, s, job, absl::Seconds(wait_cap_s));
      if (!r.ok() || keep) {
        std::ofstream((*local)->dir + "/operator.log") << (*local)->op->Output();
        std::ofstream((*local)->dir + "/cluster.log") << (*local)->cluster->Output();
        std::fprintf(stderr, "elastic-bench: %s (kept: %s)\n",
                     r.ok() ? "run done" : std::string(r.status().message()).c_str(),
                     (*local)->dir.c_str());
        (*local)->dir.clear();
        if (!r.ok()) return 1;
      }
      (*r)["run"] = i;
      (*r)["groups"] = s.groups;
      (*r)["pods_per_group"] = s.pods_per_group;
      (*r)["processes_per_pod"] = s.per_pod;
      (*r)["min_replicas"] = s.min_replicas;
      (*r)["shrink_after_s"] = s.shrink_after;
      (*r)["runtime"] = runtime;
      std::printf("%s\n", r->dump().c_str());
      std::fflush(stdout);
      for (const auto& [key, value] : r->items()) {
        if (absl::EndsWith(key, "_s") && key != "shrink_after_s")
          figures[variant][key].push_back(value);
        if (absl::EndsWith(key, "steps_lost") || key == "restarts")
          figures[variant][key].push_back(value.get<double>());
      }
    }
  }
  json summary = {{"summary", true},
                  {"runs", runs},
                  {"runtime", runtime},
                  {"groups", s.groups},
                  {"pods_per_group", s.pods_per_group},
                  {"processes_per_pod", s.per_pod},
                  {"shrink_after_s", s.shrink_after}};
  for (auto& [variant, by_figure] : figures) {
    for (auto& [figure, values] : by_figure) summary[variant][figure] = Stats(values);
  }
  const json& e = summary["Elastic"];
  summary["shrunk_within_shrink_after_plus_2s"] =
      e["shrunk_s"]["worst"].get<double>() <= s.shrink_after + 2.0;
  summary["grow_within_restart_plus_1s"] =
      e["drain_to_full_s"]["worst"].get<double>() <= e["restart_s"]["worst"].get<double>() + 1.0;
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace cohort::bench

int main(int argc, char** argv) { return cohort::bench::Run(argc, argv); }
