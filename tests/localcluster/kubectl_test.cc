// Real kubectl against a running cohort-local-cluster with the project's CRD applied: the local
// API server checks DistributedJobs against the CRD's schema the way a real one does (kubectl's
// default fieldValidation=Strict, --validate=false and =warn), and serves what `kubectl explain`
// and `kubectl get -w` need.
#include <signal.h>

#include <memory>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/api/distributed_job.h"
#include "tests/e2e/local_control_plane.h"

namespace cohort::testing {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kLineTimeout = absl::Seconds(30);

// A DistributedJob manifest; `spec_lines` go before the template, indented two spaces.
std::string JobYaml(const std::string& name, const std::string& spec_lines) {
  return absl::StrCat("apiVersion: cohort.dev/v1alpha1\nkind: DistributedJob\nmetadata:\n  name: ",
                      name, "\nspec:\n", spec_lines,
                      "  template:\n    spec:\n      containers:\n        - name: trainer\n"
                      "          image: cohort/test-trainer:dev\n");
}

// One control plane for the suite (no operator: nothing acts on the jobs); jobs have distinct
// names.
class LocalClusterKubectl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new LocalControlPlane(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_->kubeconfig(), "") << "the local control plane did not start";
  }

  absl::StatusOr<json> Get(const std::string& name) {
    return cluster_->client().Get(op::kDistributedJobs, "default", name);
  }

  static LocalControlPlane* cluster_;
};
LocalControlPlane* LocalClusterKubectl::cluster_ = nullptr;

TEST_F(LocalClusterKubectl, ApplyUnknownField_RejectedWithTheStrictDecodingError) {
  LocalControlPlane::Result applied =
      cluster_->Kubectl({"apply"}, JobYaml("k-unknown", "  replicaz: 3\n"));
  EXPECT_NE(applied.exit_code, 0) << applied.output;
  EXPECT_THAT(applied.output, HasSubstr("Error from server (BadRequest): error when creating"));
  EXPECT_THAT(applied.output,
              HasSubstr("DistributedJob in version \"v1alpha1\" cannot be handled as a "
                        "DistributedJob: strict decoding error: unknown field \"spec.replicaz\""));
  EXPECT_TRUE(absl::IsNotFound(Get("k-unknown").status())) << "nothing stored";
}

TEST_F(LocalClusterKubectl, ApplyUnknownFieldWithoutValidation_StoredPrunedAndDefaulted) {
  LocalControlPlane::Result applied = cluster_->Kubectl(
      {"apply", "--validate=false"}, JobYaml("k-pruned", "  replicas: 2\n  replicaz: 3\n"));
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  EXPECT_THAT(applied.output, HasSubstr("distributedjob.cohort.dev/k-pruned created"));
  EXPECT_THAT(applied.output, Not(HasSubstr("Warning")));
  absl::StatusOr<json> job = Get("k-pruned");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE((*job)["spec"].contains("replicaz")) << job->dump();
  EXPECT_EQ((*job)["spec"]["replicas"], 2);
  EXPECT_EQ((*job)["spec"]["coordinatorPort"], 8476) << "the CRD's default";
  EXPECT_EQ((*job)["spec"]["sidecar"]["imagePullPolicy"], "IfNotPresent") << "the CRD's default";

  // --validate=warn: stored the same way, with kubectl printing the server's warning.
  LocalControlPlane::Result warned =
      cluster_->Kubectl({"apply", "--validate=warn"}, JobYaml("k-warned", "  replicaz: 3\n"));
  ASSERT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_THAT(warned.output, HasSubstr("Warning: unknown field \"spec.replicaz\""));
  ASSERT_TRUE(Get("k-warned").ok());
  EXPECT_FALSE((*Get("k-warned"))["spec"].contains("replicaz"));

  // An existing job edited with the same typo: kubectl patches, and the patch is refused.
  LocalControlPlane::Result patched =
      cluster_->Kubectl({"apply"}, JobYaml("k-pruned", "  replicas: 3\n  replicaz: 3\n"));
  EXPECT_NE(patched.exit_code, 0) << patched.output;
  EXPECT_THAT(patched.output, HasSubstr("strict decoding error: unknown field \"spec.replicaz\""));
  EXPECT_EQ((*Get("k-pruned"))["spec"]["replicas"], 2) << "the refused patch changed nothing";
}

TEST_F(LocalClusterKubectl, ApplyWrongType_RejectedNamingTheFieldAndTheType) {
  LocalControlPlane::Result applied =
      cluster_->Kubectl({"apply"}, JobYaml("k-four", "  replicas: \"four\"\n"));
  EXPECT_NE(applied.exit_code, 0) << applied.output;
  EXPECT_THAT(applied.output,
              HasSubstr("The DistributedJob \"k-four\" is invalid: spec.replicas: Invalid value: "
                        "\"string\": spec.replicas in body must be of type integer: \"string\""));
  EXPECT_TRUE(absl::IsNotFound(Get("k-four").status()));

  LocalControlPlane::Result zero =
      cluster_->Kubectl({"apply"}, JobYaml("k-zero", "  replicas: 0\n"));
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  EXPECT_THAT(zero.output,
              HasSubstr("spec.replicas: Invalid value: 0: spec.replicas in body should be greater "
                        "than or equal to 1"));
}

TEST_F(LocalClusterKubectl, Explain_PrintsTheCrdSchema) {
  // A full resource name works at once: kubectl's discovery cache (~/.kube/cache, six hours) may
  // predate the CRD, and kubectl refreshes it when a name is not found.
  LocalControlPlane::Result replicas =
      cluster_->Kubectl({"explain", "distributedjob.spec.replicas"});
  ASSERT_EQ(replicas.exit_code, 0) << replicas.output;
  EXPECT_THAT(replicas.output, HasSubstr("KIND:       DistributedJob"));
  EXPECT_THAT(replicas.output, HasSubstr("FIELD: replicas <integer>"));
  EXPECT_THAT(replicas.output, HasSubstr("Number of pods, <job>-0 to <job>-(replicas-1)."));

  // A short name is expanded from that cache before the refresh, so `explain` (unlike `get`)
  // needs discovery newer than the CRD: here, a cache of its own (docs/operator.md).
  std::string cache = absl::StrCat(cluster_->dir(), "/kubectl-cache-explain");
  LocalControlPlane::Result spec =
      cluster_->Kubectl({"explain", "djob.spec", "--cache-dir", cache});
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  EXPECT_THAT(spec.output, HasSubstr("FIELD: spec <Object>"));
  EXPECT_TRUE(std::regex_search(spec.output, std::regex(R"(replicas\s+<integer>)"))) << spec.output;
  EXPECT_TRUE(std::regex_search(spec.output, std::regex(R"(template\s+<Object> -required-)")))
      << spec.output;
  EXPECT_THAT(spec.output, HasSubstr("Wait before the first restart"));

  LocalControlPlane::Result policy =
      cluster_->Kubectl({"explain", "djob.spec.sidecar.imagePullPolicy", "--cache-dir", cache});
  ASSERT_EQ(policy.exit_code, 0) << policy.output;
  EXPECT_TRUE(
      std::regex_search(policy.output, std::regex(R"(ENUM:\s+Always\s+IfNotPresent\s+Never)")))
      << policy.output;

  LocalControlPlane::Result per_pod =
      cluster_->Kubectl({"explain", "djob.spec.processesPerPod", "--cache-dir", cache});
  ASSERT_EQ(per_pod.exit_code, 0) << per_pod.output;
  EXPECT_THAT(per_pod.output,
              HasSubstr("Processes each pod runs, one per GPU on a multi-GPU node"));
  LocalControlPlane::Result launcher =
      cluster_->Kubectl({"explain", "djob.spec.launcher", "--cache-dir", cache});
  ASSERT_EQ(launcher.exit_code, 0) << launcher.output;
  EXPECT_TRUE(std::regex_search(launcher.output, std::regex(R"(ENUM:\s+Cohort\s+Torchrun)")))
      << launcher.output;
}

TEST_F(LocalClusterKubectl, GetWatch_ShowsThePrinterColumnsForEveryChange) {
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("k-watch", "  replicas: 2\n")).exit_code, 0);
  absl::StatusOr<std::unique_ptr<WatchedProcess>> watch = WatchedProcess::Start(
      {"kubectl", "get", "djob", "-w"}, {{"KUBECONFIG", cluster_->kubeconfig()}}, "kubectl get -w");
  ASSERT_TRUE(watch.ok()) << watch.status();
  std::string header = (*watch)->WaitForLine("NAME", kLineTimeout);
  EXPECT_TRUE(std::regex_search(
      header, std::regex(R"(NAME\s+PHASE\s+READY\s+PROCESSES/POD\s+RESTARTS\s+AGE)")))
      << header;

  // What the operator writes when the gang runs; kubectl prints it from the watch event.
  absl::StatusOr<json> written = cluster_->client().MergePatch(
      op::kDistributedJobs, "default", "k-watch",
      {{"status",
        {{"phase", "Running"}, {"readyText", "2/2"}, {"processesPerPod", 4}, {"restarts", 1}}}},
      /*status=*/true);
  ASSERT_TRUE(written.ok()) << written.status();
  std::string row = (*watch)->WaitForLine("Running", kLineTimeout);
  EXPECT_TRUE(std::regex_search(row, std::regex(R"(k-watch\s+Running\s+2/2\s+4\s+1\s+\d+s)")))
      << "row: '" << row << "'\n"
      << (*watch)->Output();
  (*watch)->Signal(SIGTERM);
  EXPECT_TRUE((*watch)->WaitForExit(kLineTimeout).has_value());
}

// `kubectl scale` through the CRD's scale subresource (no operator here: only spec.replicas
// moves; what the operator does with it is docs/operator.md's, "Elastic replica groups").
TEST_F(LocalClusterKubectl, Scale_WritesSpecReplicasThroughTheScaleSubresource) {
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("k-scale", "  replicas: 2\n")).exit_code, 0);
  LocalControlPlane::Result scaled =
      cluster_->Kubectl({"scale", "djob/k-scale", "--replicas", "4"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  EXPECT_THAT(scaled.output, HasSubstr("distributedjob.cohort.dev/k-scale scaled"));
  absl::StatusOr<json> job = Get("k-scale");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["spec"]["replicas"], 4);
  // --current-replicas: kubectl reads the Scale first and refuses when it differs.
  LocalControlPlane::Result refused =
      cluster_->Kubectl({"scale", "djob/k-scale", "--current-replicas", "3", "--replicas", "1"});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("Expected replicas to be 3, was 4"));
  EXPECT_EQ((*Get("k-scale"))["spec"]["replicas"], 4);
  LocalControlPlane::Result zero = cluster_->Kubectl({"scale", "djob/k-scale", "--replicas", "0"});
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  EXPECT_THAT(zero.output, HasSubstr("spec.replicas"));
}

// `kubectl cordon` and `uncordon` as on a real cluster: the node's spec.unschedulable, shown as
// SchedulingDisabled; the scheduler's side is LocalControllersTest's.
TEST_F(LocalClusterKubectl, CordonAndUncordon_NodeShowsSchedulingDisabledMeanwhile) {
  LocalControlPlane::Result cordon = cluster_->Kubectl({"cordon", "node-0"});
  ASSERT_EQ(cordon.exit_code, 0) << cordon.output;
  EXPECT_THAT(cordon.output, HasSubstr("node/node-0 cordoned"));
  absl::StatusOr<json> node = cluster_->client().Get(kube::kNodes, "", "node-0");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["spec"].value("unschedulable", false), true);
  LocalControlPlane::Result shown = cluster_->Kubectl({"get", "nodes"});
  EXPECT_TRUE(std::regex_search(shown.output, std::regex(R"(node-0\s+Ready,SchedulingDisabled)")))
      << shown.output;

  LocalControlPlane::Result uncordon = cluster_->Kubectl({"uncordon", "node-0"});
  ASSERT_EQ(uncordon.exit_code, 0) << uncordon.output;
  EXPECT_THAT(uncordon.output, HasSubstr("node/node-0 uncordoned"));
  node = cluster_->client().Get(kube::kNodes, "", "node-0");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE((*node)["spec"].value("unschedulable", false));
  shown = cluster_->Kubectl({"get", "nodes"});
  EXPECT_TRUE(std::regex_search(shown.output, std::regex(R"(node-0\s+Ready\s)"))) << shown.output;
}

// Server-side apply with real kubectl: the apply creates and owns, another manager changing
// an owned field conflicts naming it, --force-conflicts takes it over.
TEST_F(LocalClusterKubectl, ServerSideApply_ConflictNamesTheFieldAndItsManager_ForceTakesItOver) {
  const std::string first =
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\n"
      "data:\n  size: \"1\"\n  mine: a\n";
  LocalControlPlane::Result created =
      cluster_->Kubectl({"apply", "--server-side", "--field-manager=alice"}, first);
  ASSERT_EQ(created.exit_code, 0) << created.output;
  EXPECT_THAT(created.output, HasSubstr("configmap/ssa serverside-applied"));

  const std::string second =
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\n"
      "data:\n  size: \"2\"\n";
  LocalControlPlane::Result refused =
      cluster_->Kubectl({"apply", "--server-side", "--field-manager=bob"}, second);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("conflict with \"alice\": .data.size"));

  LocalControlPlane::Result forced = cluster_->Kubectl(
      {"apply", "--server-side", "--field-manager=bob", "--force-conflicts"}, second);
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  LocalControlPlane::Result yaml =
      cluster_->Kubectl({"get", "configmap", "ssa", "-o", "yaml", "--show-managed-fields"});
  EXPECT_THAT(yaml.output, HasSubstr("size: \"2\""));
  EXPECT_THAT(yaml.output, HasSubstr("mine: a")) << "alice still owns it";
  EXPECT_THAT(yaml.output, HasSubstr("manager: alice"));
  EXPECT_THAT(yaml.output, HasSubstr("manager: bob"));

  // Alice applies again without `mine`: she owned it alone, so it goes.
  LocalControlPlane::Result dropped = cluster_->Kubectl(
      {"apply", "--server-side", "--field-manager=alice"},
      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\ndata: {}\n");
  ASSERT_EQ(dropped.exit_code, 0) << dropped.output;
  yaml = cluster_->Kubectl({"get", "configmap", "ssa", "-o", "yaml"});
  EXPECT_THAT(yaml.output, Not(HasSubstr("mine:")));
  EXPECT_THAT(yaml.output, HasSubstr("size: \"2\""));
}

// Kubernetes' default restartPolicy, Always: a container that exits, or cannot even start,
// is started again with a back-off (CrashLoopBackOff), and the pod stays Running.
TEST_F(LocalClusterKubectl,
       RestartPolicyAlways_ExitsAndStartFailuresRestartWithBackOff_PodStaysRunning) {
  const std::string pod = R"(apiVersion: v1
kind: Pod
metadata:
  name: crashing
  namespace: default
spec:
  containers:
    - name: exits
      image: busybox
      command: ["false"]
    - name: missing
      image: busybox
      command: ["no-such-program-anywhere"]
)";
  ASSERT_EQ(cluster_->Kubectl({"apply"}, pod).exit_code, 0);
  nlohmann::json seen;
  ASSERT_TRUE(cluster_->WaitForPods(
      "default", "",
      [&](const std::vector<nlohmann::json>& pods) {
        for (const nlohmann::json& p : pods) {
          if (p["metadata"]["name"] != "crashing") continue;
          seen = p;
          const nlohmann::json statuses =
              p["status"].value("containerStatuses", nlohmann::json::array());
          if (statuses.size() != 2) return false;
          for (const nlohmann::json& c : statuses) {
            if (c.value("restartCount", 0) < 1 || !c["state"].contains("waiting")) return false;
          }
          return true;
        }
        return false;
      },
      absl::Seconds(30)))
      << seen.dump(2);
  EXPECT_EQ(seen["status"]["phase"], "Running");
  for (const nlohmann::json& c : seen["status"]["containerStatuses"]) {
    EXPECT_EQ(c["state"]["waiting"]["reason"], "CrashLoopBackOff") << c.dump(2);
  }
  EXPECT_EQ(cluster_->Kubectl({"delete", "pod", "crashing", "--grace-period=0"}).exit_code, 0);
}

}  // namespace
}  // namespace cohort::testing
