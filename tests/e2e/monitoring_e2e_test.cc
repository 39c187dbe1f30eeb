// The monitoring that ships in charts/cohort, proven against a real Prometheus (Debian's) scraping
// a real job: cohort-local-cluster, cohort-operator and a DistributedJob of demo-trainer ranks.
// Debian's Prometheus has no Kubernetes discovery, so the sidecar targets are written to a
// file_sd file the way the chart's PodMonitor selects and labels them (running pods managed by
// cohort-operator, port "metrics", cohort.dev/job-name -> cohort_job, cohort.dev/restart-attempt ->
// restart_attempt), and the operator is a static target. Prometheus loads the chart's rules file
// itself; every panel query of the chart's dashboards is asked of it.
//
// One test, in the order a job lives: healthy (every target up, every panel has data, no alert
// fires), a trainer killed (restart by cause, detect and recovery times, CohortJobRestarted), a pod
// evicted (a preemption, CohortJobPreempted), a trainer stopped with SIGSTOP (CohortRankNoProgress
// names its rank).

#include <signal.h>
#include <sys/types.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "common/process/watched_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kube/kube_client.h"
#include "operator/api/distributed_job.h"
#include "tests/common/python_environment.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kJob[] = "mon";
constexpr int kRanks = 3;

// Debian's prometheus on a free port of loopback, scraping what Targets() writes.
class Prometheus {
 public:
  Prometheus(const std::string& dir, int operator_port) : dir_(dir) {
    fs::create_directories(dir_);
    WriteTargets(json::array());
    std::ofstream(dir_ + "/prometheus.yml") << absl::StrReplaceAll(
        R"(global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - RULES
scrape_configs:
  - job_name: cohort-sidecars
    file_sd_configs:
      - files: [DIR/sidecars.json]
  - job_name: cohort-operator
    static_configs:
      - targets: ["127.0.0.1:OPERATOR_PORT"]
        labels: {namespace: cohort-system}
)",
        {{"RULES", COHORT_SOURCE_DIR "/charts/cohort/rules/cohort-rules.yaml"},
         {"DIR", dir_},
         {"OPERATOR_PORT", absl::StrCat(operator_port)}});
    absl::StatusOr<std::unique_ptr<WatchedProcess>> p = WatchedProcess::Start(
        {"prometheus", "--config.file=" + dir_ + "/prometheus.yml",
         "--storage.tsdb.path=" + dir_ + "/data", "--web.listen-address=127.0.0.1:0"},
        {}, "prometheus");
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    process_ = *std::move(p);
    // ... msg="Listening on" address=127.0.0.1:PORT
    std::string line = process_->WaitForLine("msg=\"Listening on\"", absl::Seconds(30));
    if (!absl::SimpleAtoi(line.substr(line.rfind(':') + 1), &port_)) port_ = -1;
    EXPECT_GT(port_, 0) << "prometheus did not listen:\n" << process_->Output();
  }

  int port() const { return port_; }

  // Writes the sidecar targets as the chart's PodMonitor would select them from `pods`.
  void Targets(const std::vector<json>& pods) {
    json groups = json::array();
    for (const json& pod : pods) {
      const json& meta = pod["metadata"];
      json labels = meta.value("labels", json::object());
      if (labels.value("app.kubernetes.io/managed-by", "") != "cohort-operator") continue;
      if (pod["status"].value("phase", "") != "Running" || pod["status"].value("podIP", "").empty())
        continue;
      const int port = MetricsPort(pod);
      if (port == 0) continue;
      groups.push_back({{"targets", {absl::StrCat(pod["status"].value("podIP", ""), ":", port)}},
                        {"labels",
                         {{"namespace", meta.value("namespace", "")},
                          {"pod", meta.value("name", "")},
                          {"cohort_job", labels.value("cohort.dev/job-name", "")},
                          {"restart_attempt", labels.value("cohort.dev/restart-attempt", "")}}}});
    }
    WriteTargets(groups);
  }

  // GET /api/v1/<path> with `params`; the "data" member (null on any error).
  json Api(const std::string& path, const httplib::Params& params = {}) {
    httplib::Client http("127.0.0.1", port_);
    http.set_read_timeout(10, 0);
    auto res = http.Get(("/api/v1/" + path).c_str(), params, httplib::Headers{});
    if (!res || res->status != 200) return nullptr;
    json body = json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") return nullptr;
    return body["data"];
  }
  // The instant vector `expr` evaluates to (empty on error).
  json Query(const std::string& expr) {
    json data = Api("query", {{"query", expr}});
    return data.is_object() ? data.value("result", json::array()) : json::array();
  }
  // The single value of `expr`, or nullopt when it has none.
  std::optional<double> Value(const std::string& expr) {
    json result = Query(expr);
    if (result.size() != 1) return std::nullopt;
    double v = 0;
    if (!absl::SimpleAtod(result[0]["value"][1].get<std::string>(), &v)) return std::nullopt;
    return v;
  }
  // Alerts in state "firing" named `name`.
  std::vector<json> Firing(const std::string& name) {
    std::vector<json> out;
    json data = Api("alerts");
    if (!data.is_object()) return out;
    for (const json& a : data["alerts"]) {
      if (a.value("state", "") == "firing" && a["labels"].value("alertname", "") == name)
        out.push_back(a);
    }
    return out;
  }
  std::string Output() { return process_ ? process_->Output() : ""; }

 private:
  void WriteTargets(const json& groups) {
    std::string text = groups.dump(2);
    if (text == last_targets_) return;
    // Written whole and renamed, so Prometheus's file watcher never reads half a file.
    std::ofstream(dir_ + "/sidecars.json.tmp") << text;
    fs::rename(dir_ + "/sidecars.json.tmp", dir_ + "/sidecars.json");
    last_targets_ = text;
  }

  std::string dir_;
  std::unique_ptr<WatchedProcess> process_;
  int port_ = -1;
  std::string last_targets_;
};

// Every PromQL expression of a dashboard, by panel title, with the variables a Grafana user
// would have picked substituted.
std::vector<std::pair<std::string, std::string>> PanelQueries(const std::string& path,
                                                              const std::string& ns) {
  json dashboard = json::parse(ReadFile(path), nullptr, false);
  std::vector<std::pair<std::string, std::string>> out;
  if (dashboard.is_discarded()) return out;
  std::function<void(const json&)> walk = [&](const json& panels) {
    for (const json& panel : panels) {
      if (panel.contains("panels")) walk(panel["panels"]);
      for (const json& target : panel.value("targets", json::array())) {
        std::string expr = target.value("expr", "");
        if (expr.empty()) continue;
        expr = absl::StrReplaceAll(expr, {{"${namespace}", ns},
                                          {"$namespace", ns},
                                          {"${job}", kJob},
                                          {"$job", kJob},
                                          {"$__rate_interval", "10s"},
                                          {"$__interval", "2s"},
                                          {"$__range", "5m"}});
        out.emplace_back(panel.value("title", "?"), expr);
      }
    }
  };
  walk(dashboard.value("panels", json::array()));
  return out;
}

class MonitoringE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v prometheus >/dev/null 2>&1") != 0) {
      GTEST_SKIP()
          << "prometheus not found: install Debian's 'prometheus' package (make deps does)";
    }
    ASSERT_NE(cluster_.kubeconfig(), "") << "the local control plane did not start";
    operator_ = cluster_.StartOperator("operator");
    ASSERT_NE(operator_, nullptr);
    std::string line = operator_->WaitForLine("metrics on port ", absl::Seconds(30));
    ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &operator_port_)) << line;
    ASSERT_NE(operator_->WaitForLine("informers synced", absl::Seconds(30)), "");
    prometheus_ = std::make_unique<Prometheus>(cluster_.dir() + "/prometheus", operator_port_);
    ASSERT_GT(prometheus_->port(), 0);
  }
  void TearDown() override {
    // A stopped trainer must not outlive the test.
    for (pid_t pid : stopped_) kill(pid, SIGKILL);
  }

  // The job's pods as the API server has them, fed to Prometheus as targets.
  void RefreshTargets() {
    absl::StatusOr<json> pods = cluster_.client().List(
        kube::kPods, "default", "app.kubernetes.io/managed-by=cohort-operator");
    if (!pods.ok()) return;
    std::vector<json> items((*pods)["items"].begin(), (*pods)["items"].end());
    prometheus_->Targets(items);
  }
  // Until `done` holds, keeping the targets current (Prometheus is another process: polled).
  bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      RefreshTargets();
      if (done()) return true;
      absl::SleepFor(absl::Milliseconds(500));
    }
    RefreshTargets();
    return done();
  }
  bool ValueIs(const std::string& expr, const std::function<bool(double)>& ok) {
    std::optional<double> v = prometheus_->Value(expr);
    return v && ok(*v);
  }
  json Job() {
    absl::StatusOr<json> job = cluster_.client().Get(op::kDistributedJobs, "default", kJob);
    return job.ok() ? *job : json();
  }
  bool RunningAttempt(int attempt) {
    json job = Job();
    return Phase(job) == "Running" && StatusInt(job, "ready") == kRanks &&
           StatusInt(job, "restartAttempt") == attempt;
  }
  pid_t Trainer(int rank, int attempt) {
    return LocalControlPlane::FindProcess(
        "demo-trainer",
        {absl::StrCat("COHORT_JOB_NAME=", kJob), absl::StrCat("COHORT_PROCESS_ID=", rank),
         absl::StrCat("COHORT_RESTART_ATTEMPT=", attempt)});
  }
  std::string Alerts() {
    json data = prometheus_->Api("alerts");
    return data.is_null() ? "(no answer)" : data.dump(1);
  }

  LocalControlPlane cluster_;
  std::unique_ptr<WatchedProcess> operator_;
  int operator_port_ = 0;
  std::unique_ptr<Prometheus> prometheus_;
  std::vector<pid_t> stopped_;
};

// Panels that show nothing while a job is healthy: they count or time failures, list what is
// missing, or show a protocol the job does not use. Every other panel must have data.
bool MayBeEmptyWhileHealthy(const std::string& title) {
  static const std::set<std::string> kTitles = {
      // cohort-job.json
      "Gang restarts by cause", "Ranks not up", "Ranks not in the oldest barrier",
      "Barrier errors by result", "Gang restarts by cause (cumulative)",
      "Failure detect time p50 / p99", "Recovery time p50 / p99",
      "Recovery by restart kind and stage p50", "JAX port RPCs by method / code",
      "JAX waits p99 by method", "Barrier deadlines exceeded",
      "Replica groups",  // An elastic job's only.
      // cohort-operator.json
      "Jobs not running", "Most restarted jobs", "Restarts by cause",
      "Detect / recover / time to running p99"};
  return kTitles.count(title) > 0;
}

TEST_F(MonitoringE2E, HealthyJob_Failure_Eviction_StalledRank_AsTheDashboardsAndAlertsShowThem) {
  const absl::Time start = absl::Now();
  const std::string ckpt = cluster_.dir() + "/ckpt";
  fs::create_directories(ckpt);
  ASSERT_EQ(
      cluster_
          .Kubectl({"apply"}, absl::StrReplaceAll(
                                  R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: JOB
spec:
  replicas: RANKS
  maxRestarts: 3
  restartBackoff: 100ms
  hangPolicy: Alert
  template:
    spec:
      containers:
        - name: trainer
          image: ghcr.io/cohort-dev/cohort-demo:0.1.0
          command: ["demo-trainer", "--steps", "1000000", "--step-ms", "50", "--barrier-every", "5",
                    "--barrier-timeout-s", "600", "--checkpoint-dir", "CKPT"]
)",
                                  {{"JOB", kJob}, {"RANKS", absl::StrCat(kRanks)}, {"CKPT", ckpt}}))
          .exit_code,
      0);

  // 1. Healthy: every target up, every rank stepping, every panel with data, no alert firing.
  ASSERT_TRUE(WaitUntil([&] { return RunningAttempt(0); }, absl::Seconds(90))) << Job().dump(2);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ValueIs(R"(count(up{job="cohort-sidecars",cohort_job="mon"} == 1))",
                       [](double v) { return v == kRanks; }) &&
               ValueIs(R"(up{job="cohort-operator"})", [](double v) { return v == 1; }) &&
               ValueIs(R"(count(cohort_task_step{cohort_job="mon"} > 0))",
                       [](double v) { return v == kRanks; }) &&
               ValueIs(R"(cohort_job:goodput:ratio_rate1h{cohort_job="mon"})",
                       [](double v) { return v > 0; });
      },
      absl::Seconds(60)))
      << "targets:\n"
      << prometheus_->Api("targets").dump(1);
  json targets = prometheus_->Api("targets");
  ASSERT_TRUE(targets.is_object());
  for (const json& t : targets["activeTargets"]) {
    EXPECT_EQ(t.value("health", ""), "up") << t.dump(1);
    EXPECT_FALSE(t["labels"].contains("exported_rank"))
        << "a target label clobbered rank: " << t.dump(1);
  }
  EXPECT_EQ(targets["activeTargets"].size(), static_cast<size_t>(kRanks + 1));

  // Every panel of both dashboards, as a user would pick the variables: the job's namespace,
  // the operator's. The recording rules are evaluated apart from the scrapes, so their first
  // values may come a moment after the raw series': wait until every panel that must show data
  // does (or the time is up, and say which do not).
  std::vector<std::pair<std::string, std::string>> panels =
      PanelQueries(COHORT_SOURCE_DIR "/charts/cohort/dashboards/cohort-job.json", "default");
  for (auto& panel : PanelQueries(
           COHORT_SOURCE_DIR "/charts/cohort/dashboards/cohort-operator.json", "cohort-system")) {
    panels.push_back(panel);
  }
  EXPECT_GT(panels.size(), 20u) << "the dashboards were not read";
  std::vector<std::string> rejected, empty;
  auto check_panels = [&] {
    rejected.clear();
    empty.clear();
    for (const auto& [title, expr] : panels) {
      json data = prometheus_->Api("query", {{"query", expr}});
      if (!data.is_object()) {
        rejected.push_back(absl::StrCat(title, ": ", expr));
      } else if (data["result"].empty() && !MayBeEmptyWhileHealthy(title)) {
        empty.push_back(absl::StrCat(title, ": ", expr));
      }
    }
    return rejected.empty() && empty.empty();
  };
  WaitUntil(check_panels, absl::Seconds(30));
  EXPECT_THAT(rejected, ::testing::IsEmpty()) << "panel queries Prometheus rejected";
  EXPECT_THAT(empty, ::testing::IsEmpty()) << "panels without data for a healthy job";

  // A steady stretch, so that the rates (and the picture drawn at the end) show the job training:
  // every rank stepping through a whole 15 s window (its series existed 15 s ago).
  // Restarting in place, a pod keeps its target labels (restart_attempt is the attempt it was
  // created for): a replaced pod's series stop, its replacement's start.
  auto steady = [&] {
    return WaitUntil(
        [&] {
          return ValueIs(
              R"(count(rate(cohort_trainer_step_seconds_count{cohort_job="mon"}[15s]) > 2 )"
              R"(and on (pod, restart_attempt) (cohort_rank offset 15s)))",
              [](double v) { return v == kRanks; });
        },
        absl::Seconds(60));
  };
  EXPECT_TRUE(steady());

  json rules = prometheus_->Api("rules");
  ASSERT_TRUE(rules.is_object());
  int alerting = 0;
  for (const json& group : rules["groups"]) {
    for (const json& rule : group["rules"]) {
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump(1);
      if (rule.value("type", "") == "alerting") ++alerting;
    }
  }
  EXPECT_GT(alerting, 10);
  json alerts = prometheus_->Api("alerts");
  for (const json& a : alerts["alerts"]) EXPECT_NE(a.value("state", ""), "firing") << a.dump(1);

  // 2. A trainer killed: a gang restart by cause "signal", its detect and recovery times.
  pid_t victim = Trainer(1, 0);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return RunningAttempt(1); }, absl::Seconds(90))) << Job().dump(2);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ValueIs(
                   R"(cohort_operator_job_restarts_total{cohort_job="mon",job_namespace="default",cause="signal"})",
                   [](double v) { return v == 1; }) &&
               ValueIs(R"(cohort_operator_job_failure_detect_seconds_count{cohort_job="mon"})",
                       [](double v) { return v == 1; }) &&
               ValueIs(R"(cohort_operator_job_recovery_seconds_count{cohort_job="mon"})",
                       [](double v) { return v == 1; }) &&
               ValueIs(
                   R"(cohort_operator_job_recovery_stage_seconds_count{cohort_job="mon",restart="in_place",stage="running"})",
                   [](double v) { return v == 1; }) &&
               ValueIs(R"(cohort_operator_job_time_to_running_seconds_count{cohort_job="mon"})",
                       [](double v) { return v == 1; }) &&
               !prometheus_->Firing("CohortJobRestarted").empty();
      },
      absl::Seconds(30)))
      << Alerts();
  std::optional<double> detect =
      prometheus_->Value(R"(cohort_operator_job_failure_detect_seconds_sum{cohort_job="mon"})");
  ASSERT_TRUE(detect.has_value());
  EXPECT_LT(*detect, 10) << "a killed trainer is detected in seconds";
  for (const json& a : prometheus_->Firing("CohortJobRestarted")) {
    EXPECT_EQ(a["labels"].value("cohort_job", ""), kJob) << a.dump(1);
    EXPECT_EQ(a["labels"].value("cause", ""), "signal") << a.dump(1);
    EXPECT_THAT(a["annotations"].value("summary", ""), ::testing::HasSubstr(kJob));
  }

  // 3. A pod evicted: a preemption, counted apart from failures.
  LocalControlPlane::Result evicted = cluster_.Evict("default", absl::StrCat(kJob, "-2"));
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  ASSERT_TRUE(WaitUntil([&] { return RunningAttempt(2); }, absl::Seconds(90))) << Job().dump(2);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ValueIs(R"(cohort_operator_job_restarts_total{cohort_job="mon",cause="preempted"})",
                       [](double v) { return v == 1; }) &&
               ValueIs(R"(cohort_operator_job_recovery_seconds_count{cohort_job="mon"})",
                       [](double v) { return v == 2; }) &&
               !prometheus_->Firing("CohortJobPreempted").empty();
      },
      absl::Seconds(30)))
      << Alerts();
  EXPECT_TRUE(ValueIs(R"(sum(cohort_operator_job_restarts_total{cohort_job="mon"}))",
                      [](double v) { return v == 2; }));
  EXPECT_TRUE(ValueIs(R"(cohort_operator_job_phase{cohort_job="mon",phase="Running"})",
                      [](double v) { return v == 1; }));

  // 4. A trainer stopped (alive, heartbeating through its sidecar, making no progress): the
  // no-progress alert names its rank, not the ranks that then wait for it. The others wait for
  // it in the all-reduce or, when it stopped just before a barrier step, at the barrier: hence
  // --barrier-timeout-s 600 above, since the default 60 s would fail the job (cause crash)
  // before the alert's 60 s without progress plus its 1 m `for` have passed.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ValueIs(R"(count(cohort_task_step{cohort_job="mon"}))",
                       [](double v) { return v == kRanks; });
      },
      absl::Seconds(30)));
  EXPECT_TRUE(steady());
  pid_t stalled = Trainer(1, 2);
  ASSERT_GT(stalled, 0);
  stopped_.push_back(stalled);
  ASSERT_EQ(kill(stalled, SIGSTOP), 0);
  EXPECT_TRUE(WaitUntil([&] { return !prometheus_->Firing("CohortRankNoProgress").empty(); },
                        absl::Minutes(4)))
      << Alerts();
  for (const json& a : prometheus_->Firing("CohortRankNoProgress")) {
    EXPECT_EQ(a["labels"].value("rank", ""), "1") << a.dump(1);
    EXPECT_EQ(a["labels"].value("cohort_job", ""), kJob) << a.dump(1);
  }
  EXPECT_TRUE(ValueIs(R"(max(cohort_task_up{cohort_job="mon"}))", [](double v) { return v == 1; }))
      << "the stopped rank still heartbeats: only progress shows it";
  // Hang detection (hangPolicy: Alert, so the job keeps its stopped rank): the job's Hung
  // condition, its gauge (the dashboard's hung panel) and CohortJobHung, naming the stopped rank.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ValueIs(R"(cohort_operator_job_hung{cohort_job="mon"})",
                       [](double v) { return v == 1; }) &&
               !prometheus_->Firing("CohortJobHung").empty();
      },
      absl::Minutes(2)))
      << Alerts();
  for (const json& a : prometheus_->Firing("CohortJobHung")) {
    EXPECT_EQ(a["labels"].value("cohort_job", ""), kJob) << a.dump(1);
  }
  const json hung = Job();
  std::string hung_message;
  for (const json& c : hung["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Hung") hung_message = c.value("message", "");
  }
  EXPECT_THAT(hung_message, ::testing::StartsWith(absl::StrCat("rank 1 (pod ", kJob,
                                                               "-1, local 0): stopped reporting")))
      << hung.dump(2);
  // The evidence (docs/faults.md, "Hung ranks"): each waiting rank's own native stacks, inside
  // libdist, and its flight recorder; the stopped rank can write none, and its sidecar says so.
  const std::string evidence0 = "volumes/cohort-agent/dumps/attempt-2/rank-0/";
  std::string stacks0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        stacks0 = cluster_.ReadPodFile(absl::StrCat(kJob, "-0"), evidence0 + "stacks.txt");
        return !cluster_.ReadPodFile(absl::StrCat(kJob, "-0"), evidence0 + "dumped").empty();
      },
      absl::Seconds(30)));
  EXPECT_THAT(stacks0, ::testing::HasSubstr(", the main thread")) << stacks0;
  EXPECT_THAT(stacks0, ::testing::HasSubstr("dist::")) << stacks0;
  EXPECT_THAT(cluster_.ReadPodFile(absl::StrCat(kJob, "-0"), evidence0 + "flight_recorder.txt"),
              ::testing::HasSubstr("cohort flight recorder"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(
            cluster_.ReadPodFile(absl::StrCat(kJob, "-1"), "cohort-sidecar.log"),
            "rank 1 wrote no stacks");
      },
      absl::Seconds(40)));

  // 5. The job dashboard as a picture of this run (docs/observability.md shows one), drawn by
  // scripts/render_dashboard.py from this Prometheus: every panel query must succeed.
  std::string venv = PythonEnvironment("render-matplotlib-3.11.2", "matplotlib",
                                       {"matplotlib==3.11.2", "numpy==2.4.6"});
  if (venv.empty()) {
    std::cout << "PyPI unreachable: the dashboard picture is not drawn\n";
  } else {
    std::string png = absl::StrCat(COHORT_BUILD_DIR, "/monitoring/cohort-job-dashboard.png");
    fs::create_directories(fs::path(png).parent_path());
    fs::remove(png);
    absl::StatusOr<Subprocess> render = Subprocess::Start(Subprocess::Options{
        {absl::StrCat(venv, "/bin/python"), COHORT_SOURCE_DIR "/scripts/render_dashboard.py",
         "--prometheus", absl::StrCat("http://127.0.0.1:", prometheus_->port()), "--dashboard",
         COHORT_SOURCE_DIR "/charts/cohort/dashboards/cohort-job.json", "--var",
         "namespace=default", "--var", absl::StrCat("job=", kJob), "--start",
         absl::StrCat(absl::ToUnixSeconds(start)), "--end",
         absl::StrCat(absl::ToUnixSeconds(absl::Now())), "--strict", "--out", png},
        {},
        /*capture_output=*/false});
    ASSERT_TRUE(render.ok()) << render.status();
    EXPECT_EQ(Subprocess::ExitCodeOf(render->Wait()), 0) << "scripts/render_dashboard.py failed";
    std::error_code ec;
    EXPECT_GT(fs::file_size(png, ec), 50'000u) << png;
    std::cout << "the job dashboard of this run: " << png << "\n";
  }

  kill(stalled, SIGCONT);
  ASSERT_EQ(cluster_.Kubectl({"delete", "djob", kJob, "--wait=false"}).exit_code, 0);
}

}  // namespace
}  // namespace cohort::testing
