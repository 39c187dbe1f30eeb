#include "operator/reconciler/children.h"

#include <map>

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
  for (const json& e : container["env"]) env[e["name"]] = e.contains("value") ? e["value"] : e["valueFrom"];
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
                 .Spec("template", {{"spec", {{"containers", {{{"name", "trainer"},
                                                              {"image", "t:1"},
                                                              {"env", {{{"name", "LR"}, {"value", "0.1"}},
                                                                       {{"name", "COHORT_PROCESS_ID"}, {"value", "99"}}}}}}}}}})
                 .Build();
  std::map<std::string, json> env = EnvOf(BuildPod(Job(obj), 1, 0)["spec"]["containers"][0]);
  EXPECT_EQ(env["LR"], "0.1");
  EXPECT_EQ(env["COHORT_PROCESS_ID"], "1");
}

TEST(BuildPod, SidecarIsANativeSidecarSharingTheSocketAndToken) {
  json pod = BuildPod(Job(JobBuilder().Spec("sidecar", {{"image", "sc:9"}, {"heartbeatTimeout", "3s"}}).Build()), 0, 0);
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
  json obj = JobBuilder()
                 .Set("/spec/template/metadata"_json_pointer, {{"labels", "team=ml"}, {"annotations", {"a"}}})
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

}  // namespace
}  // namespace cohort::op
