// End to end, the operator: the basics: a job runs, a rank fails or is evicted, suspend and TTL, an
// invalid spec, the operator killed or replicated, its metrics. The fixture and the shared helpers:
// operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

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

}  // namespace
}  // namespace cohort::testing
