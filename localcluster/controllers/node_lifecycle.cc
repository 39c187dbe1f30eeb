#include "localcluster/controllers/node_lifecycle.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/json_fields.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

std::string NameOf(const json& object) { return kube::StringMember(kube::Member(object, "metadata"), "name"); }

bool HasUnreachableTaint(const json& node) {
  for (const json& t : kube::ArrayMember(kube::Member(node, "spec"), "taints")) {
    if (kube::StringMember(t, "key") == kUnreachableTaint) return true;
  }
  return false;
}

// Reads `object`, lets `change` edit it (false: nothing to write), and writes its status with
// the version read, again on a conflict.
absl::Status UpdateStatusWith(kube::KubeClient* client, const kube::Resource& r, const std::string& ns,
                              const std::string& name, const std::function<bool(json&)>& change) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    absl::StatusOr<json> object = client->Get(r, ns, name);
    if (!object.ok()) return object.status();
    if (!change(*object)) return absl::OkStatus();
    absl::StatusOr<json> written = client->UpdateStatus(r, ns, *object);
    if (!absl::IsAborted(written.status())) return written.status();
  }
  return absl::AbortedError(absl::StrCat(r.plural, "/", name, " kept changing while its status was written"));
}

// Sets the condition of `type` in status.conditions; false if it already had this status.
bool SetCondition(json& object, const std::string& type, const std::string& status, const std::string& reason,
                  const std::string& message) {
  json& conditions = object["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  json condition = {{"type", type}, {"status", status}, {"reason", reason}, {"message", message},
                    {"lastTransitionTime", FormatRfc3339(absl::Now())}};
  for (json& c : conditions) {
    if (kube::StringMember(c, "type") != type) continue;
    if (kube::StringMember(c, "status") == status) return false;
    c = condition;
    return true;
  }
  conditions.push_back(condition);
  return true;
}

}  // namespace

std::string NodeReadyStatus(const json& node) {
  for (const json& c : kube::ArrayMember(kube::Member(node, "status"), "conditions")) {
    if (kube::StringMember(c, "type") == "Ready") return kube::StringMember(c, "status");
  }
  return "";
}

void NodeLeaseMonitor::Observe(const std::string& node, const std::string& renew_time, absl::Time now) {
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
    const std::string ready = NodeReadyStatus(node);
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
  absl::Status s = UpdateStatusWith(client_, kube::kNodes, "", node, [](json& n) {
    return SetCondition(n, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.");
  });
  if (!s.ok()) LogWarning("node ", node, ": cannot mark it lost: ", s.ToString());
  absl::StatusOr<json> current = client_->Get(kube::kNodes, "", node);
  if (current.ok() && !HasUnreachableTaint(*current)) {
    json taints = kube::ArrayMember(kube::Member(*current, "spec"), "taints");
    for (const char* effect : {"NoSchedule", "NoExecute"}) {
      taints.push_back({{"key", kUnreachableTaint}, {"effect", effect}, {"timeAdded", FormatRfc3339(absl::Now())}});
    }
    absl::StatusOr<json> patched = client_->MergePatch(kube::kNodes, "", node, {{"spec", {{"taints", taints}}}});
    if (!patched.ok()) LogWarning("node ", node, ": cannot taint it: ", patched.status().ToString());
  }
  absl::StatusOr<json> pods = client_->List(kube::kPods, "", "", kube::KubeClient::ListFields::kWithoutSpec);
  if (!pods.ok()) return;
  for (const json& pod : kube::ArrayMember(*pods, "items")) {
    if (kube::StringMember(kube::Member(pod, "spec"), "nodeName") != node) continue;
    const json& meta = kube::Member(pod, "metadata");
    absl::Status marked = UpdateStatusWith(
        client_, kube::kPods, kube::StringMember(meta, "namespace"), kube::StringMember(meta, "name"), [&](json& p) {
          std::string phase = kube::StringMember(kube::Member(p, "status"), "phase");
          if (phase == "Succeeded" || phase == "Failed") return false;
          return SetCondition(p, "Ready", "False", "NodeNotReady", absl::StrCat("node ", node, " is not ready"));
        });
    if (!marked.ok() && !absl::IsNotFound(marked)) LogWarning("pod ", NameOf(pod), ": ", marked.ToString());
  }
}

void NodeLifecycleController::RemoveTaints(const json& node) {
  json taints = json::array();
  for (const json& t : kube::ArrayMember(kube::Member(node, "spec"), "taints")) {
    if (kube::StringMember(t, "key") != kUnreachableTaint) taints.push_back(t);
  }
  LogInfo("node ", NameOf(node), " renews its lease again: unreachable taints removed");
  absl::StatusOr<json> patched = client_->MergePatch(kube::kNodes, "", NameOf(node), {{"spec", {{"taints", taints}}}});
  if (!patched.ok()) LogWarning("node ", NameOf(node), ": cannot remove its taints: ", patched.status().ToString());
}

}  // namespace cohort::local
