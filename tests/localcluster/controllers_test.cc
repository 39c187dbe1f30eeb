// The local control plane's scheduler, node lifecycle and deployment controllers against the real
// local API server over real sockets: where pods go, the addresses and names they get, what a
// node that stops renewing its Lease turns into, and how a Deployment rolls.
#include "kube/conditions.h"
#include "localcluster/controllers/scheduler.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/rfc3339.h"
#include "kube/http_kube_client.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/controllers/deployment_controller.h"
#include "localcluster/controllers/node_lifecycle.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

class LocalControllersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiServerOptions options;
    options.tls = false;
    options.token = "t";
    absl::StatusOr<std::unique_ptr<ApiServer>> s = ApiServer::Start(options, Clock::Real());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    kube::KubeConfig config;
    config.server = server_->url();
    config.token = "t";
    absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> c =
        kube::HttpKubeClient::Create(config, kube::HttpKubeClientOptions{.qps = 0}, Clock::Real());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        absl::StrCat("scheduler-", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    client_->CancelWatches();
    scheduler_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartScheduler() {
    SchedulerOptions options;
    options.subnets = {{"node-0", {10, 11}}, {"node-1", {20, 21}}};
    options.hosts_file = hosts_file();
    scheduler_ = std::make_unique<Scheduler>(client_.get(), options);
    scheduler_->Start();
  }
  std::string hosts_file() const { return (dir_ / "hosts").string(); }
  std::string Hosts() const {
    std::ifstream in(hosts_file());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  void CreateNode(const std::string& name, const std::string& ready) {
    json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name}}},
                 {"status", {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}}}};
    ASSERT_TRUE(client_->Create(kube::kNodes, "", node).ok());
  }
  void SetNodeReady(const std::string& name, const std::string& ready) {
    json patch = {{"status", {{"conditions", {{{"type", "Ready"}, {"status", ready}}}}}}};
    ASSERT_TRUE(client_->MergePatch(kube::kNodes, "", name, patch, /*status=*/true).ok());
  }
  // A pod of one container with `spec` (its fields over the container's).
  static json PodObject(const std::string& name, json spec) {
    spec["containers"] = {{{"name", "c"}, {"image", "x"}}};
    return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name}}}, {"spec", spec}};
  }
  void CreatePod(const std::string& name) {
    ASSERT_TRUE(client_
                    ->Create(kube::kPods, "default",
                             PodObject(name, {{"hostname", name}, {"subdomain", "s"}}))
                    .ok());
  }

  // The object once `done` holds for it (null after kWait): read, then watched from there.
  json Await(const kube::Resource& r, const std::string& ns, const std::string& name,
             const std::function<bool(const json&)>& done) {
    absl::StatusOr<json> now = client_->Get(r, ns, name);
    if (now.ok() && done(*now)) return *now;
    json found;
    kube::WatchOptions options;
    options.resource_version = now.ok() ? (*now)["metadata"].value("resourceVersion", "") : "";
    options.timeout = kWait;
    client_
        ->Watch(r, ns, options,
                [&](const json& event) {
                  const json& o = event["object"];
                  if (o["metadata"].value("name", "") != name || !done(o)) return true;
                  found = o;
                  return false;
                })
        .IgnoreError();
    return found;
  }
  static std::string NodeOf(const json& pod) {
    return pod.value("spec", json::object()).value("nodeName", "");
  }
  static std::string AddressOf(const json& pod) {
    return pod["metadata"]
        .value("annotations", json::object())
        .value(Scheduler::kPodAddressAnnotation, "");
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<kube::HttpKubeClient> client_;
  std::unique_ptr<Scheduler> scheduler_;
  std::filesystem::path dir_;
};

TEST_F(LocalControllersTest, PodsSpreadOverReadyNodes_EachNodeItsOwnSubnet_HostsFileNamesThem) {
  CreateNode("node-0", "True");
  CreateNode("node-1", "True");
  StartScheduler();
  ASSERT_TRUE(scheduler_->WaitForReadyNodes(2, kWait));
  std::map<std::string, int> per_node;
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrCat("p", i);
    CreatePod(name);
    json pod =
        Await(kube::kPods, "default", name, [](const json& p) { return !NodeOf(p).empty(); });
    ASSERT_FALSE(pod.is_null()) << name << " was not bound";
    ++per_node[NodeOf(pod)];
    // node-0 hands out 127.0.10-11.x, node-1 127.0.20-21.x.
    std::vector<std::string> octets = absl::StrSplit(AddressOf(pod), '.');
    ASSERT_EQ(octets.size(), 4u) << AddressOf(pod);
    int third = 0;
    ASSERT_TRUE(absl::SimpleAtoi(octets[2], &third));
    if (NodeOf(pod) == "node-0") {
      EXPECT_TRUE(third == 10 || third == 11) << AddressOf(pod);
    } else {
      EXPECT_TRUE(third == 20 || third == 21) << AddressOf(pod);
    }
    EXPECT_THAT(Hosts(), HasSubstr(absl::StrCat(AddressOf(pod), " ", name, ".s.default.svc ")))
        << "named before its containers could start";
  }
  EXPECT_EQ(per_node, (std::map<std::string, int>{{"node-0", 2}, {"node-1", 2}}));

  // A pod's name stops resolving when its object is gone. (A file gives no notification: read
  // it until then.)
  ASSERT_TRUE(client_->Delete(kube::kPods, "default", "p0", 0).ok());
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::StrContains(Hosts(), "p0.") && absl::Now() < deadline)
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_THAT(Hosts(), ::testing::Not(HasSubstr("p0.s.default.svc")));
  EXPECT_THAT(Hosts(), HasSubstr("p1.s.default.svc"));
}

TEST_F(LocalControllersTest, NoReadyNode_PodWaitsUnschedulable_ThenGoesToTheNodeThatBecomesReady) {
  CreateNode("node-0", "Unknown");
  CreateNode("node-1", "False");
  StartScheduler();
  CreatePod("waits");
  json pod = Await(kube::kPods, "default", "waits", [](const json& p) {
    for (const json& c : p.value("status", json::object()).value("conditions", json::array())) {
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") return true;
    }
    return false;
  });
  ASSERT_FALSE(pod.is_null()) << "no PodScheduled=False";
  EXPECT_EQ(NodeOf(pod), "");
  EXPECT_THAT(pod["status"].dump(), HasSubstr("Unschedulable"));
  EXPECT_THAT(pod["status"].dump(),
              HasSubstr("0/2 nodes are available: 2 node(s) were not ready."));

  SetNodeReady("node-1", "True");
  pod = Await(kube::kPods, "default", "waits", [](const json& p) { return !NodeOf(p).empty(); });
  ASSERT_FALSE(pod.is_null());
  EXPECT_EQ(NodeOf(pod), "node-1");
  EXPECT_FALSE(AddressOf(pod).empty());
}

// The PodScheduled condition of `pod` as "<status>/<reason>: <message>", "" when it has none.
std::string Scheduled(const json& pod) {
  for (const json& c : pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == "PodScheduled") {
      return absl::StrCat(c.value("status", ""), "/", c.value("reason", ""), ": ",
                          c.value("message", ""));
    }
  }
  return "";
}

TEST_F(LocalControllersTest,
       SchedulingGates_PodWaitsSchedulingGated_GatesOnlyRemoved_PlacedOnceTheLastGoes) {
  CreateNode("node-0", "True");
  StartScheduler();
  json pod = PodObject(
      "gated",
      {{"schedulingGates", {{{"name", "example.com/quota"}}, {{"name", "example.com/topology"}}}}});
  ASSERT_TRUE(client_->Create(kube::kPods, "default", pod).ok());
  json got = Await(kube::kPods, "default", "gated", [](const json& p) {
    return absl::StartsWith(Scheduled(p), "False/SchedulingGated");
  });
  ASSERT_FALSE(got.is_null()) << "no PodScheduled=False/SchedulingGated";
  EXPECT_EQ(Scheduled(got),
            "False/SchedulingGated: Scheduling is blocked due to non-empty scheduling gates");
  EXPECT_EQ(NodeOf(got), "");

  // A gate cannot be added, nor the pod bound while it has one, as Kubernetes' API server says.
  json add = {
      {"spec",
       {{"schedulingGates", {{{"name", "example.com/quota"}}, {{"name", "example.com/new"}}}}}}};
  absl::StatusOr<json> added = client_->MergePatch(kube::kPods, "default", "gated", add);
  ASSERT_FALSE(added.ok());
  EXPECT_THAT(
      added.status().message(),
      HasSubstr("only deletion is allowed, but found new scheduling gate 'example.com/new'"));
  absl::StatusOr<json> bound =
      client_->MergePatch(kube::kPods, "default", "gated", {{"spec", {{"nodeName", "node-0"}}}});
  ASSERT_FALSE(bound.ok());
  EXPECT_THAT(bound.status().message(),
              HasSubstr("cannot be set until all schedulingGates have been cleared"));

  // One gate off: still gated. The last off: placed.
  ASSERT_TRUE(
      client_
          ->MergePatch(kube::kPods, "default", "gated",
                       {{"spec", {{"schedulingGates", {{{"name", "example.com/topology"}}}}}}})
          .ok());
  ASSERT_TRUE(client_->Get(kube::kPods, "default", "gated").ok());
  EXPECT_EQ(NodeOf(*client_->Get(kube::kPods, "default", "gated")), "");
  ASSERT_TRUE(
      client_
          ->MergePatch(kube::kPods, "default", "gated", {{"spec", {{"schedulingGates", nullptr}}}})
          .ok());
  got = Await(kube::kPods, "default", "gated", [](const json& p) { return !NodeOf(p).empty(); });
  ASSERT_FALSE(got.is_null()) << "not placed once its gates were gone";
  EXPECT_EQ(NodeOf(got), "node-0");
}

TEST_F(LocalControllersTest,
       NodeCapacity_PodsBeyondItWaitUnschedulable_PlacedWhenAPodFinishesOrGoes) {
  CreateNode("node-0", "True");
  CreateNode("node-1", "False");
  ASSERT_TRUE(client_
                  ->MergePatch(kube::kNodes, "", "node-0",
                               {{"status", {{"allocatable", {{"pods", "2"}}}}}},
                               /*status=*/true)
                  .ok());
  StartScheduler();
  // Pods seen before the node would first be marked "2 node(s) were not ready" (true then).
  ASSERT_TRUE(scheduler_->WaitForReadyNodes(1, kWait));
  for (const char* name : {"a", "b", "c", "d"}) CreatePod(name);
  for (const char* name : {"a", "b"}) {
    EXPECT_FALSE(
        Await(kube::kPods, "default", name, [](const json& p) { return !NodeOf(p).empty(); })
            .is_null())
        << name;
  }
  for (const char* name : {"c", "d"}) {
    json waits = Await(kube::kPods, "default", name,
                       [](const json& p) { return absl::StartsWith(Scheduled(p), "False/"); });
    EXPECT_EQ(
        Scheduled(waits),
        "False/Unschedulable: 0/2 nodes are available: 1 node(s) were not ready, 1 Too many pods.")
        << name;
    EXPECT_EQ(NodeOf(waits), "") << name;
  }
  // One finishes: one more fits. One goes: the last fits.
  ASSERT_TRUE(client_
                  ->MergePatch(kube::kPods, "default", "a", {{"status", {{"phase", "Succeeded"}}}},
                               /*status=*/true)
                  .ok());
  json placed =
      Await(kube::kPods, "default", "c", [](const json& p) { return !NodeOf(p).empty(); });
  EXPECT_EQ(NodeOf(placed), "node-0");
  EXPECT_EQ(NodeOf(*client_->Get(kube::kPods, "default", "d")), "");
  ASSERT_TRUE(client_->Delete(kube::kPods, "default", "b", 0).ok());
  placed = Await(kube::kPods, "default", "d", [](const json& p) { return !NodeOf(p).empty(); });
  EXPECT_EQ(NodeOf(placed), "node-0");
}

TEST_F(LocalControllersTest,
       CordonedNode_TakesNoNewPod_ItsPodsStay_UncordonedItTakesTheWaitingOne) {
  CreateNode("node-0", "True");
  CreateNode("node-1", "True");
  StartScheduler();
  ASSERT_TRUE(scheduler_->WaitForReadyNodes(2, kWait));
  CreatePod("before");
  json before =
      Await(kube::kPods, "default", "before", [](const json& p) { return !NodeOf(p).empty(); });
  ASSERT_FALSE(before.is_null());
  // What `kubectl cordon` writes: both nodes cordoned, a new pod waits naming why.
  for (const char* node : {"node-0", "node-1"}) {
    ASSERT_TRUE(
        client_->MergePatch(kube::kNodes, "", node, {{"spec", {{"unschedulable", true}}}}).ok());
  }
  CreatePod("after");
  json waits = Await(kube::kPods, "default", "after",
                     [](const json& p) { return absl::StartsWith(Scheduled(p), "False/"); });
  EXPECT_EQ(Scheduled(waits),
            "False/Unschedulable: 0/2 nodes are available: 2 node(s) were unschedulable.");
  EXPECT_EQ(NodeOf(waits), "");
  EXPECT_EQ(NodeOf(*client_->Get(kube::kPods, "default", "before")), NodeOf(before))
      << "a cordon moves no pod";
  // `kubectl uncordon` removes the field: the waiting pod goes to that node.
  ASSERT_TRUE(
      client_->MergePatch(kube::kNodes, "", "node-1", {{"spec", {{"unschedulable", nullptr}}}})
          .ok());
  json placed =
      Await(kube::kPods, "default", "after", [](const json& p) { return !NodeOf(p).empty(); });
  ASSERT_FALSE(placed.is_null()) << "not placed once node-1 was uncordoned";
  EXPECT_EQ(NodeOf(placed), "node-1");
}

TEST_F(LocalControllersTest, PodBoundByItsAuthor_GetsAnAddressOnItsNode) {
  CreateNode("node-0", "True");
  StartScheduler();
  ASSERT_TRUE(
      client_->Create(kube::kPods, "default", PodObject("pinned", {{"nodeName", "node-1"}})).ok());
  json got =
      Await(kube::kPods, "default", "pinned", [](const json& p) { return !AddressOf(p).empty(); });
  ASSERT_FALSE(got.is_null());
  EXPECT_TRUE(absl::StartsWith(AddressOf(got), "127.0.20.")) << AddressOf(got);
  EXPECT_EQ(NodeOf(got), "node-1");
}

TEST(NodeLeaseMonitorTest, SilentOnlyAfterTheGraceWithoutAChangeSeen) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  NodeLeaseMonitor m(absl::Seconds(10));
  EXPECT_FALSE(m.Silent("a", t0)) << "never seen";
  struct Step {
    absl::Duration at;
    std::string renew_time;
    bool silent_after;
  };
  // A renewal is any change of renewTime, whatever time it names (clocks may disagree).
  const Step steps[] = {
      {absl::Seconds(0), "", false},     // First seen, no Lease yet: the clock starts.
      {absl::Seconds(10), "", false},    // Exactly the grace: not yet.
      {absl::Seconds(11), "", true},     // Past it.
      {absl::Seconds(12), "T1", false},  // Renewed.
      {absl::Seconds(21), "T1", false},  // 9 s after the renewal.
      {absl::Seconds(23), "T1", true},   // 11 s after.
      {absl::Seconds(24), "T0", false},  // A renewal naming an earlier time still counts.
  };
  for (const Step& s : steps) {
    m.Observe("a", s.renew_time, t0 + s.at);
    EXPECT_EQ(m.Silent("a", t0 + s.at), s.silent_after) << "at +" << absl::FormatDuration(s.at);
  }
  m.Forget("a");
  EXPECT_FALSE(m.Silent("a", t0 + absl::Hours(1)));
}

TEST_F(LocalControllersTest,
       NodeLifecycle_LeaseStops_NodeUnknownTaintedPodsNotReady_LeaseBack_TaintsGo) {
  CreateNode("node-0", "True");
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "node-0"}, {"namespace", kNodeLeaseNamespace}}},
                {"spec", {{"renewTime", FormatRfc3339Micro(absl::Now())}}}};
  ASSERT_TRUE(client_->Create(kube::kLeases, kNodeLeaseNamespace, lease).ok());
  ASSERT_TRUE(
      client_->Create(kube::kPods, "default", PodObject("on-node-0", {{"nodeName", "node-0"}}))
          .ok());
  json running = {
      {"status",
       {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
  ASSERT_TRUE(
      client_->MergePatch(kube::kPods, "default", "on-node-0", running, /*status=*/true).ok());

  NodeLifecycleController controller(client_.get(), absl::Milliseconds(300));
  controller.Start();
  json node = Await(kube::kNodes, "", "node-0",
                    [](const json& n) { return kube::ConditionStatus(n, "Ready") == "Unknown"; });
  ASSERT_FALSE(node.is_null()) << "the node was not marked lost";
  EXPECT_THAT(node["status"].dump(), HasSubstr("NodeStatusUnknown"));
  node = Await(kube::kNodes, "", "node-0", [](const json& n) {
    return n["spec"].dump().find(kUnreachableTaint) != std::string::npos;
  });
  ASSERT_FALSE(node.is_null()) << "no unreachable taint";
  EXPECT_THAT(node["spec"]["taints"].dump(), HasSubstr("NoExecute"));
  json p = Await(kube::kPods, "default", "on-node-0", [](const json& p) {
    for (const json& c : p["status"].value("conditions", json::array())) {
      if (c.value("type", "") == "Ready") return c.value("status", "") == "False";
    }
    return false;
  });
  ASSERT_FALSE(p.is_null()) << "the lost node's pod still Ready";
  EXPECT_THAT(p["status"].dump(), HasSubstr("NodeNotReady"));
  EXPECT_FALSE(p["metadata"].contains("deletionTimestamp")) << "nothing deletes a lost node's pods";

  // The kubelet is back: it renews (every 50 ms here) and reports Ready; the taints go.
  absl::Notification back;
  std::thread kubelet([&] {
    do {
      client_
          ->MergePatch(kube::kLeases, kNodeLeaseNamespace, "node-0",
                       {{"spec", {{"renewTime", FormatRfc3339Micro(absl::Now())}}}})
          .IgnoreError();
    } while (!back.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  });
  SetNodeReady("node-0", "True");
  node = Await(kube::kNodes, "", "node-0", [](const json& n) {
    return kube::ConditionStatus(n, "Ready") == "True" &&
           (!n["spec"].contains("taints") || n["spec"]["taints"].empty());
  });
  back.Notify();
  kubelet.join();
  EXPECT_FALSE(node.is_null()) << "the unreachable taints stayed";
}

// The pods a ReplicaSet owns (by uid), as the API server has them.
std::vector<json> PodsOf(kube::KubeClient& client, const json& rs) {
  std::vector<json> out;
  const json pods = *client.List(kube::kPods, "default", "");
  for (const json& pod : pods["items"]) {
    for (const json& ref : pod["metadata"].value("ownerReferences", json::array())) {
      if (ref["uid"] == rs["metadata"]["uid"]) out.push_back(pod);
    }
  }
  return out;
}

TEST_F(LocalControllersTest,
       Deployment_ReplicaSetAndPods_ThenANewTemplateRollsWithoutDroppingBelowTheCount) {
  DeploymentController controller(client_.get());
  json deployment = json::parse(R"({
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op", "namespace": "default"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "op"}},
             "template": {"metadata": {"labels": {"app": "op"}},
                          "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}})");
  ASSERT_TRUE(client_->Create(kDeployments, "default", deployment).ok());
  auto replica_sets = [&] { return (*client_->List(kReplicaSets, "default", ""))["items"]; };
  auto mark_ready = [&](const json& rs) {
    for (const json& pod : PodsOf(*client_, rs)) {
      ASSERT_TRUE(client_
                      ->MergePatch(kube::kPods, "default", pod["metadata"]["name"],
                                   {{"status",
                                     {{"phase", "Running"},
                                      {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                                   /*status=*/true)
                      .ok());
    }
  };
  controller.Sync();  // The ReplicaSet.
  ASSERT_EQ(replica_sets().size(), 1u);
  json first = replica_sets()[0];
  const std::string hash = PodTemplateHash(deployment["spec"]["template"]);
  EXPECT_EQ(first["metadata"]["name"], "op-" + hash);
  EXPECT_EQ(first["spec"]["template"]["metadata"]["labels"][kPodTemplateHashLabel], hash);
  EXPECT_EQ(first["metadata"]["ownerReferences"][0]["kind"], "Deployment");
  controller.Sync();  // Its pods.
  std::vector<json> pods = PodsOf(*client_, first);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0]["spec"]["containers"][0]["image"], "x:1");
  EXPECT_EQ(pods[0]["metadata"]["labels"]["app"], "op");
  mark_ready(first);
  controller.Sync();  // Statuses: the ReplicaSet's.
  controller.Sync();  // The Deployment's, from it.
  json d = *client_->Get(kDeployments, "default", "op");
  EXPECT_EQ(d["status"]["readyReplicas"], 2) << d.dump(2);
  EXPECT_EQ(d["status"]["updatedReplicas"], 2);
  EXPECT_EQ(d["status"]["observedGeneration"], d["metadata"]["generation"]);
  EXPECT_EQ(d["status"]["conditions"][1]["reason"], "NewReplicaSetAvailable") << d.dump(2);

  // A new image: a second ReplicaSet at the full count; the first stays until it is all ready.
  json new_image = json::parse(
      R"({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}})");
  ASSERT_TRUE(client_->MergePatch(kDeployments, "default", "op", new_image).ok());
  controller.Sync();
  controller.Sync();
  ASSERT_EQ(replica_sets().size(), 2u);
  json second;
  for (const json& rs : replica_sets()) {
    if (rs["metadata"]["name"] != first["metadata"]["name"]) second = rs;
  }
  EXPECT_EQ(second["metadata"]["annotations"]["deployment.kubernetes.io/revision"], "2");
  EXPECT_EQ(PodsOf(*client_, second).size(), 2u);
  EXPECT_EQ(PodsOf(*client_, first).size(), 2u) << "the old pods stay until the new ones are ready";
  d = *client_->Get(kDeployments, "default", "op");
  EXPECT_EQ(d["status"]["conditions"][1]["reason"], "ReplicaSetUpdated");

  mark_ready(second);
  for (int i = 0; i < 3; ++i) controller.Sync();  // Status, scale the old one down, its pods go.
  first = *client_->Get(kReplicaSets, "default", first["metadata"]["name"]);
  EXPECT_EQ(first["spec"]["replicas"], 0);
  for (const json& pod : PodsOf(*client_, first)) {
    EXPECT_TRUE(pod["metadata"].contains("deletionTimestamp")) << pod.dump(2);
  }
}

// A ReplicaSet whose pods fail outright (their kubelet could not run them) gets replacements one
// at a time after a back-off, never a pod per pass.
TEST_F(LocalControllersTest, ReplicaSet_PodsThatFailed_NoReplacementStorm) {
  DeploymentController controller(client_.get());
  json rs = json::parse(R"({
    "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "default"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "a"}},
             "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c"}]}}}})");
  ASSERT_TRUE(client_->Create(kReplicaSets, "default", rs).ok());
  controller.Sync();
  rs = *client_->Get(kReplicaSets, "default", "rs");
  std::vector<json> pods = PodsOf(*client_, rs);
  ASSERT_EQ(pods.size(), 2u);
  for (const json& pod : pods) {
    ASSERT_TRUE(client_
                    ->MergePatch(kube::kPods, "default", pod["metadata"]["name"],
                                 {{"status", {{"phase", "Failed"}}}},
                                 /*status=*/true)
                    .ok());
  }
  for (int i = 0; i < 5; ++i) controller.Sync();
  EXPECT_EQ(PodsOf(*client_, rs).size(), 2u)
      << "the failures are 0 s old: nothing new within the back-off";
}

}  // namespace
}  // namespace cohort::local
