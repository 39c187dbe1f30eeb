// manifests/operator/rbac.yaml against what the operator's code does: every API call the
// reconciler, the informers and leader election make through a lifecycle of jobs is allowed by
// a rule, and every verb a rule grants is used (least privilege).
#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/informer.h"
#include "kube/leader_election.h"
#include "operator/reconciler/reconciler.h"
#include "tests/kube/fake_kube_client.h"
#include "tests/operator/fake_attempt_watcher.h"
#include "tests/operator/job_builder.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using kube::testing::FakeKubeClient;
using testing::FakeAttemptWatcher;
using testing::JobBuilder;

// "verb group/resource" for every verb each rule of the ClusterRole and Role grants.
std::set<std::string> Granted() {
  std::set<std::string> granted;
  for (const YAML::Node& doc :
       YAML::LoadAllFromFile(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/operator/rbac.yaml"))) {
    std::string kind = doc["kind"].as<std::string>();
    if (kind != "ClusterRole" && kind != "Role") continue;
    for (const YAML::Node& rule : doc["rules"]) {
      for (const YAML::Node& group : rule["apiGroups"]) {
        for (const YAML::Node& resource : rule["resources"]) {
          for (const YAML::Node& verb : rule["verbs"]) {
            granted.insert(absl::StrCat(verb.as<std::string>(), " ", group.as<std::string>(), "/",
                                        resource.as<std::string>()));
          }
        }
      }
    }
  }
  return granted;
}

class RbacTest : public ::testing::Test {
 protected:
  // Children and fixtures outlive their owners, as under a busy garbage collector: the operator
  // meets what a real cluster leaves it to clean up.
  void SetUp() override { kube_.PauseGarbageCollection(true); }
  // What the operator did since the last call.
  void Collect() {
    for (const std::string& call : kube_.TakeCalls()) used_.insert(call);
  }
  // What the test itself did, as another actor: not the operator's.
  void Discard() { kube_.TakeCalls(); }
  void Pass() {
    Collect();
    absl::StatusOr<std::optional<absl::Duration>> r = reconciler_.Reconcile("ml", "train");
    for (int i = 0; i < 3 && !r.ok(); ++i) r = reconciler_.Reconcile("ml", "train");
    ASSERT_TRUE(r.ok()) << r.status();
    Collect();
  }
  void SetPods(const std::function<void(int rank, json& status)>& f) { SetPodsOf("train", f); }
  void SetPodsOf(const std::string& job, const std::function<void(int rank, json& status)>& f) {
    for (int r = 0; r < 4; ++r) {
      kube_.Modify(kube::kPods, "ml", absl::StrCat(job, "-", r),
                   [&](json& pod) { f(r, pod["status"]); });
    }
    Discard();
  }
  // Job `name` (uid `uid`) with a PodGroup of `provider` per attempt: its first group's name taken
  // by a group of another job (replaced), then a failed rank (the next attempt's group, the
  // first one's deleted).
  void RunWithPodGroups(const std::string& provider, const kube::Resource& groups,
                        const std::string& name, const std::string& uid) {
    ASSERT_TRUE(kube_
                    .Create(groups, "ml",
                            {{"metadata",
                              {{"name", name + "-0"},
                               {"namespace", "ml"},
                               {"ownerReferences", {{{"uid", "u-other"}, {"controller", true}}}}}}})
                    .ok());
    json job =
        JobBuilder(name).Spec("scheduling", {{"podGroup", {{"provider", provider}}}}).Build();
    job["metadata"]["uid"] = uid;
    ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", job).ok());
    Discard();
    for (int i = 0; i < 3; ++i) {
      Collect();
      reconciler_.Reconcile("ml", name).IgnoreError();  // The replaced group makes a pass retry.
      Collect();
    }
    SetPodsOf(name, [](int, json& s) {
      s = {{"phase", "Failed"},
           {"containerStatuses",
            {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 1}}}}}}}}};
    });
    for (int i = 0; i < 3; ++i) {
      clock_.Advance(absl::Minutes(1));
      Collect();
      reconciler_.Reconcile("ml", name)
          .IgnoreError();  // Restart attempt 1: attempt 0's group goes.
      Collect();
    }
  }

  FakeClock clock_;
  FakeKubeClient kube_;
  Reconciler reconciler_{&kube_, &clock_};
  std::set<std::string> used_;
};

TEST_F(RbacTest, RulesAllowEverythingTheOperatorDoesAndNothingMore) {
  // Informers: list and watch jobs and pods.
  for (const kube::Resource* r : {&kDistributedJobs, &kube::kPods}) {
    kube::Informer informer(
        &kube_, *r, "", "", [](const std::string&, const json&) {}, absl::Milliseconds(1));
    ASSERT_TRUE(informer.RunOnce().ok());
  }
  Collect();
  // Leader election: create, renew, release.
  kube::LeaderElectionOptions le;
  le.identity = "a";
  kube::LeaderElector elector(&kube_, &clock_, le);
  ASSERT_TRUE(*elector.TryAcquireOrRenew());
  ASSERT_TRUE(*elector.TryAcquireOrRenew());
  ASSERT_TRUE(elector.Release().ok());
  Collect();

  // A job (with a scheduler-plugins PodGroup per attempt): created, running, a rank fails (gang
  // restart: the next attempt's PodGroup, the last one's deleted), succeeds, TTL deletes it.
  const json coscheduling = {{"podGroup", {{"provider", "coscheduling"}}}};
  ASSERT_TRUE(kube_
                  .Create(kDistributedJobs, "ml",
                          JobBuilder()
                              .Spec("ttlSecondsAfterFinished", 0)
                              .Spec("scheduling", coscheduling)
                              .Build())
                  .ok());
  Discard();
  Pass();
  SetPods([](int, json& s) {
    s = {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  });
  Pass();
  SetPods([](int r, json& s) {
    if (r == 2)
      s = {{"phase", "Failed"},
           {"containerStatuses",
            {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 1}}}}}}}}};
  });
  Pass();
  clock_.Advance(absl::Minutes(1));
  Pass();  // Restart attempt 1.
  SetPods([](int, json& s) {
    s = {{"phase", "Succeeded"},
         {"containerStatuses",
          {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  });
  Pass();
  Pass();  // TTL 0: the job is deleted.

  // Created again while the TTL-deleted job's children linger (garbage collection is paused):
  // they are replaced.
  ASSERT_EQ(kube_.Count(kDistributedJobs), 0u);
  json again = JobBuilder().Spec("scheduling", coscheduling).Build();
  again["metadata"]["uid"] = "u-2";
  ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", again).ok());
  // A PodGroup of the earlier job's first attempt, left behind (by hand here).
  const kube::Resource coscheduling_groups{"scheduling.x-k8s.io", "v1alpha1", "podgroups"};
  ASSERT_TRUE(kube_
                  .Create(coscheduling_groups, "ml",
                          {{"metadata",
                            {{"name", "train-0"},
                             {"namespace", "ml"},
                             {"ownerReferences", {{{"uid", "u-1"}, {"controller", true}}}}}}})
                  .ok());
  Discard();
  Pass();
  Pass();

  // Volcano's and Kubernetes' PodGroups: the same calls in their API groups, one left by an
  // earlier job replaced.
  ASSERT_NO_FATAL_FAILURE(
      RunWithPodGroups("volcano", {"scheduling.volcano.sh", "v1beta1", "podgroups"}, "vol", "u-3"));
  ASSERT_NO_FATAL_FAILURE(
      RunWithPodGroups("workload", {"scheduling.k8s.io", "v1beta1", "podgroups"}, "wl", "u-4"));

  // A job with a hot spare that restarts in place, its pods in one rack (Kueue's topology
  // annotation): pod 1's node is lost, the spare (in the rack: its node is read) takes its slot
  // (labelled: a patch) and the next attempt is ordered with the assignment.
  FakeAttemptWatcher hub;
  reconciler_.set_attempt_watcher(&hub);
  json spared = JobBuilder("sp").Spec("spares", 1).Build();
  spared["metadata"]["uid"] = "u-5";
  spared["spec"]["template"]["spec"]["containers"][0]["command"] = {"python", "train.py"};
  spared["spec"]["template"]["metadata"]["annotations"] = {
      {kKueueRequiredTopologyAnnotation, "example.com/rack"}};
  ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", spared).ok());
  for (const char* node : {"node-a", "node-b"}) {
    ASSERT_TRUE(
        kube_
            .Create(kube::kNodes, "",
                    {{"metadata", {{"name", node}, {"labels", {{"example.com/rack", "r1"}}}}}})
            .ok());
  }
  Discard();
  Collect();
  ASSERT_TRUE(reconciler_.Reconcile("ml", "sp").ok());
  Collect();
  absl::StatusOr<json> pods = kube_.List(kube::kPods, "ml", "cohort.dev/job-name=sp");
  ASSERT_TRUE(pods.ok());
  ASSERT_EQ((*pods)["items"].size(), 5u) << "four pods and the spare";
  for (const std::string pod : {"sp-0", "sp-1", "sp-2", "sp-3", "sp-spare0"}) {
    kube_.Modify(kube::kPods, "ml", pod, [&](json& p) {
      p["spec"]["nodeName"] = pod == "sp-spare0" ? "node-b" : "node-a";
      p["status"] = {{"phase", "Running"},
                     {"podIP", "10.0.0.1"},
                     {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
    });
  }
  AttemptView view;
  view.connected = true;
  view.following = view.followed = {0, 1, 2, 3};
  view.spares = {"sp-spare0"};
  hub.view = view;
  Discard();
  Collect();
  ASSERT_TRUE(reconciler_.Reconcile("ml", "sp").ok());  // Running.
  Collect();
  view.following = {0, 2, 3};
  for (int32_t pod : {0, 2, 3})
    view.ends[pod] = AttemptView::End{75, "Error", "peer failed", clock_.Now()};
  hub.view = view;
  kube_.Modify(kube::kPods, "ml", "sp-1",
               [](json& p) { p["status"]["conditions"][0]["status"] = "False"; });
  Discard();
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Minutes(1));
    Collect();
    ASSERT_TRUE(
        reconciler_.Reconcile("ml", "sp").ok());  // Restarting in place, then attempt 1 ordered.
    Collect();
  }
  EXPECT_EQ(hub.started, std::optional<int32_t>(1));
  EXPECT_EQ(hub.assignments, (std::vector<std::pair<int32_t, std::string>>{{1, "sp-spare0"}}));

  std::set<std::string> granted = Granted();
  for (const std::string& call : used_) {
    EXPECT_TRUE(granted.count(call))
        << "the operator makes '" << call << "' but manifests/operator/rbac.yaml does not allow it";
  }
  for (const std::string& grant : granted) {
    EXPECT_TRUE(used_.count(grant))
        << "manifests/operator/rbac.yaml grants '" << grant
        << "' but no operator code path uses it: remove it (least privilege)";
  }
}

}  // namespace
}  // namespace cohort::op
