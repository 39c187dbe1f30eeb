// End to end, the operator: restarting in place (spec.restartStrategy: InPlace), lost nodes and hot
// spares. The fixture and the shared helpers: operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

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

}  // namespace
}  // namespace cohort::testing
