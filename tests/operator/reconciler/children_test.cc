#include "operator/reconciler/children.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/job_builder.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::JobBuilder;

DistributedJob Job(json obj = JobBuilder().Build()) { return *ParseDistributedJob(obj); }

std::map<std::string, json> EnvOf(const json& container) {
  std::map<std::string, json> env;
  for (const json& e : container["env"])
    env[e["name"]] = e.contains("value") ? e["value"] : e["valueFrom"];
  return env;
}

TEST(BuildService, HeadlessPublishingNotReadyAddresses) {
  json svc = BuildService(Job());
  EXPECT_EQ(svc["metadata"]["name"], "train");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"][kJobNameLabel], "train");
  const json& owner = svc["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "DistributedJob");
  EXPECT_EQ(owner["uid"], "u-1");
  EXPECT_EQ(owner["controller"], true);
}

TEST(BuildTokenSecret, HoldsTheToken) {
  json secret = BuildTokenSecret(Job(), "s3cret");
  EXPECT_EQ(secret["metadata"]["name"], "train-token");
  EXPECT_EQ(secret["stringData"][kTokenKey], "s3cret");
}

TEST(BuildPod, IdentityLabelsAndDns) {
  json pod = BuildPod(Job(), 2, 5);
  EXPECT_EQ(pod["metadata"]["name"], "train-2");
  EXPECT_EQ(pod["metadata"]["labels"][kRankLabel], "2");
  EXPECT_EQ(pod["metadata"]["labels"][kRestartAttemptLabel], "5");
  EXPECT_EQ(pod["spec"]["hostname"], "train-2");
  EXPECT_EQ(pod["spec"]["subdomain"], "train");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
}

TEST(BuildPod, QueueName_KueuePodGroupOfTheAttempt_LabelsAndAnnotations) {
  json pod =
      BuildPod(Job(JobBuilder().Spec("scheduling", {{"queueName", "team-a"}}).Build()), 2, 3);
  EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"], "train-3");
  EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"], "4");
  EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-pod-index-label"], kRankLabel);
  EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/retriable-in-group"], "false");
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  // Without a queue, none of it.
  json plain = BuildPod(Job(), 2, 3);
  EXPECT_FALSE(plain["metadata"]["labels"].contains("kueue.x-k8s.io/queue-name"));
  EXPECT_FALSE(plain["metadata"].contains("annotations") &&
               plain["metadata"]["annotations"].contains("kueue.x-k8s.io/pod-group-total-count"));
}

TEST(BuildPod, PodGroupProviders_TheGroupsNameAndScheduler_TheTemplatesSchedulerWins) {
  json cosched = BuildPod(
      Job(JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", "coscheduling"}}}}).Build()),
      0, 1);
  EXPECT_EQ(cosched["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "train-1");
  EXPECT_EQ(cosched["spec"]["schedulerName"], "scheduler-plugins-scheduler");
  json volcano = BuildPod(
      Job(JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", "volcano"}}}}).Build()), 0,
      1);
  EXPECT_EQ(volcano["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "train-1");
  EXPECT_EQ(volcano["spec"]["schedulerName"], "volcano");
  json own = JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", "volcano"}}}}).Build();
  own["spec"]["template"]["spec"]["schedulerName"] = "volcano-2";
  EXPECT_EQ(BuildPod(Job(own), 0, 1)["spec"]["schedulerName"], "volcano-2");
  json named =
      JobBuilder()
          .Spec("scheduling", {{"podGroup", {{"provider", "volcano"}}}, {"schedulerName", "mine"}})
          .Build();
  EXPECT_EQ(BuildPod(Job(named), 0, 1)["spec"]["schedulerName"], "mine");
  // Kubernetes' own: the pod field names the group; the default scheduler places it.
  json workload = BuildPod(
      Job(JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", "workload"}}}}).Build()), 0,
      1);
  EXPECT_EQ(workload["spec"]["schedulingGroup"], json({{"podGroupName", "train-1"}}));
  EXPECT_FALSE(workload["spec"].contains("schedulerName"));
  EXPECT_FALSE(cosched["spec"].contains("schedulingGroup"));
}

TEST(BuildPodGroup, PerProvider_MinMemberDefaultsToEveryPod_OwnedByTheJob) {
  json group = BuildPodGroup(
      Job(JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", "coscheduling"}}}}).Build()),
      2);
  EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(group["kind"], "PodGroup");
  EXPECT_EQ(group["metadata"]["name"], "train-2");
  EXPECT_EQ(group["metadata"]["labels"][kRestartAttemptLabel], "2");
  EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], "u-1");
  EXPECT_EQ(group["spec"]["minMember"], 4);
  EXPECT_EQ(group["spec"]["scheduleTimeoutSeconds"], 60);
  json volcano = BuildPodGroup(
      Job(JobBuilder()
              .Spec("scheduling", {{"podGroup", {{"provider", "volcano"}, {"minMember", 3}}}})
              .Build()),
      0);
  EXPECT_EQ(volcano["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(volcano["spec"]["minMember"], 3);
  EXPECT_FALSE(volcano["spec"].contains("scheduleTimeoutSeconds"));  // Not a Volcano field.
  json workload = BuildPodGroup(
      Job(JobBuilder()
              .Spec("scheduling", {{"podGroup", {{"provider", "workload"}, {"minMember", 3}}}})
              .Build()),
      1);
  EXPECT_EQ(workload["apiVersion"], "scheduling.k8s.io/v1beta1");
  EXPECT_EQ(workload["metadata"]["name"], "train-1");
  EXPECT_EQ(workload["spec"], json({{"schedulingPolicy", {{"gang", {{"minCount", 3}}}}}}));
}

TEST(PodGroupName, LongJobNames_CutWithAHashSoThatPrefixesDoNotShareAGroup) {
  const std::string prefix(60, 'a');
  DistributedJob one = Job(JobBuilder(prefix + "bcd").Build());
  DistributedJob two = Job(JobBuilder(prefix + "xyz").Build());
  EXPECT_EQ(PodGroupName(Job(), 12), "train-12");
  for (int attempt : {0, 123456}) {
    EXPECT_LE(PodGroupName(one, attempt).size(), 63u);
    EXPECT_NE(PodGroupName(one, attempt), PodGroupName(two, attempt));
    EXPECT_TRUE(absl::EndsWith(PodGroupName(one, attempt), absl::StrCat("-", attempt)));
  }
}

TEST(BuildPod, TrainerGetsTheEnvironmentContract) {
  json pod = BuildPod(Job(), 3, 1);
  std::map<std::string, json> env = EnvOf(pod["spec"]["containers"][0]);
  EXPECT_EQ(env["COHORT_COORDINATOR_ADDRESS"], "train-0.train.ml.svc:8476");
  EXPECT_EQ(env["COHORT_NUM_PROCESSES"], "4");
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "3");
  EXPECT_EQ(env["COHORT_RESTART_ATTEMPT"], "1");
  EXPECT_EQ(env["COHORT_AGENT_SOCKET"], kAgentSocket);
  EXPECT_EQ(env["COHORT_JOB_NAME"], "train");
  EXPECT_EQ(env["COHORT_NAMESPACE"], "ml");
  EXPECT_EQ(env["COHORT_TOKEN_FILE"], "/var/run/secrets/cohort/token");
  EXPECT_EQ(env["COHORT_POD_IP"]["fieldRef"]["fieldPath"], "status.podIP");
  EXPECT_EQ(env["JAX_COORDINATOR_ADDRESS"], "train-0.train.ml.svc:8477");
  EXPECT_EQ(env["JAX_COORDINATOR_BIND_ADDRESS"], "127.0.0.1:0");
  EXPECT_EQ(env["JAX_NUM_PROCESSES"], "4");
  EXPECT_EQ(env["JAX_PROCESS_ID"], "3");
}

TEST(BuildPod, TrainerGetsTorchrunsEnvironment_OneProcessPerPod) {
  json pod = BuildPod(Job(), 3, 1);
  std::map<std::string, json> env = EnvOf(pod["spec"]["containers"][0]);
  EXPECT_EQ(env["MASTER_ADDR"], "train-0.train.ml.svc");
  EXPECT_EQ(env["MASTER_PORT"], "8478");  // Neither the coordinator's port nor JAX's.
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(env["GROUP_RANK"], "3");
  EXPECT_EQ(env["NODE_RANK"], "3");
}

TEST(BuildPod, TemplateEnvKeptButContractWins) {
  json obj = JobBuilder()
                 .Spec("template", {{"spec",
                                     {{"containers",
                                       {{{"name", "trainer"},
                                         {"image", "t:1"},
                                         {"env",
                                          {{{"name", "LR"}, {"value", "0.1"}},
                                           {{"name", "COHORT_PROCESS_ID"}, {"value", "99"}}}}}}}}}})
                 .Build();
  std::map<std::string, json> env = EnvOf(BuildPod(Job(obj), 1, 0)["spec"]["containers"][0]);
  EXPECT_EQ(env["LR"], "0.1");
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "1");
}

TEST(BuildPod, HangTimeout_AutoUnlessSet_InTrainerAndSidecar) {
  auto timeout_in = [](json spec_hang) {
    JobBuilder b;
    b.Set("/spec/template/spec/containers/0/env"_json_pointer,
          {{{"name", "COHORT_HANG_TIMEOUT"}, {"value", "stale"}}});
    if (!spec_hang.is_null()) b.Spec("hangDetection", spec_hang);
    json pod = BuildPod(Job(b.Build()), 1, 0);
    std::string trainer = EnvOf(pod["spec"]["containers"][0])["COHORT_HANG_TIMEOUT"];
    EXPECT_EQ(EnvOf(pod["spec"]["initContainers"][0])["COHORT_HANG_TIMEOUT"], trainer)
        << "the sidecar's";
    return trainer;
  };
  EXPECT_EQ(timeout_in(json()), "auto");
  EXPECT_EQ(timeout_in(json::object()), "auto");
  EXPECT_EQ(timeout_in({{"timeoutSeconds", 300}}), "300");
  EXPECT_EQ(timeout_in({{"timeoutSeconds", 0}}), "0");  // Off.
}

TEST(BuildPod, FlightRecorderDefaults_InTheSharedDumpsDir_TrainerOnly) {
  json pod = BuildPod(Job(), 0, 0);
  std::map<std::string, json> env = EnvOf(pod["spec"]["containers"][0]);
  EXPECT_EQ(env["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"],
            absl::StrCat(kAgentDir, "/dumps/nccl_trace_rank_"));
  EXPECT_EQ(env["TORCH_FR_DUMP_TEMP_FILE"], absl::StrCat(kAgentDir, "/dumps/fr_trace_rank_"));
  std::map<std::string, json> sidecar = EnvOf(pod["spec"]["initContainers"][0]);
  EXPECT_EQ(sidecar.count("TORCH_NCCL_TRACE_BUFFER_SIZE"), 0u);
  EXPECT_EQ(sidecar.count("TORCH_FR_DUMP_TEMP_FILE"), 0u);
}

TEST(BuildPod, FlightRecorderDefaults_TheTemplatesValueOrItsAliasWins) {
  auto trainer_env = [](json env) {
    JobBuilder b;
    b.Set("/spec/template/spec/containers/0/env"_json_pointer, std::move(env));
    return EnvOf(BuildPod(Job(b.Build()), 0, 0)["spec"]["containers"][0]);
  };
  std::map<std::string, json> own =
      trainer_env({{{"name", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, {"value", "0"}},
                   {{"name", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}, {"value", "/tmp/t_"}}});
  EXPECT_EQ(own["TORCH_NCCL_TRACE_BUFFER_SIZE"], "0");
  EXPECT_EQ(own["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], "/tmp/t_");
  // PyTorch reads the TORCH_FR_ name first: set beside the template's, it would override it.
  EXPECT_EQ(own.count("TORCH_FR_DUMP_TEMP_FILE"), 0u);
  std::map<std::string, json> alias =
      trainer_env({{{"name", "TORCH_FR_BUFFER_SIZE"}, {"value", "100"}},
                   {{"name", "TORCH_FR_DUMP_TEMP_FILE"}, {"value", "/data/fr_"}}});
  EXPECT_EQ(alias.count("TORCH_NCCL_TRACE_BUFFER_SIZE"), 0u);
  EXPECT_EQ(alias.count("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"), 0u);
  EXPECT_EQ(alias["TORCH_FR_BUFFER_SIZE"], "100");
  EXPECT_EQ(alias["TORCH_FR_DUMP_TEMP_FILE"], "/data/fr_");
  // Each name once: the template's entry is not repeated.
  JobBuilder b;
  b.Set("/spec/template/spec/containers/0/env"_json_pointer,
        {{{"name", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, {"value", "5"}}});
  const json pod = BuildPod(Job(b.Build()), 0, 0);
  const json& env = pod["spec"]["containers"][0]["env"];
  EXPECT_EQ(
      std::count_if(env.begin(), env.end(),
                    [](const json& e) { return e["name"] == "TORCH_NCCL_TRACE_BUFFER_SIZE"; }),
      1);
}

TEST(BuildPod, SidecarIsANativeSidecarSharingTheSocketAndToken) {
  json pod = BuildPod(
      Job(JobBuilder().Spec("sidecar", {{"image", "sc:9"}, {"heartbeatTimeout", "3s"}}).Build()), 0,
      0);
  const json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_EQ(sidecar["name"], "cohort-sidecar");
  EXPECT_EQ(sidecar["image"], "sc:9");
  EXPECT_EQ(sidecar["restartPolicy"], "Always");
  EXPECT_EQ(sidecar["readinessProbe"]["httpGet"]["path"], "/readyz");
  EXPECT_EQ(sidecar["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(EnvOf(sidecar)["COHORT_HEARTBEAT_TIMEOUT"], "3s");
  EXPECT_EQ(EnvOf(sidecar)["COHORT_PROCESS_ID"], "0");
  const json& trainer = pod["spec"]["containers"][0];
  for (const json* c : {&sidecar, &trainer}) {
    std::string mounts = (*c)["volumeMounts"].dump();
    EXPECT_THAT(mounts, HasSubstr("\"mountPath\":\"/run/cohort\""));
    EXPECT_THAT(mounts, HasSubstr("\"mountPath\":\"/var/run/secrets/cohort\""));
  }
  std::string volumes = pod["spec"]["volumes"].dump();
  EXPECT_THAT(volumes, HasSubstr("\"emptyDir\""));
  EXPECT_THAT(volumes, HasSubstr("\"secretName\":\"train-token\""));
}

TEST(BuildPod, TemplateInitContainersRunAfterTheSidecar) {
  json obj = JobBuilder()
                 .Set("/spec/template/spec/initContainers"_json_pointer,
                      {{{"name", "fetch-data"}, {"image", "busybox"}}})
                 .Build();
  json init = BuildPod(Job(obj), 0, 0)["spec"]["initContainers"];
  ASSERT_EQ(init.size(), 2u);
  EXPECT_EQ(init[0]["name"], "cohort-sidecar");
  EXPECT_EQ(init[1]["name"], "fetch-data");
}

// Found by tests/fuzz (distributed_job): a template whose labels are not an object, or whose env
// holds entries that are not objects with a string name, made BuildPod throw (nlohmann's value()).
TEST(BuildPod, TemplateMembersOfOtherTypes_NoThrowContractStillSet) {
  json obj =
      JobBuilder()
          .Set("/spec/template/metadata"_json_pointer,
               {{"labels", "team=ml"}, {"annotations", {"a"}}})
          .Set("/spec/template/spec/containers/0/env"_json_pointer,
               {3, {{"name", 5}, {"value", "x"}}, {{"name", "COHORT_PROCESS_ID"}, {"value", "9"}}})
          .Build();
  json pod;
  ASSERT_NO_THROW(pod = BuildPod(Job(obj), 1, 0));
  EXPECT_EQ(pod["metadata"]["labels"][kRankLabel], "1");
  EXPECT_FALSE(pod["metadata"].contains("annotations"));
  std::map<std::string, json> env;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e.is_object() && e["name"].is_string()) env[e["name"]] = e.value("value", json());
  }
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "1");
}

DistributedJob TwoProcessJob(json limits = json()) {
  JobBuilder b;
  b.Spec("replicas", 2).Spec("processesPerPod", 2);
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        json::array({"python", "train.py"}));
  b.Set("/spec/template/spec/containers/0/args"_json_pointer, json::array({"--lr", "0.1"}));
  if (!limits.is_null())
    b.Set("/spec/template/spec/containers/0/resources/limits"_json_pointer, limits);
  return Job(b.Build());
}

const json* ContainerNamed(const json& list, const std::string& name) {
  for (const json& c : list) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

TEST(BuildPod, TwoProcessesPerPod_EnvironmentOfTheFirstProcessOfThePod) {
  json pod = BuildPod(TwoProcessJob(), 1, 0);
  std::map<std::string, json> env = EnvOf(pod["spec"]["containers"][0]);
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "2");
  EXPECT_EQ(env["COHORT_NUM_PROCESSES"], "4");
  EXPECT_EQ(env["COHORT_LOCAL_PROCESS_ID"], "0");
  EXPECT_EQ(env["COHORT_PROCESSES_PER_POD"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(env["NODE_RANK"], "1");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["COHORT_POD_NAME"]["fieldRef"]["fieldPath"], "metadata.name");
  EXPECT_EQ(env.count("JAX_LOCAL_DEVICE_IDS"), 0u);  // No GPUs requested.
  EXPECT_EQ(env.count("PET_NNODES"), 0u);            // Cohort launches.
  // The sidecar serves both ranks of the pod.
  const json* sidecar = ContainerNamed(pod["spec"]["initContainers"], "cohort-sidecar");
  ASSERT_NE(sidecar, nullptr);
  EXPECT_EQ(EnvOf(*sidecar)["COHORT_PROCESS_ID"], "2");
  EXPECT_EQ(EnvOf(*sidecar)["COHORT_PROCESSES_PER_POD"], "2");
}

TEST(BuildPod, TwoProcessesPerPod_CommandRunsThroughCohortLaunchInstalledFirst) {
  json pod = BuildPod(TwoProcessJob(), 0, 0);
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_EQ(trainer["command"], json::array({kLauncherPath, "--", "python", "train.py"}));
  EXPECT_EQ(trainer["args"], json::array({"--lr", "0.1"}));
  const json& init = pod["spec"]["initContainers"];
  ASSERT_GE(init.size(), 2u);
  EXPECT_EQ(init[0]["name"], "cohort-sidecar");
  EXPECT_EQ(init[1]["name"], "cohort-launch-install");
  EXPECT_EQ(init[1]["image"], pod["spec"]["initContainers"][0]["image"]);
  EXPECT_EQ(init[1]["command"], json::array({"cohort-launch", "--install", kLauncherPath}));
  EXPECT_FALSE(init[1].contains("restartPolicy"));  // Runs to completion before the trainer.
}

TEST(BuildPod, SeveralProcesses_MemoryBackedDevShmSizedByTheMemoryLimit) {
  json pod = BuildPod(TwoProcessJob({{"memory", "16Gi"}}), 0, 0);
  const json& trainer = pod["spec"]["containers"][0];
  bool mounted = false;
  for (const json& m : trainer["volumeMounts"]) mounted |= m["mountPath"] == "/dev/shm";
  EXPECT_TRUE(mounted);
  const json* volume = ContainerNamed(pod["spec"]["volumes"], "cohort-dshm");
  ASSERT_NE(volume, nullptr);
  EXPECT_EQ((*volume)["emptyDir"]["medium"], "Memory");
  EXPECT_EQ((*volume)["emptyDir"]["sizeLimit"], "16Gi");
}

TEST(BuildPod, TemplateMountsItsOwnDevShm_Kept) {
  JobBuilder b;
  b.Spec("processesPerPod", 2);
  b.Set("/spec/template/spec/containers/0/command"_json_pointer, json::array({"python"}));
  b.Set("/spec/template/spec/containers/0/volumeMounts"_json_pointer,
        json::array({{{"name", "mine"}, {"mountPath", "/dev/shm"}}}));
  json pod = BuildPod(Job(b.Build()), 0, 0);
  EXPECT_EQ(ContainerNamed(pod["spec"]["volumes"], "cohort-dshm"), nullptr);
}

TEST(BuildPod, OneProcessPerPodWithoutGpus_NoLauncherNoDevShm) {
  json pod = BuildPod(Job(), 0, 0);
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("command"));
  EXPECT_EQ(ContainerNamed(pod["spec"]["initContainers"], "cohort-launch-install"), nullptr);
  EXPECT_EQ(ContainerNamed(pod["spec"]["volumes"], "cohort-dshm"), nullptr);
}

TEST(BuildPod, AutoWithEightGpus_EightProcessesEachSeesItsDevice) {
  JobBuilder b;
  b.Spec("processesPerPod", "auto");
  b.Set("/spec/template/spec/containers/0/command"_json_pointer, json::array({"python"}));
  b.Set("/spec/template/spec/containers/0/resources/limits"_json_pointer,
        json{{"nvidia.com/gpu", 8}});
  json pod = BuildPod(Job(b.Build()), 1, 0);
  std::map<std::string, json> env = EnvOf(pod["spec"]["containers"][0]);
  EXPECT_EQ(env["COHORT_PROCESSES_PER_POD"], "8");
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "8");
  EXPECT_EQ(env["COHORT_NUM_PROCESSES"], "32");
  EXPECT_EQ(env["JAX_LOCAL_DEVICE_IDS"], "0");  // cohort-launch gives process l device l.
}

TEST(BuildPod, TorchrunLauncher_PetVariablesAndTheCommandAsItIs) {
  JobBuilder b;
  b.Spec("replicas", 2)
      .Spec("processesPerPod", 2)
      .Spec("launcher", "Torchrun")
      .Spec("restartStrategy", "Recreate");
  b.Set("/spec/template/spec/containers/0/command"_json_pointer,
        json::array({"torchrun", "train.py"}));
  json pod = BuildPod(Job(b.Build()), 1, 0);
  const json& trainer = pod["spec"]["containers"][0];
  EXPECT_EQ(trainer["command"], json::array({"torchrun", "train.py"}));
  std::map<std::string, json> env = EnvOf(trainer);
  EXPECT_EQ(env["PET_NNODES"], "2");
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "2");
  EXPECT_EQ(env["PET_NODE_RANK"], "1");
  EXPECT_EQ(env["PET_MASTER_ADDR"], "train-0.train.ml.svc");
  EXPECT_EQ(env["PET_MASTER_PORT"], "8478");
  EXPECT_EQ(ContainerNamed(pod["spec"]["initContainers"], "cohort-launch-install"), nullptr);
}

// Restarting in place, cohort-launch supervises every trainer: one process per pod too, and
// torchrun (as one process, its environment as it is); the sidecar and cohort-launch meet on the
// launch socket, and the pod gets its own /dev/shm to empty between attempts.
TEST(BuildPod, InPlace_CohortLaunchSupervisesEveryTrainer_LaunchSocketAndShm) {
  for (const std::string launcher : {"Cohort", "Torchrun"}) {
    SCOPED_TRACE(launcher);
    JobBuilder b;
    b.Spec("replicas", 2).Spec("launcher", launcher);
    b.Set("/spec/template/spec/containers/0/command"_json_pointer,
          json::array({"python", "train.py"}));
    json pod = BuildPod(Job(b.Build()), 1, 0);
    const json& trainer = pod["spec"]["containers"][0];
    json want = launcher == "Cohort"
                    ? json::array({"/run/cohort/bin/cohort-launch", "--", "python", "train.py"})
                    : json::array({"/run/cohort/bin/cohort-launch", "--one-process", "--", "python",
                                   "train.py"});
    EXPECT_EQ(trainer["command"], want);
    EXPECT_NE(ContainerNamed(pod["spec"]["initContainers"], "cohort-launch-install"), nullptr);
    for (const json* c :
         {&trainer, ContainerNamed(pod["spec"]["initContainers"], "cohort-sidecar")}) {
      ASSERT_NE(c, nullptr);
      std::map<std::string, json> env = EnvOf(*c);
      EXPECT_EQ(env["COHORT_LAUNCH_SOCKET"], "/run/cohort/launch.sock");
      EXPECT_EQ(env["COHORT_SHM_DIR"], "/dev/shm");
    }
    bool shm = false;
    for (const json& m : trainer["volumeMounts"]) shm |= m["mountPath"] == "/dev/shm";
    EXPECT_TRUE(shm);
  }
  // Recreate, or a trainer without a command (an image's entrypoint cohort-launch cannot know):
  // no launch socket, the command as it is.
  for (const bool recreate : {true, false}) {
    JobBuilder b;
    if (recreate) {
      b.Spec("restartStrategy", "Recreate");
      b.Set("/spec/template/spec/containers/0/command"_json_pointer,
            json::array({"python", "train.py"}));
    } else {
      b.Set("/spec/template/spec/containers/0/command"_json_pointer, nullptr);
    }
    json pod = BuildPod(Job(b.Build()), 1, 0);
    EXPECT_EQ(EnvOf(pod["spec"]["containers"][0]).count("COHORT_LAUNCH_SOCKET"), 0u) << recreate;
    EXPECT_EQ(ContainerNamed(pod["spec"]["initContainers"], "cohort-launch-install"), nullptr)
        << recreate;
  }
}

// A spare holds no rank: its own name and hostname, the spare label, the job's size but no rank
// in any container, COHORT_SPARE naming it; cohort-launch waits on the launch socket for a slot.
TEST(BuildSparePod, NoRank_SpareLabelAndVariable_LaunchesThroughCohortLaunch) {
  for (const std::string launcher : {"Cohort", "Torchrun"}) {
    SCOPED_TRACE(launcher);
    JobBuilder b;
    b.Spec("replicas", 2).Spec("spares", 1).Spec("processesPerPod", 2).Spec("launcher", launcher);
    b.Set("/spec/template/spec/containers/0/command"_json_pointer,
          json::array({"python", "train.py"}));
    json pod = BuildSparePod(Job(b.Build()), 3, 1);
    EXPECT_EQ(pod["metadata"]["name"], "train-spare3");
    EXPECT_EQ(pod["metadata"]["labels"][kSpareLabel], "train-spare3");
    EXPECT_FALSE(pod["metadata"]["labels"].contains(kRankLabel));
    EXPECT_EQ(pod["metadata"]["labels"][kRestartAttemptLabel], "1");
    EXPECT_EQ(pod["spec"]["hostname"], "train-spare3");
    EXPECT_EQ(pod["spec"]["containers"][0]["command"][0], "/run/cohort/bin/cohort-launch");
    const json* trainer = &pod["spec"]["containers"][0];
    for (const json* c :
         {trainer, ContainerNamed(pod["spec"]["initContainers"], "cohort-sidecar")}) {
      ASSERT_NE(c, nullptr);
      std::map<std::string, json> env = EnvOf(*c);
      EXPECT_EQ(env["COHORT_SPARE"], "train-spare3");
      EXPECT_EQ(env["COHORT_NUM_PROCESSES"], "4");
      EXPECT_EQ(env["COHORT_PROCESSES_PER_POD"], "2");
      EXPECT_EQ(env["COHORT_LAUNCH_SOCKET"], "/run/cohort/launch.sock");
      for (const char* rank : {"COHORT_PROCESS_ID", "JAX_PROCESS_ID", "RANK", "NODE_RANK",
                               "GROUP_RANK", "LOCAL_RANK", "PET_NODE_RANK"}) {
        EXPECT_EQ(env.count(rank), 0u) << rank;
      }
    }
  }
  // A rank's pod has no COHORT_SPARE.
  JobBuilder b;
  b.Spec("spares", 1)
      .Set("/spec/template/spec/containers/0/command"_json_pointer, json::array({"python"}));
  EXPECT_EQ(EnvOf(BuildPod(Job(b.Build()), 1, 0)["spec"]["containers"][0]).count("COHORT_SPARE"),
            0u);
}

// Spares are pods of the gang's group: Kueue's total count and a PodGroup's default minMember
// count them; a spare has no index label for Kueue to order by.
TEST(BuildSparePod, CountedInGangAdmission) {
  JobBuilder queued;
  queued.Spec("replicas", 4).Spec("spares", 2).Spec("scheduling", {{"queueName", "team-a"}});
  queued.Set("/spec/template/spec/containers/0/command"_json_pointer, json::array({"python"}));
  for (const json& pod :
       {BuildPod(Job(queued.Build()), 1, 0), BuildSparePod(Job(queued.Build()), 0, 0)}) {
    EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"], "6");
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"], "train-0");
  }
  EXPECT_FALSE(BuildSparePod(Job(queued.Build()), 0, 0)["metadata"]["annotations"].contains(
      "kueue.x-k8s.io/pod-group-pod-index-label"));
  JobBuilder grouped;
  grouped.Spec("replicas", 4)
      .Spec("spares", 2)
      .Spec("scheduling", {{"podGroup", {{"provider", "volcano"}}}});
  EXPECT_EQ(BuildPodGroup(Job(grouped.Build()), 0)["spec"]["minMember"], 6);
}

// A pod replaced alone (restarting in place) has a name of its own, so that the one it replaces
// may still be terminating; its rank, hostname and attempt are the slot's.
TEST(BuildPod, Replacement_NameOfItsOwn_SameHostnameAndRank) {
  JobBuilder b;
  b.Spec("replicas", 4);
  DistributedJob job = Job(b.Build());
  EXPECT_EQ(ReplacementPodName(job, 2, 3), "train-2-r3");
  // Known by its name only (a DELETED from a relist), either pod leads back to its job.
  EXPECT_EQ(JobOfPodName(PodName(job, 2)), "train");
  EXPECT_EQ(JobOfPodName(ReplacementPodName(job, 2, 3)), "train");
  EXPECT_EQ(JobOfPodName("my-job-r2-7"), "my-job-r2");
  EXPECT_EQ(JobOfPodName("no-number"), "");
  EXPECT_EQ(JobOfSparePodName(SparePodName(job, 4)), "train");
  EXPECT_EQ(JobOfSparePodName(PodName(job, 2)), "");
  EXPECT_EQ(JobOfSparePodName("-spare2"), "");
  EXPECT_EQ(JobOfSparePodName("a-spare"), "");
  json pod = BuildPod(job, 2, 3, ReplacementPodName(job, 2, 3));
  EXPECT_EQ(pod["metadata"]["name"], "train-2-r3");
  EXPECT_EQ(pod["spec"]["hostname"], "train-2");
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/rank"], "2");
  EXPECT_EQ(pod["metadata"]["labels"]["cohort.dev/restart-attempt"], "3");
  EXPECT_EQ(EnvOf(pod["spec"]["containers"][0])["COHORT_RESTART_ATTEMPT"], "3");
}

}  // namespace
}  // namespace cohort::op
