// The chart as a user installs it: real Helm 4 (server-side apply, its release Secrets) against
// the local control plane; the operator runs as the chart's Deployment, in pods, with its service
// account's token and only the permissions the chart's RBAC grants; a job runs through it;
// `helm upgrade` rolls it and `helm uninstall` removes it. docs/operator.md, "Installing with
// Helm".
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "kube/json_fields.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kNamespace[] = "cohort-system";
constexpr char kOperatorAccount[] = "system:serviceaccount:cohort-system:cohort-operator";

class HelmE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalControlPlane>();
    LocalControlPlane::Result helm = cluster_->Command(
        {"bash", COHORT_SOURCE_DIR "/tests/install_helm.sh", COHORT_SOURCE_DIR, COHORT_BUILD_DIR});
    if (helm.exit_code == 77)
      GTEST_SKIP() << "PyPI cannot be reached, so there is no Helm: " << helm.output;
    ASSERT_EQ(helm.exit_code, 0) << helm.output;
    // Its last line is the binary's path.
    std::string output(absl::StripTrailingAsciiWhitespace(helm.output));
    helm_ = output.substr(output.rfind('\n') == std::string::npos ? 0 : output.rfind('\n') + 1);
  }

  LocalControlPlane::Result Helm(std::vector<std::string> args) {
    args.insert(args.begin(), helm_);
    return cluster_->Command(args);
  }
  // `helm install --wait` of the chart (Helm's status watcher: watch-lists of every kind it
  // installed), then `kubectl rollout status`, which agrees.
  void Install(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"install",     "cohort",    COHORT_SOURCE_DIR "/charts/cohort",
                                     "--namespace", kNamespace,  "--create-namespace",
                                     "--wait",      "--timeout", "120s"};
    args.insert(args.end(), extra.begin(), extra.end());
    LocalControlPlane::Result installed = Helm(args);
    ASSERT_EQ(installed.exit_code, 0) << installed.output;
    RollOut();
  }
  void RollOut() {
    LocalControlPlane::Result rollout = cluster_->Kubectl(
        {"rollout", "status", "deployment/cohort-operator", "-n", kNamespace, "--timeout=60s"});
    ASSERT_EQ(rollout.exit_code, 0) << rollout.output;
    EXPECT_THAT(rollout.output, HasSubstr("successfully rolled out"));
  }
  std::vector<json> OperatorPods() {
    std::vector<json> pods;
    json list =
        *cluster_->client().List(kube::kPods, kNamespace, "app.kubernetes.io/name=cohort-operator");
    for (const json& pod : list["items"]) {
      if (!pod["metadata"].contains("deletionTimestamp")) pods.push_back(pod);
    }
    return pods;
  }
  std::string Logs(const std::string& pod) {
    return cluster_->Kubectl({"logs", "-n", kNamespace, pod}).output;
  }
  std::string CanI(const std::string& verb, const std::string& resource, const std::string& ns) {
    LocalControlPlane::Result r =
        cluster_->Kubectl({"auth", "can-i", verb, resource, "--as", kOperatorAccount, "-n", ns});
    return std::string(absl::StripAsciiWhitespace(r.output));
  }
  // The name of the pod holding the operator's Lease, or "".
  std::string Leader() {
    absl::StatusOr<json> lease =
        cluster_->client().Get(kube::kLeases, kNamespace, "cohort-operator");
    if (!lease.ok()) return "";
    const std::string holder = kube::StringMember(kube::Member(*lease, "spec"), "holderIdentity");
    for (const json& pod : OperatorPods()) {
      const std::string name = pod["metadata"]["name"];
      if (absl::StartsWith(holder, name + "_")) return name;
    }
    return "";
  }
  std::string JobYaml(const std::string& name) {
    return absl::StrCat(R"(apiVersion: cohort.dev/v1alpha1
kind: DistributedJob
metadata:
  name: )",
                        name, R"(
  namespace: default
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: trainer
          image: ghcr.io/cohort-dev/cohort-demo:0.1.0
          command: ["demo-trainer", "--steps", "20"]
)");
  }

  std::string helm_;
  std::unique_ptr<LocalControlPlane> cluster_;
};

TEST_F(
    HelmE2E,
    Install_TheOperatorRunsInPodsWithItsServiceAccount_OneLeads_AJobSucceeds_UninstallRemovesIt) {
  ASSERT_NO_FATAL_FAILURE(Install());
  ASSERT_EQ(OperatorPods().size(), 2u)
      << cluster_->Kubectl({"get", "pods", "-n", kNamespace, "-o", "wide"}).output;

  // What the chart's RBAC gives the operator's service account, answered from the same rules.
  EXPECT_EQ(CanI("create", "pods", "default"), "yes");
  EXPECT_EQ(CanI("update", "leases", kNamespace), "yes");
  EXPECT_EQ(CanI("update", "leases", "default"), "no");
  EXPECT_EQ(CanI("create", "deployments", "default"), "no");

  // Two replicas, one leader, named by its pod (the Lease's holder is "<hostname>_<pid>").
  std::string leader;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((leader = Leader()).empty() && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(100));
  ASSERT_FALSE(leader.empty())
      << cluster_->Kubectl({"get", "lease", "-n", kNamespace, "-o", "yaml"}).output
      << cluster_->Kubectl({"get", "pods", "-n", kNamespace, "-o", "wide"}).output;
  for (const json& pod : OperatorPods()) {
    const std::string name = pod["metadata"]["name"];
    if (name != leader) EXPECT_THAT(Logs(name), HasSubstr("waiting to lead")) << name;
  }
  // Its in-cluster configuration: the API server through the service account's token.
  EXPECT_THAT(Logs(leader), HasSubstr("cohort-operator: API server https://127.0.0.1:"));

  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("through-the-chart")).exit_code, 0);
  json job = cluster_->WaitForJob(
      "default", "through-the-chart",
      [](const json& j) {
        const std::string phase = kube::StringMember(kube::Member(j, "status"), "phase");
        return phase == "Succeeded" || phase == "Failed";
      },
      absl::Minutes(2));
  EXPECT_EQ(kube::StringMember(kube::Member(job, "status"), "phase"), "Succeeded")
      << job.dump(2) << cluster_->Kubectl({"get", "pods", "-A", "-o", "wide"}).output
      << Logs(leader);

  LocalControlPlane::Result uninstalled =
      Helm({"uninstall", "cohort", "--namespace", kNamespace, "--wait", "--timeout", "120s"});
  ASSERT_EQ(uninstalled.exit_code, 0) << uninstalled.output;
  for (const char* kind : {"deployment", "serviceaccount", "role", "rolebinding", "service"}) {
    LocalControlPlane::Result left =
        cluster_->Kubectl({"get", kind, "-n", kNamespace, "-o", "name"});
    EXPECT_THAT(left.output, Not(HasSubstr("cohort-operator"))) << kind;
  }
  EXPECT_THAT(cluster_->Kubectl({"get", "clusterrole", "-o", "name"}).output,
              Not(HasSubstr("cohort-operator")));
  // Nothing is made again for what was deleted (a ReplicaSet or pod that the deployment controller
  // made from a view older than the deletion is garbage at once).
  EXPECT_TRUE(cluster_->WaitForPods(
      kNamespace, "app.kubernetes.io/name=cohort-operator",
      [](const std::vector<json>& pods) { return pods.empty(); }, absl::Seconds(60)))
      << cluster_->Kubectl({"get", "replicasets,pods", "-n", kNamespace, "-o", "wide"}).output;
}

TEST_F(HelmE2E, Upgrade_AChangedValueRollsTheDeployment_TheOldPodsGoOnceTheNewAreReady) {
  ASSERT_NO_FATAL_FAILURE(Install({"--set", "replicaCount=1"}));
  std::vector<json> before = OperatorPods();
  ASSERT_EQ(before.size(), 1u);
  LocalControlPlane::Result upgraded =
      Helm({"upgrade", "cohort", COHORT_SOURCE_DIR "/charts/cohort", "--namespace", kNamespace,
            "--set", "replicaCount=1", "--set", "operator.logLevel=debug"});
  ASSERT_EQ(upgraded.exit_code, 0) << upgraded.output;
  ASSERT_NO_FATAL_FAILURE(RollOut());
  json replica_sets = *cluster_->client().List({"apps", "v1", "replicasets"}, kNamespace, "");
  ASSERT_EQ(replica_sets["items"].size(), 2u) << replica_sets.dump(2);
  for (const json& rs : replica_sets["items"]) {
    const std::string revision = rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"];
    EXPECT_EQ(rs["spec"]["replicas"], revision == "2" ? 1 : 0) << rs.dump(2);
  }
  ASSERT_TRUE(cluster_->WaitForPods(
      kNamespace, "app.kubernetes.io/name=cohort-operator",
      [&](const std::vector<json>& pods) {
        return pods.size() == 1 && pods[0]["metadata"]["name"] != before[0]["metadata"]["name"];
      },
      absl::Seconds(60)));
  const std::string pod = OperatorPods()[0]["metadata"]["name"];
  json spec = *cluster_->client().Get(kube::kPods, kNamespace, pod);
  EXPECT_THAT(spec["spec"]["containers"][0]["args"].dump(), HasSubstr("--log-level=debug"));
}

// The chart's RBAC is what the operator gets: with a verb taken out of its ClusterRole, the
// operator's own requests are refused (403) and it says so; `kubectl auth can-i` agrees.
TEST_F(HelmE2E, AVerbMissingFromTheChartsRbac_TheOperatorsRequestsAreForbidden) {
  ASSERT_NO_FATAL_FAILURE(Install({"--set", "replicaCount=1"}));
  json role = *cluster_->client().Get({"rbac.authorization.k8s.io", "v1", "clusterroles"}, "",
                                      "cohort-operator");
  bool removed = false;
  for (json& rule : role["rules"]) {
    if (rule["resources"] != json::array({"pods"})) continue;
    json verbs = json::array();
    for (const json& v : rule["verbs"]) {
      if (v != "create") verbs.push_back(v);
    }
    removed = verbs.size() != rule["verbs"].size();
    rule["verbs"] = verbs;
  }
  ASSERT_TRUE(removed) << "the chart's ClusterRole has no pods rule with create: " << role.dump(2);
  ASSERT_TRUE(cluster_->client()
                  .Update({"rbac.authorization.k8s.io", "v1", "clusterroles"}, "", role)
                  .ok());
  EXPECT_EQ(CanI("create", "pods", "default"), "no");

  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("forbidden")).exit_code, 0);
  const std::string pod = OperatorPods()[0]["metadata"]["name"];
  const std::string refusal =
      absl::StrCat("User \"", kOperatorAccount, "\" cannot create resource \"pods\"");
  std::string logs;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!absl::StrContains(logs = Logs(pod), refusal) && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(200));
  EXPECT_THAT(logs, HasSubstr(refusal));
  EXPECT_TRUE(cluster_->client().List(kube::kPods, "default", "")->at("items").empty());
}

}  // namespace
}  // namespace cohort::testing
