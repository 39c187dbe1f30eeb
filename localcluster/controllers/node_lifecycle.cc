#include "localcluster/controllers/node_lifecycle.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "kube/json_fields.h"
#include "kube/retry.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

std::string NameOf(const json& object) {
  return kube::StringMember(kube::Member(object, "metadata"), "name");
}

bool HasUnreachableTaint(const json& node) {
  for (const json& t : kube::ArrayMember(kube::Member(node, "spec"), "taints")) {
    if (kube::StringMember(t, "key") == kUnreachableTaint) return true;
  }
  return false;
}

}  // namespace

void NodeLeaseMonitor::Observe(const std::string& node, const std::string& renew_time,
                               absl::Time now) {
  auto it = seen_.find(node);
  if (it == seen_.end() || it->second.renew_time != renew_time) seen_[node] = Seen{renew_time, now};
}

bool NodeLeaseMonitor::Silent(const std::string& node, absl::Time now) const {
  auto it = seen_.find(node);
  return it != seen_.end() && now - it->second.at > grace_;
}

NodeLifecycleController::NodeLifecycleController(kube::KubeClient* client, absl::Duration grace)
    : client_(client), grace_(grace), monitor_(grace) {}

NodeLifecycleController::~NodeLifecycleController() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void NodeLifecycleController::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void NodeLifecycleController::Loop() {
  // Kubernetes checks every 5 s against a 40 s grace; here an eighth of the grace, so a lost
  // node is marked at most 12.5% late.
  const absl::Duration period = std::max(absl::Milliseconds(100), grace_ / 8);
  do {
    Check();
  } while (!stop_.WaitForNotificationWithTimeout(period));
}

void NodeLifecycleController::Check() {
  absl::StatusOr<json> leases = client_->List(kube::kLeases, kNodeLeaseNamespace, "");
  absl::StatusOr<json> nodes = client_->List(kube::kNodes, "", "");
  if (!leases.ok() || !nodes.ok()) {
    LogWarning("node lifecycle: cannot list ", leases.ok() ? "nodes: " : "node leases: ",
               (leases.ok() ? nodes.status() : leases.status()).ToString());
    return;
  }
  std::map<std::string, std::string> renewed;
  for (const json& lease : kube::ArrayMember(*leases, "items")) {
    renewed[NameOf(lease)] = kube::StringMember(kube::Member(lease, "spec"), "renewTime");
  }
  const absl::Time now = absl::Now();
  for (const json& node : kube::ArrayMember(*nodes, "items")) {
    const std::string name = NameOf(node);
    monitor_.Observe(name, renewed[name], now);
    const std::string ready = kube::ConditionStatus(node, "Ready");
    if (monitor_.Silent(name, now)) {
      if (ready != "Unknown") MarkLost(name);
    } else if (ready == "True" && HasUnreachableTaint(node)) {
      RemoveTaints(node);
    }
  }
}

void NodeLifecycleController::MarkLost(const std::string& node) {
  LogWarning("node ", node, ": no lease renewal for ", absl::FormatDuration(grace_),
             ": Ready=Unknown, tainted unreachable, its pods not ready");
  absl::Status s = kube::UpdateStatusWith(client_, kube::kNodes, "", node, [](json& n) {
    if (kube::ConditionStatus(n, "Ready") == "Unknown") return false;
    return kube::SetCondition(n["status"]["conditions"],
                              kube::Condition("Ready", "Unknown", "NodeStatusUnknown",
                                              "Kubelet stopped posting node status."),
                              absl::Now());
  });
  if (!s.ok()) LogWarning("node ", node, ": cannot mark it lost: ", s.ToString());
  absl::StatusOr<json> current = client_->Get(kube::kNodes, "", node);
  if (current.ok() && !HasUnreachableTaint(*current)) {
    json taints = kube::ArrayMember(kube::Member(*current, "spec"), "taints");
    for (const char* effect : {"NoSchedule", "NoExecute"}) {
      taints.push_back({{"key", kUnreachableTaint},
                        {"effect", effect},
                        {"timeAdded", FormatRfc3339(absl::Now())}});
    }
    absl::StatusOr<json> patched =
        client_->MergePatch(kube::kNodes, "", node, {{"spec", {{"taints", taints}}}});
    if (!patched.ok())
      LogWarning("node ", node, ": cannot taint it: ", patched.status().ToString());
  }
  absl::StatusOr<json> pods =
      client_->List(kube::kPods, "", "", kube::KubeClient::ListFields::kWithoutSpec);
  if (!pods.ok()) return;
  for (const json& pod : kube::ArrayMember(*pods, "items")) {
    if (kube::StringMember(kube::Member(pod, "spec"), "nodeName") != node) continue;
    const json& meta = kube::Member(pod, "metadata");
    absl::Status marked = kube::UpdateStatusWith(
        client_, kube::kPods, kube::StringMember(meta, "namespace"),
        kube::StringMember(meta, "name"), [&](json& p) {
          std::string phase = kube::StringMember(kube::Member(p, "status"), "phase");
          if (phase == "Succeeded" || phase == "Failed") return false;
          if (kube::ConditionStatus(p, "Ready") == "False") return false;
          return kube::SetCondition(p["status"]["conditions"],
                                    kube::Condition("Ready", "False", "NodeNotReady",
                                                    absl::StrCat("node ", node, " is not ready")),
                                    absl::Now());
        });
    if (!marked.ok() && !absl::IsNotFound(marked))
      LogWarning("pod ", NameOf(pod), ": ", marked.ToString());
  }
}

void NodeLifecycleController::RemoveTaints(const json& node) {
  json taints = json::array();
  for (const json& t : kube::ArrayMember(kube::Member(node, "spec"), "taints")) {
    if (kube::StringMember(t, "key") != kUnreachableTaint) taints.push_back(t);
  }
  LogInfo("node ", NameOf(node), " renews its lease again: unreachable taints removed");
  absl::StatusOr<json> patched =
      client_->MergePatch(kube::kNodes, "", NameOf(node), {{"spec", {{"taints", taints}}}});
  if (!patched.ok())
    LogWarning("node ", NameOf(node), ": cannot remove its taints: ", patched.status().ToString());
}

}  // namespace cohort::local
