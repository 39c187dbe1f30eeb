// End to end: cohort-local-cluster (API server + kubelet), real kubectl, cohort-operator and
// DistributedJobs whose pods run test-trainer and cohort-sidecar as real processes that
// rendezvous through the injected environment.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "kube/conditions.h"
#include "operator/api/distributed_job.h"
#include "tests/common/python_environment.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {
namespace {

using json = nlohmann::json;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kJobTimeout = absl::Seconds(90);

// A DistributedJob of `replicas` test-trainer ranks running `scenario`.
std::string JobYaml(const std::string& name, int replicas, const std::string& scenario,
                    const std::string& extra_spec = "", const std::string& extra_pod_spec = "") {
  return absl::StrReplaceAll(R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: NAME
spec:
  replicas: REPLICAS
  maxRestarts: 2
  restartBackoff: 100ms
EXTRA_SPEC  template:
    spec:
EXTRA_POD_SPEC      containers:
        - name: trainer
          image: cohort/test-trainer:dev
          command: ["test-trainer", "SCENARIO"]
)",
                             {{"NAME", name},
                              {"REPLICAS", absl::StrCat(replicas)},
                              {"SCENARIO", scenario},
                              {"EXTRA_SPEC", extra_spec},
                              {"EXTRA_POD_SPEC", extra_pod_spec}});
}

// A spec.failurePolicy of one rule, for JobYaml's extra_spec: `matcher` is the rule's matcher
// line, e.g. "onExitCodes: {operator: In, values: [3]}".
std::string OneRule(const std::string& action, const std::string& matcher) {
  return absl::StrCat("  failurePolicy:\n    rules:\n      - action: ", action, "\n        ",
                      matcher, "\n");
}

bool Finished(const json& job) { return Phase(job) == "Succeeded" || Phase(job) == "Failed"; }
bool AllReady(const json& job) {
  return Phase(job) == "Running" && StatusInt(job, "ready") == job["spec"].value("replicas", 0);
}

std::string Events(LocalControlPlane& cluster, const std::string& job) {
  absl::StatusOr<json> events = cluster.client().List(kube::kEvents, "default", "");
  std::string out;
  if (!events.ok()) return out;
  for (const json& e : (*events)["items"]) {
    if (e["involvedObject"].value("name", "") == job)
      absl::StrAppend(&out, e.value("lastTimestamp", ""), " ", e.value("reason", ""), ": ",
                      e.value("message", ""), "\n");
  }
  return out;
}

// The job's Events once one contains `text` (the operator emits a pass's Events after its status
// write, so a test that saw the status may look a moment early); what there is after 10 s.
std::string EventsOnceThereIs(LocalControlPlane& cluster, const std::string& job,
                              const std::string& text) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string events = Events(cluster, job);
  while (!absl::StrContains(events, text) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    events = Events(cluster, job);
  }
  return events;
}

// What rank `rank`'s trainer of `job` wrote so far.
std::string PodTrainerLog(LocalControlPlane& cluster, const std::string& pod) {
  std::ifstream in(absl::StrCat(cluster.dir(), "/pods/default_", pod, "/trainer.log"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
std::string TrainerLog(LocalControlPlane& cluster, const std::string& job, int rank) {
  return PodTrainerLog(cluster, absl::StrCat(job, "-", rank));
}

// Whether rank `rank`'s trainer of `job` writes `text` within kJobTimeout (its log is a file the
// kubelet appends to: looked at every 50 ms).
bool TrainerLogOnceItHas(LocalControlPlane& cluster, const std::string& job, int rank,
                         const std::string& text) {
  const absl::Time deadline = absl::Now() + kJobTimeout;
  while (!absl::StrContains(TrainerLog(cluster, job, rank), text)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

// One control plane for the suite: starting it costs a second; jobs have distinct names.
class OperatorE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new LocalControlPlane(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_->kubeconfig(), "") << "the local control plane did not start";
  }

  // An operator with this test's own Lease (a killed operator of an earlier test still holds
  // its own) and short leader-election timings.
  // On the suite's cluster, or on `cluster`.
  std::unique_ptr<WatchedProcess> StartOperator(const std::string& label,
                                                std::vector<std::string> flags = {},
                                                LocalControlPlane* cluster = nullptr) {
    std::vector<std::string> all = {"--leader-election-id",
                                    Lease(),
                                    "--leader-election-lease-duration",
                                    "2",
                                    "--leader-election-renew-deadline",
                                    "1.5",
                                    "--leader-election-retry-period",
                                    "0.2"};
    all.insert(all.end(), flags.begin(), flags.end());
    return (cluster ? cluster : cluster_)->StartOperator(label, all);
  }
  // Starts an operator and waits until it leads and its informers synced.
  std::unique_ptr<WatchedProcess> Operator(const std::string& label = "operator",
                                           std::vector<std::string> flags = {},
                                           LocalControlPlane* cluster = nullptr) {
    std::unique_ptr<WatchedProcess> op = StartOperator(label, std::move(flags), cluster);
    EXPECT_NE(op, nullptr);
    if (op) {
      EXPECT_NE(op->WaitForLine("informers synced", absl::Seconds(30)), "")
          << label << " did not start";
    }
    return op;
  }
  static std::string Lease() {
    std::string name =
        absl::AsciiStrToLower(::testing::UnitTest::GetInstance()->current_test_info()->name());
    return absl::StrCat("e2e-", absl::StrReplaceAll(name, {{"_", "-"}}));
  }

  static LocalControlPlane* cluster_;
};
LocalControlPlane* OperatorE2E::cluster_ = nullptr;

TEST_F(OperatorE2E, FourRankJob_RendezvousThroughSidecarsAndSucceeds) {
  auto op = Operator();
  LocalControlPlane::Result applied = cluster_->Kubectl({"apply"}, JobYaml("e2e-ok", 4, "k8s"));
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  EXPECT_THAT(applied.output, HasSubstr("distributedjob.cohort.dev/e2e-ok created"));

  json job = cluster_->WaitForJob("default", "e2e-ok", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-ok");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_EQ(StatusInt(job, "succeeded"), 4);
  EXPECT_EQ(job["status"].value("coordinatorAddress", ""), "e2e-ok-0.e2e-ok.default.svc:8476");

  // The trainers checked their environment and met through the sidecars.
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = absl::StrCat(cluster_->dir(), "/pods/default_e2e-ok-", rank, "/trainer.log");
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("ENVIRONMENT ok")) << log;
    EXPECT_THAT(text, HasSubstr(absl::StrCat("RENDEZVOUS rank=", rank, " keys=4 count=4"))) << log;
  }

  // kubectl shows the printer columns.
  LocalControlPlane::Result got = cluster_->Kubectl({"get", "djob", "e2e-ok"});
  EXPECT_EQ(got.exit_code, 0);
  EXPECT_THAT(got.output, HasSubstr("PHASE"));
  EXPECT_THAT(got.output, HasSubstr("Succeeded"));

  // Deleting the job removes everything it created.
  LocalControlPlane::Result deleted = cluster_->Kubectl({"delete", "djob", "e2e-ok"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/job-name=e2e-ok",
      [](const std::vector<json>& pods) { return pods.empty(); }, kJobTimeout));
  for (const kube::Resource* r : {&kube::kServices, &kube::kSecrets}) {
    absl::StatusOr<json> left =
        cluster_->client().List(*r, "default", "cohort.dev/job-name=e2e-ok");
    ASSERT_TRUE(left.ok());
    EXPECT_TRUE((*left)["items"].empty()) << r->plural << " left: " << (*left)["items"].dump();
  }
}

TEST_F(OperatorE2E, TrainerKilled_GangRestartsOnceAndSucceeds) {
  auto op = Operator();
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-kill", 4, "k8s-hold")).exit_code, 0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-kill", AllReady, kJobTimeout)));
  pid_t pid = LocalControlPlane::WaitForProcess(
      "test-trainer",
      {"COHORT_JOB_NAME=e2e-kill", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's trainer process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  json job = cluster_->WaitForJob("default", "e2e-kill", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-kill");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-kill");
  EXPECT_EQ(StatusInt(job, "restartAttempt"), 1);
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  EXPECT_THAT(Events(*cluster_, "e2e-kill"),
              HasSubstr("rank 1 (pod e2e-kill-1) exited with code 137"));
  // The second gang knows it is restart attempt 1: the operator says so and libdist reports it.
  for (int rank = 0; rank < 4; ++rank) {
    std::string log =
        absl::StrCat(cluster_->dir(), "/pods/default_e2e-kill-", rank, "/trainer.log");
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr(absl::StrCat("INITIALIZED rank=", rank, " attempt=1"))) << log;
  }
}

// Every pod's uid, by name.
std::map<std::string, std::string> PodUids(LocalControlPlane& cluster, const std::string& job) {
  std::map<std::string, std::string> uids;
  absl::StatusOr<json> pods =
      cluster.client().List(kube::kPods, "default", absl::StrCat("cohort.dev/job-name=", job));
  if (!pods.ok()) return uids;
  for (const json& p : (*pods)["items"])
    uids[p["metadata"].value("name", "")] = p["metadata"].value("uid", "");
  return uids;
}

// spec.restartStrategy: InPlace (the default): a killed process restarts every pod's processes,
// and no pod is deleted or created; Recreate replaces every pod.
TEST_F(OperatorE2E, RestartStrategy_InPlaceKeepsEveryPod_RecreateReplacesThem) {
  auto op = Operator();
  for (const std::string strategy : {"InPlace", "Recreate"}) {
    const std::string name = absl::StrCat("e2e-", absl::AsciiStrToLower(strategy));
    ASSERT_EQ(cluster_
                  ->Kubectl({"apply"}, JobYaml(name, 3, "k8s-hold",
                                               absl::StrCat("  restartStrategy: ", strategy, "\n")))
                  .exit_code,
              0);
    ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", name, AllReady, kJobTimeout)))
        << Events(*cluster_, name);
    const std::map<std::string, std::string> before = PodUids(*cluster_, name);
    ASSERT_EQ(before.size(), 3u);
    pid_t pid = LocalControlPlane::WaitForProcess(
        "test-trainer", {absl::StrCat("COHORT_JOB_NAME=", name), "COHORT_PROCESS_ID=2",
                         "COHORT_RESTART_ATTEMPT=0"});
    ASSERT_GT(pid, 0) << "rank 2's trainer process";
    ASSERT_EQ(kill(pid, SIGKILL), 0);

    json job = cluster_->WaitForJob("default", name, Finished, kJobTimeout);
    ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, name);
    EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, name);
    EXPECT_EQ(StatusInt(job, "restartAttempt"), 1);
    EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), strategy) << Events(*cluster_, name);
    const std::string events = Events(*cluster_, name);
    EXPECT_THAT(events, HasSubstr("rank 2 (pod " + name + "-2) exited with code 137"));
    const std::map<std::string, std::string> after = PodUids(*cluster_, name);
    ASSERT_EQ(after.size(), 3u);
    for (const auto& [pod, uid] : before) {
      if (strategy == "InPlace") {
        EXPECT_EQ(after.at(pod), uid) << pod << " was replaced\n" << events;
      } else {
        EXPECT_NE(after.at(pod), uid) << pod << " was not replaced\n" << events;
      }
    }
    if (strategy == "InPlace") {
      EXPECT_THAT(events,
                  HasSubstr("RestartedInPlace: rank 2 (pod " + name + "-2) exited with code 137"));
      EXPECT_THAT(events, ::testing::Not(HasSubstr("GangRestart")));
    }
    for (int rank = 0; rank < 3; ++rank) {
      const std::string log = TrainerLog(*cluster_, name, rank);
      EXPECT_THAT(log, HasSubstr(absl::StrCat("INITIALIZED rank=", rank, " attempt=1"))) << log;
      // Within one container, both attempts: cohort-launch started the second itself.
      if (strategy == "InPlace") {
        EXPECT_THAT(log, HasSubstr("starting restart attempt 1 in place")) << log;
      }
    }
    EXPECT_EQ(
        LocalControlPlane::FindProcess("test-trainer", {absl::StrCat("COHORT_JOB_NAME=", name)}),
        -1)
        << "a trainer process outlived its job";
  }
}

// Restarting in place, a FailJob rule stops every process and fails the job; maxRestarts spent
// in place fails it too.
TEST_F(OperatorE2E, RestartStrategy_InPlace_FailJobRuleAndMaxRestartsEndTheJobWithNoProcessLeft) {
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          JobYaml("e2e-ip-rule", 2, "k8s-hold",
                                  OneRule("FailJob", "onExitCodes: {operator: In, values: [137]}")))
                .exit_code,
            0);
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-ip-max", 2, "rank1-exits-7")).exit_code, 0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-ip-rule", AllReady, kJobTimeout)));
  pid_t pid = LocalControlPlane::WaitForProcess(
      "test-trainer",
      {"COHORT_JOB_NAME=e2e-ip-rule", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  json ruled = cluster_->WaitForJob("default", "e2e-ip-rule", Finished, kJobTimeout);
  EXPECT_EQ(Phase(ruled), "Failed") << ruled.dump(2) << Events(*cluster_, "e2e-ip-rule");
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-ip-rule", "rule 0 (FailJob"),
              HasSubstr("rule 0 (FailJob, exit code 137 of container trainer)"));

  json maxed = cluster_->WaitForJob("default", "e2e-ip-max", Finished, kJobTimeout);
  EXPECT_EQ(Phase(maxed), "Failed") << maxed.dump(2) << Events(*cluster_, "e2e-ip-max");
  EXPECT_EQ(StatusInt(maxed, "restarts"), 2) << Events(*cluster_, "e2e-ip-max");
  EXPECT_EQ(maxed["status"].value("lastRestartStrategy", ""), "InPlace");
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-ip-max", "MaxRestartsExceeded"),
              HasSubstr("MaxRestartsExceeded"));
  for (const std::string job : {"e2e-ip-rule", "e2e-ip-max"}) {
    EXPECT_TRUE(cluster_->WaitForPods(
        "default", absl::StrCat("cohort.dev/job-name=", job),
        [](const std::vector<json>& pods) { return pods.empty(); }, kJobTimeout));
    EXPECT_EQ(
        LocalControlPlane::FindProcess("test-trainer", {absl::StrCat("COHORT_JOB_NAME=", job)}), -1)
        << job << ": a trainer process outlived its job";
  }
}

// Rank 0's sidecar hosts the coordination service and the attempt hub: killed, it takes the job's
// attempts with it, and the documented fallback (docs/operator.md, "When every pod is recreated
// instead") applies: a Warning RecreatingGang, every pod replaced, the job restarted once and
// finishing.
TEST_F(OperatorE2E, RestartStrategy_InPlace_RankZerosSidecarKilled_EveryPodRecreatedSayingWhy) {
  auto op = Operator();
  const std::string name = "e2e-ip-hub";
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml(name, 3, "k8s-hold")).exit_code, 0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", name, AllReady, kJobTimeout)))
      << Events(*cluster_, name);
  // Every rank trains: the hub has run attempt 0, every sidecar follows it, and every rank
  // registered with rank 0's coordination service (killed before that, the sidecar comes back,
  // restarted by the kubelet, and the ranks register with the new one as if nothing happened).
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_GT(LocalControlPlane::WaitForProcess("test-trainer",
                                                {absl::StrCat("COHORT_JOB_NAME=", name),
                                                 absl::StrCat("COHORT_PROCESS_ID=", rank)}),
              0)
        << "rank " << rank << "'s trainer process";
    ASSERT_TRUE(TrainerLogOnceItHas(*cluster_, name, rank, "TRAINING"))
        << "rank " << rank << " does not train";
  }
  const std::map<std::string, std::string> before = PodUids(*cluster_, name);
  ASSERT_EQ(before.size(), 3u);
  pid_t sidecar = LocalControlPlane::FindProcess(
      "cohort-sidecar", {absl::StrCat("COHORT_JOB_NAME=", name), "COHORT_PROCESS_ID=0"});
  ASSERT_GT(sidecar, 0) << "rank 0's sidecar";
  ASSERT_EQ(kill(sidecar, SIGKILL), 0);
  const absl::Time killed = absl::Now();

  json job = cluster_->WaitForJob("default", name, Finished, kJobTimeout);
  const std::string events = Events(*cluster_, name);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << events;
  // The old pods went as soon as their processes had: no sidecar held its pod until the 30 s grace
  // period, waiting to report its trainer's end to the coordination service that was gone.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(20)) << events;
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << events;
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "Recreate") << events;
  // Either way the docs name: the hub unreachable, or restarted without the job's attempts.
  EXPECT_THAT(events,
              ::testing::ContainsRegex("RecreatingGang: .*the attempt hub on rank 0's sidecar"))
      << events;
  const std::map<std::string, std::string> after = PodUids(*cluster_, name);
  for (const auto& [pod, uid] : before) {
    EXPECT_TRUE(after.count(pod) && after.at(pod) != uid) << pod << " was not recreated\n"
                                                          << events;
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, name, rank),
                HasSubstr(absl::StrCat("INITIALIZED rank=", rank, " attempt=1")));
  }
}

// The documented example (manifests/examples/stalled-rank.yaml): rank 1 stops calling the
// all-reduce; the collective watchdog names it in every pod's log and the job fails.
TEST_F(OperatorE2E, StalledRankExample_WatchdogNamesTheStalledRankAndTheJobFails) {
  auto op = Operator();
  std::ifstream manifest(COHORT_SOURCE_DIR "/manifests/examples/stalled-rank.yaml");
  const std::string yaml((std::istreambuf_iterator<char>(manifest)),
                         std::istreambuf_iterator<char>());
  ASSERT_FALSE(yaml.empty());
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "stalled-rank", Finished, kJobTimeout);
  EXPECT_EQ(Phase(job), "Failed") << job.dump(2) << Events(*cluster_, "stalled-rank");
  for (int rank = 0; rank < 2; ++rank) {
    std::string log =
        absl::StrCat(cluster_->dir(), "/pods/default_stalled-rank-", rank, "/trainer.log");
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, HasSubstr("process 1 is alive (heartbeat")) << log;
    EXPECT_THAT(text,
                HasSubstr("but never entered all_reduce #21 (int64 sum, 1 element), which the "
                          "other 1 process entered"))
        << log;
    EXPECT_THAT(text, HasSubstr("its last completed collective is #20")) << log;
    EXPECT_THAT(text, HasSubstr("cause: collective timeout")) << log;
  }
}

// Restarting in place (the default), the evicted pod is replaced alone, by a pod of its own name:
// the others stay (same UIDs) and their processes restart; every rank, the replacement's too,
// runs the next attempt, which waited in registration for it.
TEST_F(OperatorE2E, PodEvicted_PreemptionRestartsWithoutCountingAFailure_OnlyThatPodReplaced) {
  auto op = Operator();
  const std::string name = "e2e-evict";
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml(name, 3, "k8s-hold")).exit_code, 0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", name, AllReady, kJobTimeout)));
  const std::map<std::string, std::string> before = PodUids(*cluster_, name);
  ASSERT_EQ(before.size(), 3u);
  // What `kubectl drain` does for each pod: the eviction subresource.
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob("default", name, Finished, kJobTimeout);
  const std::string events = Events(*cluster_, name);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << events;
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace") << events;
  EXPECT_THAT(events,
              HasSubstr("RestartedInPlace: rank 1 (pod e2e-evict-1) was preempted or evicted"))
      << events;
  // "is being deleted" or "was evicted or preempted": whichever of the two the operator saw first.
  EXPECT_THAT(events, ::testing::ContainsRegex(
                          "in place: pod e2e-evict-1 (is being deleted|was evicted or preempted): "
                          "it is replaced alone"))
      << events;
  const std::map<std::string, std::string> after = PodUids(*cluster_, name);
  for (const std::string stayed : {"e2e-evict-0", "e2e-evict-2"}) {
    ASSERT_TRUE(after.count(stayed)) << stayed << " was deleted\n" << events;
    EXPECT_EQ(after.at(stayed), before.at(stayed)) << stayed << " was replaced\n" << events;
  }
  ASSERT_TRUE(after.count("e2e-evict-1-r1")) << "no replacement of e2e-evict-1\n" << events;
  EXPECT_THAT(PodTrainerLog(*cluster_, "e2e-evict-1-r1"),
              HasSubstr("INITIALIZED rank=1 attempt=1"));
  for (int rank : {0, 2}) {
    const std::string log = TrainerLog(*cluster_, name, rank);
    EXPECT_THAT(log, HasSubstr("starting restart attempt 1 in place")) << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("INITIALIZED rank=", rank, " attempt=1"))) << log;
  }
}

// A job in Kueue's queue `queue`, its pods as Kueue's webhook leaves them: gated by
// kueue.x-k8s.io/admission (the template's schedulingGates play the webhook).
std::string QueuedJobYaml(const std::string& name, int replicas, const std::string& scenario,
                          const std::string& queue) {
  return JobYaml(name, replicas, scenario, absl::StrCat("  scheduling: {queueName: ", queue, "}\n"),
                 "      schedulingGates: [{name: kueue.x-k8s.io/admission}]\n");
}

// The job's condition `type`, or an empty object.
json JobCondition(const json& job, const std::string& type) {
  if (!job.is_object()) return json::object();
  for (const json& c : job.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return json::object();
}

// spec.scheduling.queueName through real kubectl, the test playing Kueue: its webhook (which
// gives every pod of a queue the gate kueue.x-k8s.io/admission) through the template's
// schedulingGates, and its admission (which removes the gates of a whole pod group at once).
TEST_F(OperatorE2E,
       KueueQueue_OnePodGroupPerAttempt_GatedPodsWaitWithoutARestart_TheTestAdmitsTheGroup) {
  auto op = Operator();
  ASSERT_EQ(cluster_->Kubectl({"apply"}, QueuedJobYaml("e2e-queue", 2, "k8s", "team-a")).exit_code,
            0);
  std::vector<json> pods;
  ASSERT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/job-name=e2e-queue",
      [&](const std::vector<json>& seen) {
        pods = seen;
        return seen.size() == 2;
      },
      kJobTimeout));
  for (const json& pod : pods) {
    const json& meta = pod["metadata"];
    EXPECT_EQ(meta["labels"].value("kueue.x-k8s.io/queue-name", ""), "team-a") << meta.dump();
    EXPECT_EQ(meta["labels"].value("kueue.x-k8s.io/pod-group-name", ""), "e2e-queue-0")
        << meta.dump();
    EXPECT_EQ(meta["annotations"].value("kueue.x-k8s.io/pod-group-total-count", ""), "2")
        << meta.dump();
    EXPECT_EQ(meta["annotations"].value("kueue.x-k8s.io/pod-group-pod-index-label", ""),
              "cohort.dev/rank");
  }
  // Held: the job says it waits for admission (once the operator has seen both pods), and
  // nothing counts as a failure.
  json job = cluster_->WaitForJob(
      "default", "e2e-queue",
      [](const json& j) {
        const json condition = JobCondition(j, "Scheduled");
        return condition.value("reason", "") == "SchedulingGated" &&
               absl::StrContains(
                   condition.value("message", ""),
                   "waiting for admission: 0 of 2 pods placed, 2 held by scheduling gates");
      },
      kJobTimeout);
  ASSERT_FALSE(job.is_null()) << Events(*cluster_, "e2e-queue");
  EXPECT_EQ(Phase(job), "Pending");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);

  // Admitted, the whole group at once: it runs and succeeds.
  for (const json& pod : pods) {
    LocalControlPlane::Result admitted =
        cluster_->Kubectl({"patch", "pod", pod["metadata"].value("name", ""), "--type=json", "-p",
                           R"([{"op": "remove", "path": "/spec/schedulingGates"}])"});
    ASSERT_EQ(admitted.exit_code, 0) << admitted.output;
  }
  job = cluster_->WaitForJob("default", "e2e-queue", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-queue");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_EQ(JobCondition(job, "Scheduled").value("reason", ""), "AllPodsScheduled") << job.dump(2);
}

// Removes the scheduling gates of every pod of `job` in restart attempt `attempt` (what Kueue does
// when it admits their group); returns how many it admitted.
int AdmitGroup(LocalControlPlane& cluster, const std::string& job, int attempt) {
  int admitted = 0;
  absl::StatusOr<json> pods = cluster.client().List(
      kube::kPods, "default",
      absl::StrCat("cohort.dev/job-name=", job, ",cohort.dev/restart-attempt=", attempt));
  if (!pods.ok()) return 0;
  for (const json& pod : (*pods)["items"]) {
    if (pod["spec"].value("schedulingGates", json::array()).empty()) continue;
    LocalControlPlane::Result r =
        cluster.Kubectl({"patch", "pod", pod["metadata"].value("name", ""), "--type=json", "-p",
                         R"([{"op": "remove", "path": "/spec/schedulingGates"}])"});
    admitted += r.exit_code == 0;
  }
  return admitted;
}

// Hot spares in a Kueue pod group: the spare is a pod of the group (the total count is replicas +
// spares, as docs/operator.md says), gated and admitted with the ranks' pods.
TEST_F(OperatorE2E, KueueQueue_JobWithASpare_TheSpareCountsInTheGroupsTotal_AdmittedWithIt) {
  auto op = Operator();
  const std::string name = "e2e-queue-spare";
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"},
                    JobYaml(name, 2, "k8s", "  spares: 1\n  scheduling: {queueName: team-a}\n",
                            "      schedulingGates: [{name: kueue.x-k8s.io/admission}]\n"))
          .exit_code,
      0);
  std::vector<json> pods;
  ASSERT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/job-name=" + name,
      [&](const std::vector<json>& seen) {
        pods = seen;
        return seen.size() == 3;
      },
      kJobTimeout))
      << pods.size() << " pods";
  int spares = 0;
  for (const json& pod : pods) {
    const json& meta = pod["metadata"];
    EXPECT_EQ(meta["labels"].value("kueue.x-k8s.io/pod-group-name", ""), name + "-0")
        << meta.dump();
    EXPECT_EQ(meta["annotations"].value("kueue.x-k8s.io/pod-group-total-count", ""), "3")
        << meta.dump();
    spares += meta["labels"].contains("cohort.dev/spare");
  }
  EXPECT_EQ(spares, 1);
  EXPECT_EQ(AdmitGroup(*cluster_, name, 0), 3);
  json job = cluster_->WaitForJob("default", name, Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, name);
  // A finished job's spare goes; its pods stay.
  EXPECT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/spare",
      [](const std::vector<json>& seen) {
        return std::none_of(seen.begin(), seen.end(), [](const json& p) {
          return p["metadata"]["labels"].value("cohort.dev/job-name", "") == "e2e-queue-spare";
        });
      },
      kJobTimeout));
}

// A queued job evicted (as Kueue preempts a group: its pods go) restarts as a preemption, its
// next attempt a pod group of its own, held again until admitted.
TEST_F(OperatorE2E,
       KueueQueue_GroupEvicted_CountedAsPreemption_TheNextAttemptIsANewGroupHeldUntilAdmitted) {
  auto op = Operator();
  ASSERT_EQ(cluster_->Kubectl({"apply"}, QueuedJobYaml("e2e-queue-evict", 2, "k8s-hold", "team-a"))
                .exit_code,
            0);
  ASSERT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/job-name=e2e-queue-evict",
      [](const std::vector<json>& seen) { return seen.size() == 2; }, kJobTimeout));
  ASSERT_EQ(AdmitGroup(*cluster_, "e2e-queue-evict", 0), 2);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-queue-evict", AllReady, kJobTimeout)));
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-queue-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  // Attempt 1: a new group, held; the job waits, one preemption and no restart counted.
  json job = cluster_->WaitForJob(
      "default", "e2e-queue-evict",
      [](const json& j) {
        return StatusInt(j, "restartAttempt") == 1 &&
               JobCondition(j, "Scheduled").value("reason", "") == "SchedulingGated";
      },
      kJobTimeout);
  ASSERT_FALSE(job.is_null()) << Events(*cluster_, "e2e-queue-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  std::vector<json> pods;
  ASSERT_TRUE(cluster_->WaitForPods(
      "default", "cohort.dev/job-name=e2e-queue-evict,cohort.dev/restart-attempt=1",
      [&](const std::vector<json>& seen) {
        pods = seen;
        return seen.size() == 2;
      },
      kJobTimeout));
  for (const json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["labels"].value("kueue.x-k8s.io/pod-group-name", ""),
              "e2e-queue-evict-1");
  }
  ASSERT_EQ(AdmitGroup(*cluster_, "e2e-queue-evict", 1), 2);
  job = cluster_->WaitForJob("default", "e2e-queue-evict", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-queue-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
}

// Two 4-rank queued jobs on one node that takes 6 pods, the test playing an all-or-nothing
// admission controller (a group is admitted only when the node has room for all of it): one job
// runs, the other waits whole (never 4 + 2, where both could wait for ever), and runs once the
// first has finished.
TEST_F(OperatorE2E,
       NodeWithRoomForOneJob_TheTestsAllOrNothingAdmission_OneRunsTheOtherWaitsThenRuns) {
  LocalControlPlane small({"--max-pods", "6"});
  ASSERT_NE(small.kubeconfig(), "");
  auto op = Operator("operator", {}, &small);
  for (const char* name : {"e2e-room-a", "e2e-room-b"}) {
    ASSERT_EQ(small.Kubectl({"apply"}, QueuedJobYaml(name, 4, "k8s", "team-b")).exit_code, 0);
  }
  ASSERT_TRUE(small.WaitForPods(
      "default", "kueue.x-k8s.io/queue-name=team-b",
      [](const std::vector<json>& seen) { return seen.size() == 8; }, kJobTimeout));
  // The node's room: 6 less its pods that have not finished.
  auto room = [&small] {
    int used = 0;
    absl::StatusOr<json> pods = small.client().List(kube::kPods, "default", "");
    for (const json& pod : pods.ok() ? (*pods)["items"] : json::array()) {
      const std::string phase = pod["status"].value("phase", "");
      used +=
          !pod["spec"].value("nodeName", "").empty() && phase != "Succeeded" && phase != "Failed";
    }
    return 6 - used;
  };
  ASSERT_EQ(room(), 6);
  ASSERT_EQ(AdmitGroup(small, "e2e-room-a", 0), 4);

  // The second waits whole, saying so, while the first runs to its end.
  json waiting = small.WaitForJob(
      "default", "e2e-room-b",
      [](const json& j) {
        return absl::StrContains(JobCondition(j, "Scheduled").value("message", ""),
                                 "0 of 4 pods placed, 4 held");
      },
      kJobTimeout);
  ASSERT_FALSE(waiting.is_null()) << Events(small, "e2e-room-b");
  json first = small.WaitForJob("default", "e2e-room-a", Finished, kJobTimeout);
  ASSERT_EQ(Phase(first), "Succeeded") << first.dump(2);
  waiting = *small.client().Get(op::kDistributedJobs, "default", "e2e-room-b");
  EXPECT_EQ(Phase(waiting), "Pending");
  EXPECT_EQ(StatusInt(waiting, "restarts"), 0);

  ASSERT_GE(room(), 4);
  ASSERT_EQ(AdmitGroup(small, "e2e-room-b", 0), 4);
  json second = small.WaitForJob("default", "e2e-room-b", Finished, kJobTimeout);
  ASSERT_EQ(Phase(second), "Succeeded") << second.dump(2) << Events(small, "e2e-room-b");
  EXPECT_EQ(StatusInt(second, "restarts"), 0);

  // Without an admission controller the node's room splits two gangs: one that came first holds
  // 4 pods, the other gets 2 (the scheduler keeps the rest Unschedulable) and says so; it
  // completes only because the first one finishes and frees its room. (Had both come at once,
  // 3 + 3 would wait for each other for ever: what admission of whole groups prevents.)
  ASSERT_EQ(small.Kubectl({"apply"}, JobYaml("e2e-room-c", 4, "k8s-hold")).exit_code, 0);
  ASSERT_TRUE(AllReady(small.WaitForJob("default", "e2e-room-c", AllReady, kJobTimeout)));
  ASSERT_EQ(small.Kubectl({"apply"}, JobYaml("e2e-room-d", 4, "k8s")).exit_code, 0);
  // The scheduler marks the two pods left over one at a time, and the job's condition follows
  // each mark: wait for the state with both marked.
  json split = small.WaitForJob(
      "default", "e2e-room-d",
      [](const json& j) {
        const json condition = JobCondition(j, "Scheduled");
        return condition.value("reason", "") == "Unschedulable" &&
               absl::StrContains(condition.value("message", ""),
                                 "2 of 4 pods placed, 2 unschedulable");
      },
      kJobTimeout);
  ASSERT_FALSE(split.is_null()) << Events(small, "e2e-room-d")
                                << small.Kubectl({"get", "pods", "-o", "wide"}).output;
  EXPECT_EQ(StatusInt(split, "restarts"), 0);
  // The first gang ends (k8s-hold trains until its job is deleted); its room goes to the second.
  ASSERT_EQ(small.Kubectl({"delete", "djob", "e2e-room-c", "--wait=true"}).exit_code, 0);
  json done = small.WaitForJob("default", "e2e-room-d", Finished, kJobTimeout);
  EXPECT_EQ(Phase(done), "Succeeded") << done.dump(2) << Events(small, "e2e-room-d");
  EXPECT_EQ(StatusInt(done, "restarts"), 0);
}

// `objects` (their identity, labels, owners and spec: what a controller writes) against
// Kubernetes' published schema of 1.37 with kubernetes-validate, strictly (unknown fields are
// errors). Exit 77: PyPI, where the tool comes from, cannot be reached.
LocalControlPlane::Result ValidateWithKubernetesSchema(const std::vector<json>& objects) {
  LocalControlPlane::Result venv = LocalControlPlane::Run(
      {"bash", COHORT_SOURCE_DIR "/tests/setup_python_venv.sh", COHORT_BUILD_DIR "/tools-venv",
       "kubernetes_validate", "kubernetes-validate"});
  if (venv.exit_code != 0) return venv;
  const std::string file = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                        "/cohort-e2e-validate-", getpid(), ".yaml");
  {
    std::ofstream out(file);
    for (const json& object : objects) {
      json meta = json::object();
      for (const char* key : {"name", "namespace", "labels", "annotations", "ownerReferences"}) {
        if (object["metadata"].contains(key)) meta[key] = object["metadata"][key];
      }
      out << "---\n"
          << json{{"apiVersion", object["apiVersion"]},
                  {"kind", object["kind"]},
                  {"metadata", meta},
                  {"spec", object["spec"]}}
                 .dump()
          << "\n";
    }
  }
  LocalControlPlane::Result result =
      LocalControlPlane::Run({COHORT_BUILD_DIR "/tools-venv/bin/kubernetes-validate", "-k",
                              "1.37.0", "--strict", "--no-warn", file});
  std::filesystem::remove(file);
  return result;
}

// spec.scheduling.podGroup with each provider. The gang schedulers' PodGroup CRDs (the projects'
// own, vendored in tests/manifests/podgroups/) are applied so that the API server validates every
// group against the real schema; Kubernetes' built-in PodGroup, which the local API server serves
// from a stand-in, is validated with Kubernetes' own schema, with the pods that name it. The
// group exists before each pod, is replaced on a restart, and goes with the job.
TEST_F(
    OperatorE2E,
    PodGroupProviders_TheGroupBeforeEachPod_ValidatedByTheRealCrd_ReplacedOnARestart_GoneWithTheJob) {
  LocalControlPlane::Result crds =
      cluster_->Kubectl({"apply", "-f", COHORT_SOURCE_DIR "/tests/manifests/podgroups/"});
  ASSERT_EQ(crds.exit_code, 0) << crds.output;
  auto op = Operator();
  struct Case {
    const char* provider;
    kube::Resource groups;
    const char* job;
  };
  for (const Case& c :
       {Case{"coscheduling", {"scheduling.x-k8s.io", "v1alpha1", "podgroups"}, "e2e-pg-cosched"},
        Case{"volcano", {"scheduling.volcano.sh", "v1beta1", "podgroups"}, "e2e-pg-volcano"},
        Case{"workload", {"scheduling.k8s.io", "v1beta1", "podgroups"}, "e2e-pg-workload"}}) {
    SCOPED_TRACE(c.provider);
    // The real schema is in force: a group it refuses is refused. (Without PyPI there is no
    // kubernetes-validate: Kubernetes' schema checks are left out, saying so, the rest runs.)
    bool kubernetes_schema = false;
    if (std::string(c.provider) == "workload") {
      LocalControlPlane::Result invalid = ValidateWithKubernetesSchema(
          {{{"apiVersion", "scheduling.k8s.io/v1beta1"},
            {"kind", "PodGroup"},
            {"metadata", {{"name", "invalid"}}},
            {"spec", {{"schedulingPolicy", {{"gang", {{"minCount", "two"}}}}}}}}});
      kubernetes_schema = invalid.exit_code != 77;
      if (!kubernetes_schema)
        std::fprintf(stderr, "not validated (no kubernetes-validate without PyPI): %s",
                     invalid.output.c_str());
      if (kubernetes_schema) {
        EXPECT_EQ(invalid.exit_code, 1) << invalid.output;
        EXPECT_THAT(invalid.output, HasSubstr("'two' is not of type 'integer'"));
      }
    } else {
      LocalControlPlane::Result invalid = cluster_->Kubectl(
          {"apply"},
          absl::StrCat("apiVersion: ", c.groups.group, "/", c.groups.version,
                       "\nkind: PodGroup\nmetadata: {name: invalid}\nspec: {minMember: two}\n"));
      EXPECT_NE(invalid.exit_code, 0) << invalid.output;
    }
    // Every pod of the job, as it appears, finds its group already there.
    std::vector<std::string> missing;
    int seen = 0;
    kube::WatchOptions watch;
    watch.label_selector = absl::StrCat("cohort.dev/job-name=", c.job);
    watch.timeout = kJobTimeout;
    absl::StatusOr<json> list =
        cluster_->client().List(kube::kPods, "default", watch.label_selector);
    ASSERT_TRUE(list.ok());
    watch.resource_version = (*list)["metadata"].value("resourceVersion", "");
    std::thread watcher([&] {
      cluster_->client()
          .Watch(kube::kPods, "default", watch,
                 [&](const json& event) {
                   if (event.value("type", "") != "ADDED") return true;
                   const json& meta = event["object"]["metadata"];
                   const std::string group = absl::StrCat(
                       c.job, "-", meta["labels"].value("cohort.dev/restart-attempt", ""));
                   if (!cluster_->client().Get(c.groups, "default", group).ok())
                     missing.push_back(meta.value("name", ""));
                   return ++seen < 4;  // Two pods in each of two attempts.
                 })
          .IgnoreError();
    });
    absl::Cleanup join_watcher = [&watcher] { watcher.join(); };  // Also when an assertion returns.
    // Recreate: each attempt's pods are new, and so is their group (in place, the pods and their
    // group stay).
    ASSERT_EQ(
        cluster_
            ->Kubectl(
                {"apply"},
                JobYaml(c.job, 2, "k8s-rank1-exits-3",
                        absl::StrCat(
                            "  restartStrategy: Recreate\n  scheduling: {podGroup: {provider: ",
                            c.provider, "}}\n")))
            .exit_code,
        0);
    json job = cluster_->WaitForJob("default", c.job, Finished, kJobTimeout);
    std::move(join_watcher).Invoke();
    ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, c.job);
    EXPECT_EQ(StatusInt(job, "restarts"), 1);
    EXPECT_EQ(seen, 4);
    EXPECT_THAT(missing, ::testing::IsEmpty()) << "pods created before their PodGroup";
    // Attempt 1's group replaced attempt 0's.
    EXPECT_TRUE(absl::IsNotFound(
        cluster_->client().Get(c.groups, "default", absl::StrCat(c.job, "-0")).status()));
    absl::StatusOr<json> group =
        cluster_->client().Get(c.groups, "default", absl::StrCat(c.job, "-1"));
    ASSERT_TRUE(group.ok()) << group.status();
    absl::StatusOr<json> pod =
        cluster_->client().Get(kube::kPods, "default", absl::StrCat(c.job, "-0"));
    ASSERT_TRUE(pod.ok());
    if (std::string(c.provider) == "workload") {
      EXPECT_EQ((*group)["spec"], json({{"schedulingPolicy", {{"gang", {{"minCount", 2}}}}}}));
      EXPECT_EQ((*pod)["spec"]["schedulingGroup"].value("podGroupName", ""),
                absl::StrCat(c.job, "-1"));
      EXPECT_FALSE((*pod)["spec"].contains("schedulerName"));
      (*pod)["apiVersion"] = "v1";
      (*pod)["kind"] = "Pod";
      if (kubernetes_schema) {
        LocalControlPlane::Result valid = ValidateWithKubernetesSchema({*group, *pod});
        EXPECT_EQ(valid.exit_code, 0) << valid.output;
      }
    } else {
      EXPECT_EQ((*group)["spec"].value("minMember", 0), 2);
    }
    if (std::string(c.provider) == "coscheduling") {
      EXPECT_EQ((*group)["spec"].value("scheduleTimeoutSeconds", 0), 60);
      EXPECT_EQ((*pod)["metadata"]["labels"].value("scheduling.x-k8s.io/pod-group", ""),
                absl::StrCat(c.job, "-1"));
      EXPECT_EQ((*pod)["spec"].value("schedulerName", ""), "scheduler-plugins-scheduler");
    } else if (std::string(c.provider) == "volcano") {
      EXPECT_EQ((*pod)["metadata"]["annotations"].value("scheduling.k8s.io/group-name", ""),
                absl::StrCat(c.job, "-1"));
      EXPECT_EQ((*pod)["spec"].value("schedulerName", ""), "volcano");
    }
    // Deleting the job deletes its group (owner references); kubectl watches for it.
    ASSERT_EQ(cluster_->Kubectl({"delete", "djob", c.job, "--wait=true"}).exit_code, 0);
    LocalControlPlane::Result gone = cluster_->Kubectl(
        {"wait", "--for=delete", absl::StrCat("podgroups.", c.groups.group, "/", c.job, "-1"),
         "--timeout=30s"});
    EXPECT_EQ(gone.exit_code, 0) << gone.output;
    EXPECT_TRUE(absl::IsNotFound(
        cluster_->client().Get(c.groups, "default", absl::StrCat(c.job, "-1")).status()));
  }
}

// spec.failurePolicy.rules through real kubectl: rank 1 exits 3 in restart attempt 0 (its peers
// follow with 75); a FailJob rule on 3 fails the job at once, naming the rule; without rules the
// same job restarts and succeeds.
TEST_F(OperatorE2E, FailureRules_FailJobOnExitCode_FailsAtOnce_WithoutRulesRestarts) {
  auto op = Operator();
  const std::string rules = OneRule("FailJob", R"(onExitCodes: {operator: In, values: [3]})");
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-fail", 2, "k8s-rank1-exits-3", rules))
                .exit_code,
            0);
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-none", 2, "k8s-rank1-exits-3")).exit_code, 0);

  json failed = cluster_->WaitForJob("default", "e2e-rule-fail", Finished, kJobTimeout);
  ASSERT_EQ(Phase(failed), "Failed") << failed.dump(2) << Events(*cluster_, "e2e-rule-fail");
  EXPECT_EQ(StatusInt(failed, "restarts"), 0);
  EXPECT_EQ(StatusInt(failed, "restartAttempt"), 0);
  const std::string events = EventsOnceThereIs(*cluster_, "e2e-rule-fail", "FailurePolicy");
  EXPECT_THAT(events, HasSubstr("FailurePolicy: rank 1 (pod e2e-rule-fail-1) exited with code 3"));
  EXPECT_THAT(events,
              HasSubstr("rule 0 (FailJob, exit code 3 of container trainer): the job fails"));
  bool condition = false;
  for (const json& c : failed["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Failed" && c.value("reason", "") == "FailurePolicy") {
      condition = absl::StrContains(c.value("message", ""), "rule 0 (FailJob");
    }
  }
  EXPECT_TRUE(condition) << failed.dump(2);

  json restarted = cluster_->WaitForJob("default", "e2e-rule-none", Finished, kJobTimeout);
  ASSERT_EQ(Phase(restarted), "Succeeded")
      << restarted.dump(2) << Events(*cluster_, "e2e-rule-none");
  EXPECT_EQ(StatusInt(restarted, "restarts"), 1);
  EXPECT_EQ(restarted["status"].value("lastRestartKind", ""), "Failure");
}

// An OOM kill matched by its reason: rank 1's trainer outgrows its 100Mi memory limit, the
// kubelet kills it and reports OOMKilled (exit 137); an onTerminationReasons rule fails the job
// at once, naming the reason, where an exit code alone (137) would have been a counted restart.
TEST_F(OperatorE2E, FailureRules_OomKilledMatchedByReason_FailsTheJobNamingIt) {
  auto op = Operator();
  const std::string rules = OneRule("FailJob", "onTerminationReasons: [OOMKilled]");
  std::string yaml = absl::StrReplaceAll(JobYaml("e2e-rule-oom", 2, "k8s-rank1-oom", rules),
                                         {{R"(command: ["test-trainer", "k8s-rank1-oom"])",
                                           "command: [\"test-trainer\", \"k8s-rank1-oom\"]\n       "
                                           "   resources: {limits: {memory: 100Mi}}"}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-rule-oom", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Failed") << job.dump(2) << Events(*cluster_, "e2e-rule-oom");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  // The Failed condition is written with the phase (the Event only after the status write).
  std::string failed;
  for (const json& c : job["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Failed") failed = c.value("message", "");
  }
  EXPECT_THAT(failed, HasSubstr("rank 1 (pod e2e-rule-oom-1) exited with code 137"));
  EXPECT_THAT(failed,
              HasSubstr("rule 0 (FailJob, reason OOMKilled of container trainer): the job fails"));
  EXPECT_THAT(TrainerLog(*cluster_, "e2e-rule-oom", 1),
              HasSubstr("local kubelet: OOMKilled: resident memory"));
}

// RestartJobAndIgnoreMaxRestarts with maxRestarts 0: the exit-4 failure restarts anyway, is
// counted apart, and the next attempt succeeds.
TEST_F(OperatorE2E, FailureRules_IgnoreMaxRestarts_RestartsWithMaxRestartsZeroAndSucceeds) {
  auto op = Operator();
  const std::string rules =
      OneRule("RestartJobAndIgnoreMaxRestarts", R"(onExitCodes: {operator: In, values: [4]})");
  std::string yaml = absl::StrReplaceAll(JobYaml("e2e-rule-ignore", 2, "k8s-rank1-exits-4", rules),
                                         {{"maxRestarts: 2", "maxRestarts: 0"}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-rule-ignore", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-rule-ignore");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_EQ(StatusInt(job, "uncountedRestarts"), 1);
  EXPECT_EQ(StatusInt(job, "restartAttempt"), 1);
  EXPECT_THAT(
      Events(*cluster_, "e2e-rule-ignore"),
      HasSubstr("rule 0 (RestartJobAndIgnoreMaxRestarts, exit code 4 of container trainer)"));
}

// A DisruptionTarget rule: an evicted pod (the eviction subresource, as kubectl drain) fails the
// job instead of restarting it as a preemption.
TEST_F(OperatorE2E, FailureRules_DisruptionTargetRule_EvictionFailsTheJob) {
  auto op = Operator();
  const std::string rules =
      OneRule("FailJob", R"(onPodConditions: [{type: DisruptionTarget, status: "True"}])");
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-evict", 2, "k8s-hold", rules)).exit_code,
            0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-rule-evict", AllReady, kJobTimeout)));
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-rule-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  json job = cluster_->WaitForJob("default", "e2e-rule-evict", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Failed") << job.dump(2) << Events(*cluster_, "e2e-rule-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-rule-evict", "FailurePolicy"),
              HasSubstr("rule 0 (FailJob, condition DisruptionTarget=True): the job fails"));
}

// An invalid rule is refused with the field named: by the CRD's schema at apply where it can
// say so, and by the operator (SpecValid=False) for what no schema says.
TEST_F(OperatorE2E, FailureRules_Invalid_RefusedNamingTheField) {
  auto op = Operator();
  LocalControlPlane::Result refused = cluster_->Kubectl(
      {"apply"}, JobYaml("e2e-rule-bad", 2, "k8s",
                         OneRule("Explode", R"(onExitCodes: {operator: In, values: [3]})")));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("action")) << refused.output;
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, JobYaml("e2e-rule-nomatcher", 2, "k8s", R"(  failurePolicy:
    rules:
      - action: FailJob
)"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob(
      "default", "e2e-rule-nomatcher",
      [](const json& j) {
        for (const json& c : j.value("status", json::object()).value("conditions", json::array())) {
          if (c.value("type", "") == "SpecValid" && c.value("status", "") == "False") return true;
        }
        return false;
      },
      kJobTimeout);
  EXPECT_THAT(job.dump(), HasSubstr("spec.failurePolicy.rules[0]: needs a matcher")) << job.dump(2);
}

// At scale: 64 ranks (64 trainers, 64 sidecars) through the operator; one trainer killed; every
// old pod must go (each kubelet confirms its deletion even while the API server is busy with 63
// others: once a final delete was lost and 2 pods stayed terminating for good) and the gang must
// restart and succeed.
TEST_F(OperatorE2E, SixtyFourRanks_TrainerKilled_EveryOldPodGoesAndTheGangRestartsAndSucceeds) {
  auto op = Operator();
  constexpr int kRanks = 64;
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-scale", kRanks, "k8s-hold")).exit_code, 0);
  json ready = cluster_->WaitForJob("default", "e2e-scale", AllReady, absl::Minutes(4));
  ASSERT_TRUE(AllReady(ready)) << ready.dump(2) << Events(*cluster_, "e2e-scale");
  pid_t pid = LocalControlPlane::WaitForProcess(
      "test-trainer",
      {"COHORT_JOB_NAME=e2e-scale", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's trainer process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  json job = cluster_->WaitForJob("default", "e2e-scale", Finished, absl::Minutes(4));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-scale");
  EXPECT_EQ(StatusInt(job, "restarts"), 1);
  EXPECT_EQ(StatusInt(job, "succeeded"), kRanks);
  EXPECT_THAT(Events(*cluster_, "e2e-scale"), ::testing::Not(HasSubstr("ForceDeleted")))
      << "every old pod was confirmed gone by its kubelet, none needed forcing";
}

// A lost node: a 4-rank job spread over 2 nodes; the node without rank 0 is lost the way a
// machine is (its kubelet killed, and with it its containers; its Lease stops). Restarting in
// place (the default), only the lost node's pods are replaced, at once, under names of their own
// (the lost ones stay Terminating until the operator force-deletes them: grace period 2 s +
// --force-delete-after 2 s); the pods on the node left stay, their processes restart. The next
// attempt runs on the node left and succeeds.
TEST_F(OperatorE2E, LostNode_OnlyItsPodsReplaced_OnTheNodeLeft_TheOthersStayAndTheJobSucceeds) {
  LocalControlPlane cluster({"--nodes", "2", "--node-monitor-grace-period", "2"});
  ASSERT_NE(cluster.kubeconfig(), "") << "the two-node control plane did not start";
  auto op = Operator("operator", {"--force-delete-after", "2"}, &cluster);
  const std::string name = "e2e-lost-node";
  ASSERT_EQ(cluster
                .Kubectl({"apply"}, JobYaml(name, 4, "k8s-hold", "",
                                            "      terminationGracePeriodSeconds: 2\n"))
                .exit_code,
            0);
  json ready = cluster.WaitForJob("default", name, AllReady, kJobTimeout);
  ASSERT_TRUE(AllReady(ready)) << ready.dump(2) << Events(cluster, name);
  // Every rank registered and trains: pods are Ready before that, and a node lost while rank 0
  // still waits for its ranks to register leaves rank 0 waiting out its initialization timeout
  // (5 min), with no process of the job failed.
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(TrainerLogOnceItHas(cluster, name, rank, "TRAINING"))
        << "rank " << rank << " does not train\n"
        << TrainerLog(cluster, name, rank) << Events(cluster, name);
  }
  absl::StatusOr<json> pods =
      cluster.client().List(kube::kPods, "default", "cohort.dev/job-name=" + name);
  ASSERT_TRUE(pods.ok()) << pods.status();
  std::map<std::string, std::string> node_of;  // Pod -> node.
  std::set<std::string> nodes;
  for (const json& pod : (*pods)["items"]) {
    node_of[pod["metadata"]["name"]] = pod["spec"].value("nodeName", "");
    nodes.insert(pod["spec"].value("nodeName", ""));
  }
  ASSERT_EQ(nodes.size(), 2u) << "the scheduler spreads the pods over both nodes: "
                              << (*pods).dump(2);
  const std::string kept = node_of[name + "-0"];  // Rank 0's node, with the coordination service.
  const std::string lost = kept == "node-0" ? "node-1" : "node-0";

  const std::map<std::string, std::string> before = PodUids(cluster, name);
  const absl::Time lost_at = absl::Now();
  ASSERT_TRUE(cluster.LoseNode(lost).ok());
  json job = cluster.WaitForJob("default", name, Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(cluster, name);
  EXPECT_LT(absl::Now() - lost_at, absl::Seconds(45)) << Events(cluster, name);
  EXPECT_EQ(StatusInt(job, "restartAttempt"), 1);
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace");
  const std::string events = Events(cluster, name);
  EXPECT_THAT(events, HasSubstr("replaced alone")) << events;

  // Every rank ran attempt 1 on the node left: the pods there stayed (same UIDs), the lost node's
  // were replaced by pods named <job>-<rank>-r1.
  absl::StatusOr<json> now =
      cluster.client().List(kube::kPods, "default", "cohort.dev/job-name=" + name);
  ASSERT_TRUE(now.ok()) << now.status();
  int replaced = 0;
  for (const auto& [pod, node] : node_of) {
    const std::string rank = pod.substr(name.size() + 1);
    const std::string replacement = absl::StrCat(pod, "-r1");
    std::string ran_attempt_1 = pod;
    for (const json& p : (*now)["items"]) {
      const std::string pod_name = p["metadata"].value("name", "");
      if (pod_name == pod && node == kept) {
        EXPECT_EQ(p["metadata"].value("uid", ""), before.at(pod))
            << pod << " on the node left was replaced";
      }
      if (pod_name == replacement) {
        EXPECT_EQ(node, lost) << pod << " was replaced though its node was not lost";
        EXPECT_EQ(p["spec"].value("nodeName", ""), kept)
            << replacement << ": nothing runs on a lost node";
        ran_attempt_1 = replacement;
        ++replaced;
      }
    }
    EXPECT_THAT(PodTrainerLog(cluster, ran_attempt_1),
                HasSubstr(absl::StrCat("INITIALIZED rank=", rank, " attempt=1")))
        << ran_attempt_1 << "\n"
        << events;
  }
  EXPECT_EQ(replaced, 2) << "the lost node's two pods, and only they, were replaced\n" << events;
  // kubectl shows the node lost (once its Lease is older than the grace period: the job may have
  // finished before).
  EXPECT_FALSE(cluster
                   .WaitForObject(
                       kube::kNodes, "", lost,
                       [](const json& n) { return kube::ConditionStatus(n, "Ready") == "Unknown"; },
                       kJobTimeout)
                   .is_null())
      << lost << " was never marked lost";
  LocalControlPlane::Result shown = cluster.Kubectl({"get", "nodes"});
  bool marked = false;
  for (absl::string_view line : absl::StrSplit(shown.output, '\n')) {
    if (absl::StartsWith(line, lost)) marked = absl::StrContains(line, "NotReady");
  }
  EXPECT_TRUE(marked) << shown.output;
}

// Hot spares: three nodes with room for one pod each, a job of two pods and one spare. Whatever
// takes pod 1 away (`lose`: its node lost, or the pod evicted), the spare runs pod 1's rank in the
// next attempt without any pod being scheduled for it, a new spare is created, and the job
// succeeds. Returns the finished job.
json RunWithASpareAndLosePodOne(LocalControlPlane& cluster, const std::string& name,
                                const std::function<void(const std::string& node)>& lose) {
  json none;
  EXPECT_EQ(cluster
                .Kubectl({"apply"}, JobYaml(name, 2, "k8s-hold", "  spares: 1\n",
                                            "      terminationGracePeriodSeconds: 2\n"))
                .exit_code,
            0);
  // Every rank trains and the spare is ready to take a slot.
  json ready = cluster.WaitForJob(
      "default", name,
      [](const json& j) { return AllReady(j) && StatusInt(j, "readySpares") == 1; }, kJobTimeout);
  if (!AllReady(ready)) {
    ADD_FAILURE() << ready.dump(2) << Events(cluster, name);
    return none;
  }
  // Every rank registered and trains (pods are Ready before that: lost while rank 0 still waits
  // for rank 1 to register, attempt 0 ends in INIT_FAILED, never at a step both ranks SYNC at).
  for (int rank : {0, 1}) {
    if (!TrainerLogOnceItHas(cluster, name, rank, "TRAINING")) {
      ADD_FAILURE() << "rank " << rank << " does not train\n"
                    << TrainerLog(cluster, name, rank) << Events(cluster, name);
      return none;
    }
  }
  const std::string spare = name + "-spare0";
  absl::StatusOr<json> spare_pod = cluster.client().Get(kube::kPods, "default", spare);
  EXPECT_TRUE(spare_pod.ok()) << spare_pod.status();
  if (!spare_pod.ok()) return none;
  EXPECT_FALSE((*spare_pod)["metadata"]["labels"].contains("cohort.dev/rank"))
      << spare_pod->dump(2);
  const json spare_uid = (*spare_pod)["metadata"]["uid"];
  LocalControlPlane::Result table = cluster.Kubectl({"get", "djob", name, "-o", "wide"});
  EXPECT_THAT(table.output, HasSubstr("SPARES")) << table.output;
  absl::StatusOr<json> pod1 = cluster.client().Get(kube::kPods, "default", name + "-1");
  EXPECT_TRUE(pod1.ok()) << pod1.status();
  if (!pod1.ok()) return none;
  lose((*pod1)["spec"].value("nodeName", ""));

  json job = cluster.WaitForJob("default", name, Finished, kJobTimeout);
  const std::string events = Events(cluster, name);
  EXPECT_EQ(Phase(job), "Succeeded") << job.dump(2) << events;
  EXPECT_EQ(StatusInt(job, "restartAttempt"), 1) << events;
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace") << events;
  EXPECT_THAT(events, HasSubstr(absl::StrCat("SpareTakesSlot: spare pod ", spare,
                                             " takes the slot of rank 1 (pod ", name,
                                             "-1) in restart attempt 1")))
      << events;
  // The spare holds slot 1: its labels and the job's status say so; it ran rank 1 in attempt 1.
  EXPECT_EQ(job["status"]["slots"], json::array({{{"podIndex", 1}, {"pod", spare}}}))
      << job.dump(2);
  spare_pod = cluster.client().Get(kube::kPods, "default", spare);
  EXPECT_TRUE(spare_pod.ok()) << spare_pod.status();
  if (spare_pod.ok()) {
    EXPECT_EQ((*spare_pod)["metadata"]["labels"].value("cohort.dev/rank", ""), "1")
        << spare_pod->dump(2);
    EXPECT_EQ((*spare_pod)["metadata"]["uid"], spare_uid) << "the spare pod was replaced";
  }
  EXPECT_THAT(PodTrainerLog(cluster, spare), HasSubstr("INITIALIZED rank=1 attempt=1")) << events;
  EXPECT_THAT(TrainerLog(cluster, name, 0), HasSubstr("INITIALIZED rank=0 attempt=1")) << events;
  // No pod was created for the slot; a new spare was.
  absl::StatusOr<json> pods =
      cluster.client().List(kube::kPods, "default", "cohort.dev/job-name=" + name);
  EXPECT_TRUE(pods.ok()) << pods.status();
  std::set<std::string> names;
  for (const json& p : pods.ok() ? (*pods)["items"] : json::array())
    names.insert(p["metadata"].value("name", ""));
  EXPECT_FALSE(names.count(name + "-1-r1")) << "a replacement pod was created\n" << events;
  EXPECT_GE(StatusInt(job, "sparesCreated"), 2) << "no new spare was created\n"
                                                << job.dump(2) << events;
  return job;
}

TEST_F(OperatorE2E,
       HotSpare_NodeOfPodOneLost_TheSpareRunsItsRankInTheNextAttempt_ANewSpareIsCreated) {
  LocalControlPlane cluster(
      {"--nodes", "3", "--max-pods", "1", "--node-monitor-grace-period", "2"});
  ASSERT_NE(cluster.kubeconfig(), "") << "the three-node control plane did not start";
  auto op = Operator("operator", {"--force-delete-after", "2"}, &cluster);
  json job = RunWithASpareAndLosePodOne(cluster, "e2e-spare-node", [&](const std::string& node) {
    ASSERT_TRUE(cluster.LoseNode(node).ok()) << node;
  });
  ASSERT_FALSE(job.is_null());
}

TEST_F(OperatorE2E, HotSpare_PodOneEvicted_BothSyncAtOneStep_TheSpareRunsItsRankInTheNextAttempt) {
  LocalControlPlane cluster({"--nodes", "3", "--max-pods", "1"});
  ASSERT_NE(cluster.kubeconfig(), "") << "the three-node control plane did not start";
  auto op = Operator("operator", {}, &cluster);
  const std::string name = "e2e-spare-evict";
  json job = RunWithASpareAndLosePodOne(cluster, name, [&](const std::string&) {
    LocalControlPlane::Result evicted = cluster.Evict("default", name + "-1");
    ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  // The preemption notice reached both ranks: they stopped at one step (the checkpoint the next
  // attempt resumes from), pod 1's on its way out.
  std::string step;
  for (int rank : {0, 1}) {
    const std::string log = TrainerLog(cluster, name, rank);
    const size_t at = log.find(absl::StrCat("SYNC rank=", rank, " step="));
    ASSERT_NE(at, std::string::npos) << log;
    const std::string seen =
        log.substr(log.find("step=", at), log.find('\n', at) - log.find("step=", at));
    if (step.empty()) step = seen;
    EXPECT_EQ(seen, step) << "rank " << rank;
  }
}

TEST_F(OperatorE2E, SuspendResumeDeadlineAndTtl) {
  auto op = Operator();
  bool (*has_no_pods)(const std::vector<json>&) = [](const std::vector<json>& pods) {
    return pods.empty();
  };

  // Created suspended: nothing runs; resumed: a new restart attempt runs to the end.
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-suspend", 2, "k8s", "  suspend: true\n")).exit_code,
      0);
  json job = cluster_->WaitForJob(
      "default", "e2e-suspend", [](const json& j) { return Phase(j) == "Suspended"; }, kJobTimeout);
  ASSERT_EQ(Phase(job), "Suspended") << job.dump(2);
  EXPECT_TRUE(cluster_->WaitForPods("default", "cohort.dev/job-name=e2e-suspend", has_no_pods,
                                    absl::Seconds(1)));
  ASSERT_EQ(cluster_
                ->Kubectl({"patch", "djob", "e2e-suspend", "--type=merge", "-p",
                           R"({"spec":{"suspend":false}})"})
                .exit_code,
            0);
  job = cluster_->WaitForJob("default", "e2e-suspend", Finished, kJobTimeout);
  EXPECT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-suspend");

  // activeDeadlineSeconds fails a job that runs too long, and its pods go.
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          JobYaml("e2e-deadline", 2, "k8s-hold", "  activeDeadlineSeconds: 2\n"))
                .exit_code,
            0);
  job = cluster_->WaitForJob("default", "e2e-deadline", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Failed") << job.dump(2);
  EXPECT_THAT(job.dump(), HasSubstr("DeadlineExceeded"));
  EXPECT_TRUE(cluster_->WaitForPods("default", "cohort.dev/job-name=e2e-deadline", has_no_pods,
                                    kJobTimeout));

  // ttlSecondsAfterFinished deletes the finished job, and with it everything it created.
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-ttl", 2, "k8s", "  ttlSecondsAfterFinished: 1\n"))
          .exit_code,
      0);
  LocalControlPlane::Result waited =
      cluster_->Kubectl({"wait", "--for=delete", "djob/e2e-ttl", "--timeout=90s"});
  EXPECT_EQ(waited.exit_code, 0) << waited.output;
  EXPECT_TRUE(
      cluster_->WaitForPods("default", "cohort.dev/job-name=e2e-ttl", has_no_pods, kJobTimeout));
}

TEST_F(OperatorE2E, InvalidSpec_ConditionAndEventAndNothingCreated) {
  auto op = Operator();
  // The CRD schema cannot know that the gang needs restartPolicy Never; the operator does.
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          JobYaml("e2e-invalid", 2, "k8s", "", "      restartPolicy: Always\n"))
                .exit_code,
            0);
  auto invalid = [](const json& job) {
    if (!job.contains("status")) return false;
    for (const json& c : job["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "SpecValid" && c.value("status", "") == "False") return true;
    }
    return false;
  };
  json job = cluster_->WaitForJob("default", "e2e-invalid", invalid, kJobTimeout);
  ASSERT_TRUE(invalid(job)) << job.dump(2);
  EXPECT_THAT(job.dump(), HasSubstr("restartPolicy"));
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-invalid", "InvalidSpec"), HasSubstr("InvalidSpec"));
  absl::StatusOr<json> pods =
      cluster_->client().List(kube::kPods, "default", "cohort.dev/job-name=e2e-invalid");
  ASSERT_TRUE(pods.ok());
  EXPECT_TRUE((*pods)["items"].empty());
  EXPECT_EQ(cluster_->Kubectl({"delete", "djob", "e2e-invalid"}).exit_code, 0);
}

TEST_F(OperatorE2E, OperatorKilledAndRestartedMidJob_NoDuplicatePodsAndStatusContinues) {
  auto first = Operator("operator 1");
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-resume", 2, "k8s-hold")).exit_code, 0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-resume", AllReady, kJobTimeout)));
  absl::StatusOr<json> before =
      cluster_->client().List(kube::kPods, "default", "cohort.dev/job-name=e2e-resume");
  ASSERT_TRUE(before.ok());

  first->Signal(SIGKILL);
  ASSERT_TRUE(first->WaitForExit(absl::Seconds(10)).has_value());
  // Without a graceful release the new replica waits out the killed one's Lease (short here).
  auto second = Operator("operator 2");
  absl::StatusOr<json> after =
      cluster_->client().List(kube::kPods, "default", "cohort.dev/job-name=e2e-resume");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ((*after)["items"].size(), 2u) << "no duplicate pods";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*after)["items"][i]["metadata"]["uid"], (*before)["items"][i]["metadata"]["uid"])
        << "the running pods are kept, not recreated";
  }

  // The new operator carries the job on: a preemption is handled and counted.
  ASSERT_EQ(cluster_->Kubectl({"delete", "pod", "e2e-resume-0", "--wait=false"}).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-resume", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-resume");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
}

TEST_F(OperatorE2E, TwoReplicas_OneLeadsAndTheOtherTakesOverOnShutdown) {
  auto a = Operator("replica a", {"--identity", "replica-a"});
  auto b = StartOperator("replica b", {"--identity", "replica-b"});
  ASSERT_NE(b->WaitForLine("waiting to lead", absl::Seconds(10)), "");

  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-leader", 2, "k8s")).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-leader", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2);
  EXPECT_FALSE(b->HasLine("leading as")) << "the standby must not act while the leader renews";
  absl::StatusOr<json> lease = cluster_->client().Get(kube::kLeases, "default", Lease());
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)["spec"].value("holderIdentity", ""), "replica-a");

  // A graceful shutdown releases the Lease: the standby takes over well within a lease duration.
  a->Signal(SIGTERM);
  std::optional<int> status = a->WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(Subprocess::ExitCodeOf(*status), 0);
  EXPECT_NE(b->WaitForLine("leading as replica-b", absl::Seconds(10)), "");
  EXPECT_NE(b->WaitForLine("informers synced", absl::Seconds(10)), "");
}

// promtool's verdict on a /metrics body: "" when it accepts it, else its complaint.
std::string PromtoolProblems(const std::string& metrics) {
  std::string file = absl::StrCat(::testing::TempDir(), "/operator-metrics.txt");
  std::ofstream(file) << metrics;
  FILE* pipe = popen(absl::StrCat("promtool check metrics < ", file, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "cannot run promtool";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe)) out += buf;
  return WEXITSTATUS(pclose(pipe)) == 0 ? "" : out.empty() ? "rejected" : out;
}

TEST_F(OperatorE2E, Metrics_CountWhatTheOperatorDidAndPromtoolAcceptsThem) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found: install Debian's 'prometheus' package (make deps does)";
  }
  auto op = Operator();
  std::string line = op->WaitForLine("metrics on port ", absl::Seconds(1));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &port)) << line;
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-metrics", 2, "k8s")).exit_code, 0);
  ASSERT_EQ(Phase(cluster_->WaitForJob("default", "e2e-metrics", Finished, kJobTimeout)),
            "Succeeded");

  httplib::Client http("127.0.0.1", port);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  // Counters only: the pods were created passes before the job finished.
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("cohort_operator_pods_created_total 2"));
  EXPECT_THAT(res->body, HasSubstr("cohort_operator_leader 1"));
  EXPECT_THAT(res->body, HasSubstr("cohort_operator_reconciles_total{result=\"success\"}"));
  EXPECT_THAT(res->body, HasSubstr("cohort_build_info{component=\"operator\""));
  EXPECT_EQ(PromtoolProblems(res->body), "");
}

// A DistributedJob of 2 pods running `program` (with `args`) under the environment's python;
// `extra_spec` adds spec fields (processesPerPod), `command` replaces python (torchrun).
std::string PythonJobYaml(const std::string& name, const std::string& venv,
                          const std::string& program, const std::string& args,
                          const std::string& env_yaml, const std::string& extra_spec = "",
                          const std::string& command = "") {
  return absl::StrReplaceAll(
      R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: NAME
spec:
  replicas: 2
  maxRestarts: 2
  restartBackoff: 100ms
EXTRA_SPEC  template:
    spec:
      containers:
        - name: trainer
          image: python:3.11
          command: ["PYTHON", "PROGRAM"ARGS]
          env:
            - name: JAX_PLATFORMS
              value: cpu
ENV)",
      {{"NAME", name},
       {"EXTRA_SPEC", extra_spec},
       {"PYTHON", command.empty() ? absl::StrCat(venv, "/bin/python") : command},
       {"PROGRAM", absl::StrCat(COHORT_SOURCE_DIR, "/", program)},
       {"ARGS", args.empty() ? "" : absl::StrCat(", \"", args, "\"")},
       {"ENV", env_yaml}});
}

// Waits until `rank`'s trainer log of `job` has a line containing `text`; returns the log then,
// or "" at the deadline (a restarted pod's log starts afresh, so read it while it is there).
std::string WaitForLog(LocalControlPlane& cluster, const std::string& job, int rank,
                       const std::string& text, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::string log = TrainerLog(cluster, job, rank);
    if (absl::StrContains(log, text)) return log;
    absl::SleepFor(absl::Milliseconds(20));  // A file, written by another process: polled.
  }
  return "";
}

// What the test programs recorded (COHORT_TEST_RECORD) across every restart attempt.
std::string RecordYaml(const std::string& path) {
  return absl::StrCat("            - name: COHORT_TEST_RECORD\n              value: ", path, "\n");
}
std::string ReadRecord(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// An unmodified JAX program (tests/frameworks/jax_program.py) whose processes register with rank
// 0's sidecar, not with the service JAX's process 0 starts: the sidecar's metrics show both tasks.
TEST_F(OperatorE2E, JaxProgram_TwoRanksSucceedThroughRankZerosSidecar) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          PythonJobYaml("e2e-jax", venv, "tests/frameworks/jax_program.py", "k8s",
                                        "            - name: COHORT_TEST_SIDECAR_METRICS\n"
                                        "              value: pod\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-jax", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(
        TrainerLog(*cluster_, "e2e-jax", rank),
        HasSubstr(absl::StrCat("JAX process ", rank,
                               " of 2: kv, barrier, allgather, broadcast and live nodes ok")));
  }
  std::string log0 = TrainerLog(*cluster_, "e2e-jax", 0);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(log0,
                HasSubstr(absl::StrCat("METRIC cohort_task_state{rank=\"", rank,
                                       "\",state=\"shut_down\",protocol=\"xla_coordination\"} 1")));
  }
}

TEST_F(OperatorE2E, JaxProgram_RankKilled_TheOtherIsToldAndTheGangRestarts) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-jax-kill", venv,
                                                   "tests/frameworks/jax_program.py", "k8s",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n"))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-kill", 0, "JAX process 0 ready", absl::Minutes(2)), "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-kill", 1, "JAX process 1 ready", absl::Minutes(1)), "");
  pid_t pid = LocalControlPlane::WaitForProcess(
      "jax_program.py",
      {"COHORT_JOB_NAME=e2e-jax-kill", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's JAX process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  absl::Time killed = absl::Now();
  std::string told =
      WaitForLog(*cluster_, "e2e-jax-kill", 0,
                 "Terminating process because the JAX distributed service detected fatal errors",
                 absl::Seconds(10));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_THAT(told, HasSubstr("rank 1 (JAX process at "));
  // Either path names the death: the PollForError stream of the killed process closing, or
  // cohort-launch reporting its pod's processes ended (whichever reaches the service first).
  EXPECT_THAT(told, AnyOf(HasSubstr("its JAX process died or was killed"),
                          HasSubstr("killed by signal 9")));

  json job = cluster_->WaitForJob("default", "e2e-jax-kill", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax-kill");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-jax-kill");
  // In place: the new JAX processes initialized again against rank 0's JAX port, which the
  // attempt's fresh coordination service serves.
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-jax-kill");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  EXPECT_THAT(TrainerLog(*cluster_, "e2e-jax-kill", 0),
              HasSubstr("JAX process 0 restart attempt 1"));
}

// `kubectl drain`: the evicted pod's JAX process gets SIGTERM; JAX's handler sets the notice key
// in Cohort's store; both processes agree on a step, save and exit; the gang restarts as a
// preemption.
TEST_F(OperatorE2E, JaxProgram_PodEvicted_BothSyncAtOneStepAndTheGangRestartsAsAPreemption) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  const std::string record = absl::StrCat(cluster_->dir(), "/e2e-jax-evict.record");
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-jax-evict", venv,
                                                   "tests/frameworks/jax_program.py", "k8s",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n" +
                                                       RecordYaml(record)))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-evict", 0, "JAX process 0 ready", absl::Minutes(2)), "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-evict", 1, "JAX process 1 ready", absl::Minutes(1)), "");
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-jax-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob("default", "e2e-jax-evict", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1) << Events(*cluster_, "e2e-jax-evict");
  EXPECT_EQ(StatusInt(job, "restarts"), 0)
      << Events(*cluster_, "e2e-jax-evict") << TrainerLog(*cluster_, "e2e-jax-evict", 0)
      << PodTrainerLog(*cluster_, "e2e-jax-evict-1-r1");
  const std::string recorded = ReadRecord(record);
  auto sync_step = [&](int rank) {
    size_t at =
        recorded.find(absl::StrCat("JAX process ", rank, " preemption sync point at step "));
    if (at == std::string::npos) return std::string("none");
    at = recorded.find("at step ", at);
    return recorded.substr(at, recorded.find(';', at) - at);
  };
  EXPECT_NE(sync_step(0), "none") << recorded;
  EXPECT_EQ(sync_step(0), sync_step(1)) << recorded;
  EXPECT_THAT(recorded, HasSubstr("JAX process 1 restart attempt 1"));
}

// A documented example (manifests/examples/), applied as a user would, except that its command
// (pip install, then python on the program) becomes the test environment's python on the program:
// pods here have no image and no network.
std::string ExampleYaml(const std::string& file, const std::string& pip_install,
                        const std::string& venv) {
  std::ifstream manifest(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/", file));
  std::string yaml((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  const std::string command =
      absl::StrCat("[\"sh\", \"-c\", \"", pip_install, " && exec python /program/train.py\"]");
  EXPECT_THAT(yaml, HasSubstr(command));
  return absl::StrReplaceAll(
      yaml, {{command, absl::StrCat("[\"", venv, "/bin/python\", \"/program/train.py\"]")}});
}

TEST_F(OperatorE2E, JaxExample_RunsToTheEnd) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX example";
  auto op = Operator();
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"}, ExampleYaml("jax-job.yaml", "pip install --quiet jax==0.10.2", venv))
          .exit_code,
      0);
  json job = cluster_->WaitForJob("default", "jax-example", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "jax-example");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "jax-example", rank),
                HasSubstr(absl::StrCat("process ", rank, ": done")));
  }
}

TEST_F(OperatorE2E, PytorchExample_RunsToTheEnd) {
  std::string venv = TorchEnvironment();
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch example";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, ExampleYaml("pytorch-job.yaml",
                                                 "pip install --quiet torch==2.15.0", venv))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "pytorch-example", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "pytorch-example");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "pytorch-example", rank),
                HasSubstr(absl::StrCat("rank ", rank, ": done")));
  }
}

// The cohort package's example (manifests/examples/pytorch-preemptible.yaml), applied as a user
// would, except for its command (the test environment's python, with torch and the wheel) and its
// checkpoint volume (a directory that outlives the pods, as the manifest says to use): pod 1 is
// evicted mid-run; every rank checkpoints at one step and exits 76; the gang restarts as a
// preemption and every rank resumes from that step.
TEST_F(OperatorE2E, PythonPreemptibleExample_Evicted_CheckpointsAtOneStepAndResumes) {
  std::string venv = CohortPythonEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the cohort package's example";
  auto op = Operator();
  const std::string program =
      absl::StrCat(COHORT_SOURCE_DIR, "/examples/python/pytorch_preemptible.py");
  // The ConfigMaps the manifest's header says to create (the wheel's is left empty: the test
  // environment has it installed).
  for (const auto& [name, files] :
       {std::pair<std::string, std::vector<std::string>>{"pytorch-preemptible-program", {program}},
        {"cohort-wheel", {}}}) {
    LocalControlPlane::Result made = cluster_->CreateConfigMap(name, files);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  const std::string checkpoints = absl::StrCat(cluster_->dir(), "/preemptible-checkpoints");
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/pytorch-preemptible.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string command =
      R"(["sh", "-c", "pip install --quiet torch==2.15.0 /wheels/cohort-*.whl && exec python /program/pytorch_preemptible.py"])";
  const std::string volume = "          emptyDir: {}";
  ASSERT_THAT(yaml, HasSubstr(command));
  ASSERT_THAT(yaml, HasSubstr(volume));
  yaml = absl::StrReplaceAll(
      yaml,
      {{command,
        absl::StrCat(R"([")", venv,
                     R"(/bin/python", "/program/pytorch_preemptible.py", "--steps", "1000"])")},
       {volume, absl::StrCat("          hostPath:\n            path: ", checkpoints)}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  ASSERT_NE(WaitForLog(*cluster_, "pytorch-preemptible", 0, "rank 0/2 step 50 ", absl::Minutes(3)),
            "");
  // The steps the program reports (cohort.report_progress) are on rank 0's sidecar's /metrics:
  // its own (cohort_trainer_step) and every rank's (cohort_task_step).
  LocalControlPlane::Result pod =
      cluster_->Kubectl({"get", "pod", "pytorch-preemptible-0", "-o", "json"});
  ASSERT_EQ(pod.exit_code, 0) << pod.output;
  const json pod0 = json::parse(pod.output);
  const int metrics_port = MetricsPort(pod0);
  ASSERT_GT(metrics_port, 0) << pod.output;
  httplib::Client sidecar(pod0["status"].value("podIP", ""), metrics_port);
  auto step_of = [](const std::string& metrics, const std::string& name, const std::string& label) {
    double best = -1;
    for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
      if (!absl::StartsWith(line, name) || line.size() <= name.size() ||
          (line[name.size()] != ' ' && line[name.size()] != '{') ||
          !absl::StrContains(line, label)) {
        continue;  // another series (cohort_trainer_step_seconds_...), or another rank's
      }
      double v;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) best = std::max(best, v);
    }
    return best;
  };
  std::string metrics;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
    auto res = sidecar.Get("/metrics");
    metrics = res ? res->body : "";
    if (step_of(metrics, "cohort_trainer_step", "") >= 50 &&
        step_of(metrics, "cohort_task_step", "rank=\"1\"") >= 50) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_GE(step_of(metrics, "cohort_trainer_step", ""), 50) << metrics;
  EXPECT_GE(step_of(metrics, "cohort_task_step", "rank=\"1\""), 50) << metrics;
  LocalControlPlane::Result evicted = cluster_->Evict("default", "pytorch-preemptible-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob("default", "pytorch-preemptible", Finished, absl::Minutes(5));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "pytorch-preemptible");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1) << Events(*cluster_, "pytorch-preemptible");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(checkpoints, "/checkpoint.pt")));
  std::string resumed_at[2];
  for (int rank = 0; rank < 2; ++rank) {
    // Attempt 1's: pod 0 restarted its process in place, the evicted pod 1 was replaced alone.
    std::string log = rank == 0 ? TrainerLog(*cluster_, "pytorch-preemptible", 0)
                                : PodTrainerLog(*cluster_, "pytorch-preemptible-1-r1");
    const std::string prefix = absl::StrCat("rank ", rank, ": resumed from step ");
    size_t at = log.find(prefix);
    ASSERT_NE(at, std::string::npos) << log;
    at += prefix.size();
    resumed_at[rank] = log.substr(at, log.find(' ', at) - at);
    EXPECT_THAT(log, HasSubstr("(restart attempt 1)"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("rank ", rank, ": done at step 999")));
  }
  EXPECT_EQ(resumed_at[0], resumed_at[1]);
}

// The cohort package's JAX example (manifests/examples/jax-zero-arg.yaml) through the operator:
// `import cohort.jax`, then jax.distributed.initialize() with no arguments in each pod.
TEST_F(OperatorE2E, JaxZeroArgExample_InitializesWithoutArgumentsInEveryPod) {
  std::string venv = CohortJaxEnvironment("0.10.2");
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no jax for the cohort package's JAX example";
  auto op = Operator();
  const std::string program = absl::StrCat(COHORT_SOURCE_DIR, "/examples/python/jax_zero_arg.py");
  for (const auto& [name, files] :
       {std::pair<std::string, std::vector<std::string>>{"jax-zero-arg-program", {program}},
        {"cohort-wheel", {}}}) {
    LocalControlPlane::Result made = cluster_->CreateConfigMap(name, files);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/jax-zero-arg.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string command =
      R"(["sh", "-c", "pip install --quiet jax==0.10.2 /wheels/cohort-*.whl && exec python /program/jax_zero_arg.py"])";
  ASSERT_THAT(yaml, HasSubstr(command));
  yaml = absl::StrReplaceAll(
      yaml,
      {{command, absl::StrCat(R"([")", venv, R"(/bin/python", "/program/jax_zero_arg.py"])")}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "jax-zero-arg", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "jax-zero-arg");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "jax-zero-arg", rank),
                HasSubstr(absl::StrCat("process ", rank, ": every process's index: [0, 1]")));
  }
}

// An unmodified PyTorch DDP program: init_process_group("gloo") with no arguments.
TEST_F(OperatorE2E, TorchDdpProgram_TrainsAndSucceeds_AndAKilledRankRestartsTheGang) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torch", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n"))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-torch", 0, "torch rank 0 of 2 ready (attempt 0)",
                       absl::Minutes(2)),
            "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-torch", 1, "torch rank 1 of 2 ready (attempt 0)",
                       absl::Minutes(1)),
            "");
  pid_t pid = LocalControlPlane::WaitForProcess(
      "torch_ddp_program.py",
      {"COHORT_JOB_NAME=e2e-torch", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's torch process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  json job = cluster_->WaitForJob("default", "e2e-torch", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torch");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-torch");
  // In place: rank 0's new process brought its TCPStore back on MASTER_PORT in the same pod.
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-torch");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torch", rank),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// The line of `program` (under the source tree) holding `text`, as "<file name>:<line>".
std::string SourceLine(const std::string& program, const std::string& text) {
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/", program));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (absl::StrContains(line, text))
      return absl::StrCat(program.substr(program.rfind('/') + 1), ":", n);
  }
  return "";
}

// The job's Hung condition once it is True (within 3 minutes; else as it is then).
json WaitForHung(LocalControlPlane& cluster, const std::string& job) {
  json seen = cluster.WaitForJob(
      "default", job,
      [](const json& j) { return JobCondition(j, "Hung").value("status", "") == "True"; },
      absl::Minutes(3));
  return JobCondition(seen, "Hung");
}

// Hang detection (docs/faults.md, "Hung ranks") of an unmodified PyTorch program: rank 1 sleeps
// forever at step 20 of 1 s steps while rank 0 waits for it in DDP's all-reduce. Found after the
// automatic timeout (60 s: five 1 s steps are less), named with its line, every rank's stacks
// kept in the pods' cohort-agent directory and in the sidecars' logs, then restarted in place.
// Beside it, no false alarm: a healthy job whose steps take 30 s (each rank asleep in its own code
// between them, the other waiting in the all-reduce) runs 3 minutes without a hang, while the
// hook did report its steps (one test, so that the two share the time).
TEST_F(
    OperatorE2E,
    TorchDdpPrograms_RankSleepsForever_HungNamesItsLine_StacksKept_Restarted_ASlowJobBesideRaisesNothing) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  const std::string program = "tests/frameworks/torch_ddp_program.py";
  const std::string sleep_line = SourceLine(program, "time.sleep(1e9)");
  ASSERT_NE(sleep_line, "");
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-slow", venv, program, "",
                                                   "            - name: COHORT_TEST_STEP_S\n"
                                                   "              value: \"30\"\n"
                                                   "            - name: COHORT_TEST_STEPS\n"
                                                   "              value: \"6\"\n"))
                .exit_code,
            0);
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-hang", venv, program, "",
                                                   "            - name: COHORT_TEST_HANG_AT\n"
                                                   "              value: \"20\"\n"))
                .exit_code,
            0);
  ASSERT_NE(
      WaitForLog(*cluster_, "e2e-hang", 1, "torch rank 1 of 2 ready (attempt 0)", absl::Minutes(2)),
      "");
  const absl::Time ready = absl::Now();
  const json condition = WaitForHung(*cluster_, "e2e-hang");
  ASSERT_EQ(condition.value("status", ""), "True") << Events(*cluster_, "e2e-hang");
  // The sleep begins ~20 s after the ranks are ready: named within 90 s of it.
  EXPECT_LT(absl::Now() - ready, absl::Seconds(20 + 90));
  const std::string message = condition.value("message", "");
  EXPECT_THAT(message, HasSubstr(absl::StrCat("rank 1 (pod e2e-hang-1, local 0): ", sleep_line)));
  EXPECT_THAT(message, HasSubstr("time.sleep(1e9)"));
  EXPECT_THAT(message, HasSubstr("rank 0: "));
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-hang", "HangDetected"), HasSubstr(sleep_line));

  json job = cluster_->WaitForJob("default", "e2e-hang", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(JobCondition(job, "Hung").value("status", ""), "False") << job.dump(2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-hang", rank),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
  // The evidence outlives the restart: every thread's stacks, the sleeper's at its line, rank
  // 0's inside the backward pass that waits for the all-reduce; and the sidecars' logs.
  const std::string stacks1 =
      cluster_->ReadPodFile("e2e-hang-1", "volumes/cohort-agent/dumps/attempt-0/rank-1/stacks.txt");
  EXPECT_THAT(stacks1, HasSubstr("time.sleep(1e9)"));
  const std::string stacks0 =
      cluster_->ReadPodFile("e2e-hang-0", "volumes/cohort-agent/dumps/attempt-0/rank-0/stacks.txt");
  EXPECT_THAT(stacks0, HasSubstr("loss.backward()"));
  EXPECT_THAT(cluster_->ReadPodFile("e2e-hang-1", "cohort-sidecar.log"),
              HasSubstr("time.sleep(1e9)"));

  json slow = cluster_->WaitForJob("default", "e2e-slow", Finished, absl::Minutes(4));
  ASSERT_EQ(Phase(slow), "Succeeded") << slow.dump(2) << Events(*cluster_, "e2e-slow");
  EXPECT_EQ(StatusInt(slow, "restarts"), 0) << Events(*cluster_, "e2e-slow");
  EXPECT_EQ(StatusInt(slow, "lastHangId"), 0) << slow.dump(2);
  EXPECT_NE(JobCondition(slow, "Hung").value("status", ""), "True") << slow.dump(2);
  EXPECT_THAT(Events(*cluster_, "e2e-slow"), Not(HasSubstr("HangDetected")));
  EXPECT_THAT(cluster_->ReadPodFile("e2e-slow-0", "cohort-sidecar.log"),
              Not(HasSubstr("attempt hub: hang")));
  // The detector was told: the hook counted every step.
  const json status = json::parse(
      cluster_->ReadPodFile("e2e-slow-1", "volumes/cohort-agent/probe/rank-1/status.json"), nullptr,
      /*allow_exceptions=*/false);
  EXPECT_EQ(status.is_object() ? status.value("steps", -1) : -1, 6) << status.dump();
}

// jax#38503 on CPU JAX: one process blocks while the other waits for it in a cross-process
// collective, which JAX never gives up on. Hang detection names the blocked process and its line
// and the job restarts in place.
TEST_F(OperatorE2E,
       JaxProgram_OneProcessBlocks_TheOtherWaitsInACollective_HungNamesIt_RestartedAndSucceeds) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  const std::string program = "tests/frameworks/jax_hang_program.py";
  const std::string sleep_line = SourceLine(program, "time.sleep(1e9)");
  ASSERT_NE(sleep_line, "");
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, PythonJobYaml("e2e-jaxhang", venv, program, "", "")).exit_code,
      0);
  ASSERT_NE(
      WaitForLog(*cluster_, "e2e-jaxhang", 1, "JAX process 1 ready (attempt 0)", absl::Minutes(2)),
      "");
  const absl::Time ready = absl::Now();
  const json condition = WaitForHung(*cluster_, "e2e-jaxhang");
  ASSERT_EQ(condition.value("status", ""), "True") << Events(*cluster_, "e2e-jaxhang");
  // The block begins ~5 s after the processes are ready: named within 90 s of it.
  EXPECT_LT(absl::Now() - ready, absl::Seconds(5 + 90));
  EXPECT_THAT(condition.value("message", ""),
              HasSubstr(absl::StrCat("rank 1 (pod e2e-jaxhang-1, local 0): ", sleep_line)));
  json job = cluster_->WaitForJob("default", "e2e-jaxhang", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jaxhang");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-jaxhang");
  EXPECT_THAT(cluster_->ReadPodFile("e2e-jaxhang-1",
                                    "volumes/cohort-agent/dumps/attempt-0/rank-1/stacks.txt"),
              HasSubstr("time.sleep(1e9)"));
}

// The GPU node's shape: 2 pods x 2 processes, cohort-launch starting the processes of each pod,
// one sidecar per pod serving both.
TEST_F(OperatorE2E, TwoPodsOfTwoProcesses_RanksZeroToThreeWithLocalIndicesSucceed) {
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-pp", 2, "k8s", "  processesPerPod: 2\n")).exit_code,
      0);
  json job = cluster_->WaitForJob("default", "e2e-pp", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-pp");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = TrainerLog(*cluster_, "e2e-pp", rank / 2);
    EXPECT_THAT(log,
                HasSubstr(absl::StrCat("[rank ", rank, "] ENVIRONMENT ok: rank ", rank, " of 4")));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("[rank ", rank, "] RENDEZVOUS rank=", rank,
                                            " keys=4 count=4 local=", rank % 2, "/2")));
  }
  // kubectl get shows the processes per pod in force, and no spares column for a job without.
  LocalControlPlane::Result got = cluster_->Kubectl({"get", "djob", "e2e-pp"});
  EXPECT_TRUE(std::regex_search(got.output,
                                std::regex(R"(PROCESSES/POD[^\n]*\n\s*e2e-pp\s+\S+\s+\S+\s+2\s)")))
      << got.output;
  EXPECT_THAT(got.output, Not(HasSubstr("SPARES"))) << got.output;
}

TEST_F(OperatorE2E, TwoPodsOfTwo_OneProcessKilled_EveryRankToldAndTheGangRestartsOnce) {
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-ppkill", 2, "k8s-hold", "  processesPerPod: 2\n"))
          .exit_code,
      0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-ppkill", AllReady, kJobTimeout)));
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_NE(WaitForLog(*cluster_, "e2e-ppkill", rank / 2,
                         absl::StrCat("[rank ", rank, "] TRAINING"), kJobTimeout),
              "")
        << "rank " << rank << " never trained";
  }
  // Rank 3 is local process 1 of pod e2e-ppkill-1: one process, not the pod.
  pid_t pid = LocalControlPlane::WaitForProcess(
      "test-trainer",
      {"COHORT_JOB_NAME=e2e-ppkill", "COHORT_PROCESS_ID=3", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 3's trainer process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  json job = cluster_->WaitForJob("default", "e2e-ppkill", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-ppkill");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-ppkill");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  // The event names the pod, its ranks and, from cohort-launch's last line, the process.
  EXPECT_THAT(Events(*cluster_, "e2e-ppkill"),
              HasSubstr("pod e2e-ppkill-1 (ranks 2-3) exited with code 137"));
  EXPECT_THAT(Events(*cluster_, "e2e-ppkill"),
              HasSubstr("restart attempt 0 ended with rank 3's status (killed by signal 9"));
  // The second attempt's processes logged their own lines; every rank of the first was told.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-ppkill", rank / 2),
                HasSubstr(absl::StrCat("[rank ", rank, "] INITIALIZED rank=", rank, " attempt=1")));
  }
}

TEST_F(OperatorE2E, TwoPodsOfTwo_PodEvicted_AllFourCheckpointAtOneStepAndRestartAsAPreemption) {
  auto op = Operator();
  // The pods' logs start afresh with the restart: the processes also record their lines here.
  const std::string record = absl::StrCat(cluster_->dir(), "/ppevict-record.txt");
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"}, JobYaml("e2e-ppevict", 2, "k8s-hold", "  processesPerPod: 2\n") +
                                   "          env:\n" + RecordYaml(record))
          .exit_code,
      0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-ppevict", AllReady, kJobTimeout)));
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_NE(WaitForLog(*cluster_, "e2e-ppevict", rank / 2,
                         absl::StrCat("[rank ", rank, "] TRAINING"), kJobTimeout),
              "");
  }
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-ppevict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  json job = cluster_->WaitForJob("default", "e2e-ppevict", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-ppevict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1);
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_THAT(Events(*cluster_, "e2e-ppevict"),
              HasSubstr("pod e2e-ppevict-1 (ranks 2-3) was preempted"));
  // Every process of both pods reached the same sync step (the evicted pod's through
  // cohort-launch forwarding the SIGTERM, the other pod's through the job).
  const std::string lines = ReadRecord(record);
  std::set<std::string> steps;
  for (int rank = 0; rank < 4; ++rank) {
    std::string marker = absl::StrCat("[rank ", rank, "] SYNC rank=", rank, " step=");
    size_t at = lines.find(marker);
    ASSERT_NE(at, std::string::npos) << "rank " << rank << " did not sync:\n" << lines;
    steps.insert(lines.substr(at + marker.size(), lines.find('\n', at) - at - marker.size()));
  }
  EXPECT_EQ(steps.size(), 1u) << ::testing::PrintToString(steps);
}

// An unmodified DDP program (gloo) in pods of 2 processes started by cohort-launch: WORLD_SIZE 4,
// each process its RANK and LOCAL_RANK, one TCPStore on rank 0's process.
TEST_F(OperatorE2E, TorchDdpProgram_TwoPodsOfTwoProcesses_Trains) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torchpp", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "", "",
                                                   "  processesPerPod: 2\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-torchpp", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torchpp");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torchpp", rank / 2),
                HasSubstr(absl::StrCat("[rank ", rank, "] torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// The same program with `torchrun train.py` as the command (spec.launcher: Torchrun), as
// Kubeflow Trainer runs it: torchrun starts the pod's 2 processes from the PET_* variables.
TEST_F(OperatorE2E, TorchrunCommand_TwoPodsOfTwoProcesses_Trains) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torchrun", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "", "",
                                                   "  processesPerPod: 2\n  launcher: Torchrun\n",
                                                   absl::StrCat(venv, "/bin/torchrun")))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-torchrun", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torchrun")
                                     << TrainerLog(*cluster_, "e2e-torchrun", 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torchrun", rank / 2),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// An unmodified JAX program, 2 processes per pod: 4 tasks register with rank 0's JAX port.
TEST_F(OperatorE2E, JaxProgram_TwoPodsOfTwoProcesses_FourTasksRegisterAndFinish) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          PythonJobYaml("e2e-jaxpp", venv, "tests/frameworks/jax_program.py", "k8s",
                                        "            - name: COHORT_TEST_SIDECAR_METRICS\n"
                                        "              value: pod\n",
                                        "  processesPerPod: 2\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-jaxpp", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jaxpp");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(
        TrainerLog(*cluster_, "e2e-jaxpp", rank / 2),
        HasSubstr(absl::StrCat("[rank ", rank, "] JAX process ", rank,
                               " of 4: kv, barrier, allgather, broadcast and live nodes ok")));
  }
  std::string log0 = TrainerLog(*cluster_, "e2e-jaxpp", 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(log0,
                HasSubstr(absl::StrCat("METRIC cohort_task_state{rank=\"", rank,
                                       "\",state=\"shut_down\",protocol=\"xla_coordination\"} 1")));
  }
}

}  // namespace
}  // namespace cohort::testing
