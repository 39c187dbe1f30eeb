// The CRD manifest and the C++ API types describe one resource: their defaults, bounds and
// enums must agree.

#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

#include "gtest/gtest.h"
#include "operator/api/distributed_job.h"
#include "tests/operator/job_builder.h"

using json = nlohmann::json;

namespace cohort::op {
namespace {

class CrdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    crd_ = YAML::LoadFile(std::string(COHORT_SOURCE_DIR) +
                          "/manifests/crd/cohort.dev_distributedjobs.yaml");
    version_ = crd_["spec"]["versions"][0];
    spec_ = version_["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
  }
  std::vector<std::string> ValidateWith(const std::string& field, int64_t value) {
    auto job = ParseDistributedJob(testing::JobBuilder().Spec(field, value).Build());
    EXPECT_TRUE(job.ok());
    return Validate(*job);
  }
  YAML::Node crd_, version_, spec_;
};

// Every key of `node` and below, once per map: a YAML map with a key twice is refused by strict
// loaders (kubectl, helm) and silently resolved by lenient ones.
void ExpectNoDuplicateKeys(const YAML::Node& node, const std::string& path) {
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      EXPECT_TRUE(seen.insert(key).second) << path << "." << key << " appears twice";
      ExpectNoDuplicateKeys(kv.second, path + "." + key);
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      ExpectNoDuplicateKeys(node[i], path + "[" + std::to_string(i) + "]");
  }
}

TEST_F(CrdTest, NoKeyAppearsTwiceInAMap) { ExpectNoDuplicateKeys(crd_, ""); }

TEST_F(CrdTest, NamesGroupVersionAndSubresources) {
  EXPECT_EQ(crd_["metadata"]["name"].as<std::string>(), std::string(kPlural) + "." + kGroup);
  EXPECT_EQ(crd_["spec"]["names"]["kind"].as<std::string>(), kKind);
  EXPECT_EQ(crd_["spec"]["names"]["shortNames"][0].as<std::string>(), "djob");
  EXPECT_EQ(version_["name"].as<std::string>(), kVersion);
  EXPECT_TRUE(version_["subresources"]["status"].IsMap());
  // kubectl scale: spec.replicas, and the status the operator writes (StatusToJson).
  const YAML::Node scale = version_["subresources"]["scale"];
  EXPECT_EQ(scale["specReplicasPath"].as<std::string>(), ".spec.replicas");
  EXPECT_EQ(scale["statusReplicasPath"].as<std::string>(), ".status.replicas");
  EXPECT_EQ(scale["labelSelectorPath"].as<std::string>(), ".status.selector");
  const json written = StatusToJson(*ParseDistributedJob(testing::JobBuilder().Build()));
  EXPECT_TRUE(written.contains("replicas"));
  EXPECT_TRUE(written.contains("selector"));
}

TEST_F(CrdTest, ElasticMatchesTheOperator) {
  const YAML::Node elastic = spec_["elastic"]["properties"];
  const ElasticSpec defaults;
  EXPECT_EQ(elastic["podsPerGroup"]["default"].as<int>(), defaults.pods_per_group);
  EXPECT_EQ(elastic["shrinkAfterSeconds"]["default"].as<int64_t>(), defaults.shrink_after_seconds);
  EXPECT_EQ(spec_["elastic"]["required"][0].as<std::string>(), "minReplicas");
  const YAML::Node status =
      version_["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
  DistributedJob job = *ParseDistributedJob(
      testing::JobBuilder()
          .Spec("elastic", {{"minReplicas", 2}})
          .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
          .Build());
  job.status.dropped_replica_groups = {3};
  const json written = StatusToJson(job);
  for (const auto& [field, value] : written.items()) {
    EXPECT_TRUE(status[field].IsMap()) << field << " is written but not in the CRD's status";
  }
}

TEST_F(CrdTest, DefaultsMatchTheOperatorsDefaults) {
  DistributedJobSpec defaults;
  EXPECT_EQ(spec_["replicas"]["default"].as<int>(), defaults.replicas);
  EXPECT_EQ(spec_["coordinatorPort"]["default"].as<int>(), defaults.coordinator_port);
  EXPECT_EQ(spec_["maxRestarts"]["default"].as<int>(), defaults.max_restarts);
  EXPECT_EQ(spec_["suspend"]["default"].as<bool>(), defaults.suspend);
  const YAML::Node sidecar = spec_["sidecar"]["properties"];
  EXPECT_EQ(sidecar["image"]["default"].as<std::string>(), defaults.sidecar.image);
  EXPECT_EQ(sidecar["imagePullPolicy"]["default"].as<std::string>(),
            defaults.sidecar.image_pull_policy);
  // Durations: parse the CRD's default strings the way the operator parses the field.
  auto job = ParseDistributedJob(
      testing::JobBuilder()
          .Spec("restartBackoff", spec_["restartBackoff"]["default"].as<std::string>())
          .Spec("sidecar",
                {{"heartbeatTimeout", sidecar["heartbeatTimeout"]["default"].as<std::string>()}})
          .Build());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.restart_backoff, defaults.restart_backoff);
  EXPECT_EQ(job->spec.sidecar.heartbeat_timeout, defaults.sidecar.heartbeat_timeout);
}

TEST_F(CrdTest, BoundsMatchValidation) {
  for (const char* field : {"replicas", "coordinatorPort"}) {
    int64_t min = spec_[field]["minimum"].as<int64_t>();
    int64_t max = spec_[field]["maximum"].as<int64_t>();
    EXPECT_TRUE(ValidateWith(field, min).empty()) << field;
    EXPECT_FALSE(ValidateWith(field, min - 1).empty()) << field;
    EXPECT_FALSE(ValidateWith(field, max + 1).empty()) << field;
  }
  EXPECT_TRUE(
      ValidateWith("coordinatorPort", spec_["coordinatorPort"]["maximum"].as<int64_t>()).empty());
  EXPECT_FALSE(
      ValidateWith("maxRestarts", spec_["maxRestarts"]["minimum"].as<int64_t>() - 1).empty());
}

TEST_F(CrdTest, SparesMatchValidation) {
  EXPECT_EQ(spec_["spares"]["default"].as<int>(), DistributedJobSpec{}.spares);
  // Spares need a trainer command (cohort-launch runs it in the slot a spare takes).
  auto validate = [](int64_t spares) {
    auto job = ParseDistributedJob(
        testing::JobBuilder()
            .Spec("spares", spares)
            .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "train.py"})
            .Build());
    EXPECT_TRUE(job.ok());
    return Validate(*job);
  };
  EXPECT_TRUE(validate(spec_["spares"]["minimum"].as<int64_t>()).empty());
  EXPECT_TRUE(validate(spec_["spares"]["maximum"].as<int64_t>()).empty());
  EXPECT_FALSE(validate(spec_["spares"]["minimum"].as<int64_t>() - 1).empty());
  EXPECT_FALSE(validate(spec_["spares"]["maximum"].as<int64_t>() + 1).empty());
  const YAML::Node status =
      version_["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
  for (const char* field : {"spares", "readySpares", "sparesText", "sparesCreated", "slots"}) {
    EXPECT_TRUE(status[field].IsMap()) << field;
  }
}

TEST_F(CrdTest, HangFieldsMatch) {
  const YAML::Node policies = spec_["hangPolicy"]["enum"];
  ASSERT_TRUE(policies.IsSequence());
  EXPECT_EQ(policies.size(), 3u);
  for (const auto& p : policies) {
    auto job =
        ParseDistributedJob(testing::JobBuilder().Spec("hangPolicy", p.as<std::string>()).Build());
    ASSERT_TRUE(job.ok());
    EXPECT_TRUE(Validate(*job).empty()) << p.as<std::string>();
  }
  // No schema default: unset reads as Restart, but a Recreate job may not ask for it (Validate).
  EXPECT_FALSE(spec_["hangPolicy"]["default"].IsDefined());
  EXPECT_EQ(DistributedJobSpec{}.hang_policy, HangPolicy::kRestart);
  EXPECT_FALSE(DistributedJobSpec{}.hang_policy_set);
  const YAML::Node timeout = spec_["hangDetection"]["properties"]["timeoutSeconds"];
  EXPECT_FALSE(timeout["default"].IsDefined()) << "absent means automatic";
  const int64_t min = timeout["minimum"].as<int64_t>();
  auto validate = [](int64_t seconds) {
    auto job = ParseDistributedJob(
        testing::JobBuilder().Spec("hangDetection", {{"timeoutSeconds", seconds}}).Build());
    EXPECT_TRUE(job.ok());
    return Validate(*job);
  };
  EXPECT_TRUE(validate(min).empty());
  EXPECT_FALSE(validate(min - 1).empty());
  EXPECT_TRUE(
      version_["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["lastHangId"]
          .IsMap());
}

TEST_F(CrdTest, PhaseEnumMatches) {
  const YAML::Node phases =
      version_["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"];
  ASSERT_TRUE(phases.IsSequence());
  for (const auto& p : phases) {
    EXPECT_TRUE(ParsePhase(p.as<std::string>()).has_value()) << p.as<std::string>();
  }
  EXPECT_EQ(phases.size(), 6u);
}

}  // namespace
}  // namespace cohort::op
