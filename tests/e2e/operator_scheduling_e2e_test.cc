// End to end, the operator: gang admission: Kueue's pod groups, the test's all-or-nothing
// admission, the PodGroup providers. The fixture and the shared helpers: operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

std::string QueuedJobYaml(const std::string& name, int replicas, const std::string& scenario,
                          const std::string& queue) {
  return JobYaml(name, replicas, scenario, absl::StrCat("  scheduling: {queueName: ", queue, "}\n"),
                 "      schedulingGates: [{name: kueue.x-k8s.io/admission}]\n");
}

// The job's condition `type`, or an empty object.

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

}  // namespace
}  // namespace cohort::testing
