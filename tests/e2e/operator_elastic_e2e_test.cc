// Elastic replica groups end to end (docs/operator.md, "Elastic replica groups"): a four-node
// local cluster with room for one pod per node and one node cordoned, a three-pod demo-trainer job
// with spec.elastic. A lost node with no capacity: the job trains at two replica groups with the
// same global batch; the cordoned node uncordoned: the replacement runs and the job grows back at
// a common step; kubectl scale down and up: the same path. Real processes, real kubectl.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

// A DistributedJob of `replicas` demo-trainer pods, one replica group each, that checkpoints at
// every preemption sync point into `checkpoints` (a directory every pod sees).
std::string ElasticJobYaml(const std::string& name, int replicas, int min_replicas,
                           const std::string& checkpoints) {
  return absl::StrReplaceAll(R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: NAME
spec:
  replicas: REPLICAS
  maxRestarts: 3
  restartBackoff: 100ms
  elastic:
    minReplicas: MIN
    shrinkAfterSeconds: 3
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
        - name: trainer
          image: cohort/demo:dev
          command: ["demo-trainer", "--steps", "1000000", "--step-ms", "20", "--checkpoint-dir", "/ckpt"]
          volumeMounts:
            - name: checkpoints
              mountPath: /ckpt
      volumes:
        - name: checkpoints
          hostPath:
            path: CHECKPOINTS
)",
                             {{"NAME", name},
                              {"REPLICAS", absl::StrCat(replicas)},
                              {"MIN", absl::StrCat(min_replicas)},
                              {"CHECKPOINTS", checkpoints}});
}

// The last "joined as rank R of N" line of a pod's trainer log, as "R/N" ("" before any).
std::string Joined(LocalControlPlane& cluster, const std::string& pod) {
  static const std::regex joined(R"(joined as rank (\d+) of (\d+))");
  const std::string log = PodTrainerLog(cluster, pod);
  std::string last;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), joined); it != std::sregex_iterator();
       ++it) {
    last = absl::StrCat((*it)[1].str(), "/", (*it)[2].str());
  }
  return last;
}

// Waits until the job's status and every named pod's trainer say the attempt runs `world` ranks.
bool WaitForWorld(LocalControlPlane& cluster, const std::string& job,
                  const std::map<std::string, std::string>& joined_by_pod, int64_t replicas) {
  json seen = cluster.WaitForJob(
      "default", job,
      [&](const json& j) { return Phase(j) == "Running" && StatusInt(j, "replicas") == replicas; },
      kJobTimeout);
  if (StatusInt(seen, "replicas") != replicas) {
    ADD_FAILURE() << "status.replicas never became " << replicas << "\n"
                  << seen.dump(2) << Events(cluster, job);
    return false;
  }
  for (const auto& [pod, want] : joined_by_pod) {
    const absl::Time deadline = absl::Now() + kJobTimeout;
    while (Joined(cluster, pod) != want && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(100));
    if (Joined(cluster, pod) != want) {
      ADD_FAILURE() << pod << " joined as " << Joined(cluster, pod) << ", not " << want << "\n"
                    << PodTrainerLog(cluster, pod) << Events(cluster, job);
      return false;
    }
  }
  return true;
}

// The pod that holds slot `k` now (the slot's own, or its replacement), "" when none runs.
std::string PodOfSlot(LocalControlPlane& cluster, const std::string& job, int k) {
  absl::StatusOr<json> pods = cluster.client().List(
      kube::kPods, "default", absl::StrCat("cohort.dev/job-name=", job, ",cohort.dev/rank=", k));
  if (!pods.ok()) return "";
  for (const json& p : (*pods)["items"]) {
    if (!p["metadata"].contains("deletionTimestamp") && p["status"].value("phase", "") == "Running")
      return p["metadata"].value("name", "");
  }
  return "";
}

// "resumed from the checkpoint at step S" in `pod`'s log after its `joined`th join.
std::string ResumedStep(LocalControlPlane& cluster, const std::string& pod) {
  static const std::regex resumed(R"(resumed from the checkpoint at step (\d+))");
  const std::string log = PodTrainerLog(cluster, pod);
  std::string last;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), resumed);
       it != std::sregex_iterator(); ++it) {
    last = (*it)[1].str();
  }
  return last;
}

TEST_F(OperatorE2E, Elastic_NodeLostNoCapacity_Shrinks_CapacityBack_Grows_KubectlScaleBothWays) {
  LocalControlPlane cluster(
      {"--nodes", "4", "--max-pods", "1", "--node-monitor-grace-period", "2"});
  ASSERT_NE(cluster.kubeconfig(), "") << "the four-node control plane did not start";
  auto op = Operator("operator", {"--force-delete-after", "2"}, &cluster);
  ASSERT_EQ(cluster.Kubectl({"cordon", "node-3"}).exit_code, 0);
  const std::string name = "e2e-elastic";
  const std::string checkpoints = absl::StrCat(cluster.dir(), "/elastic-checkpoints");
  std::filesystem::create_directories(checkpoints);
  ASSERT_EQ(cluster.Kubectl({"apply"}, ElasticJobYaml(name, 3, 2, checkpoints)).exit_code, 0);
  ASSERT_TRUE(WaitForWorld(cluster, name,
                           {{name + "-0", "0/3"}, {name + "-1", "1/3"}, {name + "-2", "2/3"}}, 3));
  EXPECT_THAT(PodTrainerLog(cluster, name + "-0"), HasSubstr("global batch 96: 3 ranks (3 of 3"));
  LocalControlPlane::Result wide = cluster.Kubectl({"get", "djob", name, "-o", "wide"});
  EXPECT_TRUE(std::regex_search(wide.output, std::regex(R"(GROUPS[\s\S]*3/3)"))) << wide.output;

  // Pod 1's node is lost; the only free node is cordoned: its replacement stays Pending, and
  // after shrinkAfterSeconds the job goes on without its group, ranks renumbered.
  absl::StatusOr<json> pod1 = cluster.client().Get(kube::kPods, "default", name + "-1");
  ASSERT_TRUE(pod1.ok()) << pod1.status();
  const absl::Time lost_at = absl::Now();
  ASSERT_TRUE(cluster.LoseNode((*pod1)["spec"].value("nodeName", "")).ok());
  ASSERT_TRUE(WaitForWorld(cluster, name, {{name + "-0", "0/2"}, {name + "-2", "1/2"}}, 2));
  const absl::Duration to_shrink = absl::Now() - lost_at;
  json job = *cluster.client().Get(op::kDistributedJobs, "default", name);
  std::string events = EventsOnceThereIs(cluster, name, "Shrunk:");
  EXPECT_EQ(job["status"]["droppedReplicaGroups"], json::array({1})) << job.dump(2);
  EXPECT_EQ(StatusInt(job, "replicaGroups"), 2);
  EXPECT_EQ(StatusInt(job, "processes"), 2);
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << "the loss is one failure\n" << events;
  EXPECT_THAT(events,
              HasSubstr("runs 2 of 3 replica groups, without group 1 (pods " + name + "-1)"));
  const kube::StatusCondition* shrunk = nullptr;
  std::vector<kube::StatusCondition> conditions;
  for (const json& c : job["status"]["conditions"]) {
    if (c.value("type", "") == "Shrunk")
      conditions.push_back({c.value("type", ""), c.value("status", ""), c.value("reason", ""),
                            c.value("message", "")});
  }
  if (!conditions.empty()) shrunk = &conditions[0];
  ASSERT_NE(shrunk, nullptr) << job.dump(2);
  EXPECT_EQ(shrunk->status, "True");
  EXPECT_EQ(shrunk->reason, "PodsLost");
  EXPECT_THAT(PodTrainerLog(cluster, name + "-0"), HasSubstr("global batch 96: 2 ranks (2 of 3"))
      << "the global batch stays";
  std::printf("lost node -> training at 2 replica groups: %s\n",
              absl::FormatDuration(to_shrink).c_str());

  // Capacity back: the replacement runs on the uncordoned node, rejoins at a common step.
  ASSERT_EQ(cluster.Kubectl({"uncordon", "node-3"}).exit_code, 0);
  ASSERT_TRUE(WaitForWorld(cluster, name, {{name + "-0", "0/3"}, {name + "-2", "2/3"}}, 3));
  const std::string replacement = PodOfSlot(cluster, name, 1);
  ASSERT_NE(replacement, "");
  EXPECT_EQ(Joined(cluster, replacement), "1/3");
  job = *cluster.client().Get(op::kDistributedJobs, "default", name);
  events = EventsOnceThereIs(cluster, name, "Grew:");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << "the resize is not counted\n" << events;
  EXPECT_EQ(job["status"].value("lastRestartKind", ""), "Resize") << job.dump(2);
  EXPECT_FALSE(job["status"].contains("droppedReplicaGroups")) << job.dump(2);
  // Every rank resumed from the same step: the one all of them checkpointed at.
  const std::string step = ResumedStep(cluster, name + "-0");
  EXPECT_NE(step, "") << PodTrainerLog(cluster, name + "-0");
  EXPECT_EQ(ResumedStep(cluster, name + "-2"), step);
  EXPECT_EQ(ResumedStep(cluster, replacement), step);

  // kubectl scale down and up: the same path, at a common step.
  LocalControlPlane::Result down = cluster.Kubectl({"scale", "djob/" + name, "--replicas", "2"});
  ASSERT_EQ(down.exit_code, 0) << down.output;
  ASSERT_TRUE(WaitForWorld(cluster, name, {{name + "-0", "0/2"}}, 2));
  EXPECT_EQ(PodOfSlot(cluster, name, 2), "") << "the pod beyond spec.replicas goes";
  LocalControlPlane::Result up = cluster.Kubectl({"scale", "djob/" + name, "--replicas", "3"});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  ASSERT_TRUE(WaitForWorld(cluster, name, {{name + "-0", "0/3"}}, 3));
  job = *cluster.client().Get(op::kDistributedJobs, "default", name);
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(cluster, name);
  ASSERT_EQ(cluster.Kubectl({"delete", "djob", name}).exit_code, 0);
}

// minReplicas: a loss that would leave fewer pods than minReplicas does not shrink the job; it
// waits for the pod, saying why, and runs at its size again once there is room.
TEST_F(OperatorE2E, Elastic_LossBelowMinReplicas_WaitsForThePod_NoShrink) {
  LocalControlPlane cluster(
      {"--nodes", "3", "--max-pods", "1", "--node-monitor-grace-period", "2"});
  ASSERT_NE(cluster.kubeconfig(), "") << "the three-node control plane did not start";
  auto op = Operator("operator", {"--force-delete-after", "2"}, &cluster);
  ASSERT_EQ(cluster.Kubectl({"cordon", "node-2"}).exit_code, 0);
  const std::string name = "e2e-elastic-min";
  const std::string checkpoints = absl::StrCat(cluster.dir(), "/elastic-min-checkpoints");
  std::filesystem::create_directories(checkpoints);
  ASSERT_EQ(cluster.Kubectl({"apply"}, ElasticJobYaml(name, 2, 2, checkpoints)).exit_code, 0);
  ASSERT_TRUE(WaitForWorld(cluster, name, {{name + "-0", "0/2"}, {name + "-1", "1/2"}}, 2));
  absl::StatusOr<json> pod1 = cluster.client().Get(kube::kPods, "default", name + "-1");
  ASSERT_TRUE(pod1.ok()) << pod1.status();
  ASSERT_TRUE(cluster.LoseNode((*pod1)["spec"].value("nodeName", "")).ok());
  // Past shrinkAfterSeconds (3 s): waiting, not shrunk, the condition saying why.
  json waiting = cluster.WaitForJob(
      "default", name,
      [](const json& j) {
        for (const json& c : j.value("status", json::object()).value("conditions", json::array()))
          if (c.value("type", "") == "Shrunk" &&
              absl::StrContains(c.value("message", ""), "fewer than spec.elastic.minReplicas"))
            return true;
        return false;
      },
      kJobTimeout);
  EXPECT_THAT(waiting.dump(), HasSubstr("without them the job would have 1 pods, fewer than "
                                        "spec.elastic.minReplicas (2)"))
      << waiting.dump(2) << Events(cluster, name);
  EXPECT_EQ(StatusInt(waiting, "replicas"), 2) << "it never ran smaller";
  EXPECT_EQ(Joined(cluster, name + "-0"), "0/2") << PodTrainerLog(cluster, name + "-0");
  // Room again: the replacement runs and the job trains at its size.
  ASSERT_EQ(cluster.Kubectl({"uncordon", "node-2"}).exit_code, 0);
  const absl::Time deadline = absl::Now() + kJobTimeout;
  while (PodOfSlot(cluster, name, 1) == "" && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(100));
  const std::string replacement = PodOfSlot(cluster, name, 1);
  ASSERT_NE(replacement, "") << Events(cluster, name);
  while (Joined(cluster, replacement) != "1/2" && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(Joined(cluster, replacement), "1/2") << PodTrainerLog(cluster, replacement);
  ASSERT_EQ(cluster.Kubectl({"delete", "djob", name}).exit_code, 0);
}

// A spec that cannot be elastic is refused naming the fix, and creates nothing.
TEST_F(OperatorE2E, Elastic_ASpecThatCannotBeElastic_RefusedNamingTheFix) {
  auto op = Operator();
  const std::string bad = "e2e-elastic-recreate";
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"}, absl::StrReplaceAll(ElasticJobYaml(bad, 2, 2, "/tmp"),
                                                   {{"  restartBackoff: 100ms\n",
                                                     "  restartBackoff: 100ms\n  restartStrategy: "
                                                     "Recreate\n"}}))
          .exit_code,
      0);
  json refused = cluster_->WaitForJob(
      "default", bad,
      [](const json& j) {
        for (const json& c : j.value("status", json::object()).value("conditions", json::array()))
          if (c.value("type", "") == "SpecValid" && c.value("status", "") == "False") return true;
        return false;
      },
      kJobTimeout);
  EXPECT_THAT(refused.dump(), HasSubstr("set spec.restartStrategy: InPlace")) << refused.dump(2);
  absl::StatusOr<json> pods =
      cluster_->client().List(kube::kPods, "default", "cohort.dev/job-name=" + bad);
  ASSERT_TRUE(pods.ok());
  EXPECT_TRUE((*pods)["items"].empty()) << "an invalid spec creates nothing";
}

}  // namespace
}  // namespace cohort::testing
