#include "localcluster/controllers/deployment_controller.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/backoff.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "kube/json_fields.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

const json& Meta(const json& object) { return kube::Member(object, "metadata"); }
std::string NameOf(const json& object) { return kube::StringMember(Meta(object), "name"); }
std::string NamespaceOf(const json& object) {
  return kube::StringMember(Meta(object), "namespace");
}
std::string UidOf(const json& object) { return kube::StringMember(Meta(object), "uid"); }

bool Owns(const json& owner, const json& object) {
  const std::string uid = UidOf(owner);
  for (const json& ref : kube::ArrayMember(Meta(object), "ownerReferences")) {
    if (kube::StringMember(ref, "uid") == uid) return true;
  }
  return false;
}

json ControllerRef(const json& owner, const std::string& kind) {
  return json::array({{{"apiVersion", "apps/v1"},
                       {"kind", kind},
                       {"name", NameOf(owner)},
                       {"uid", UidOf(owner)},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

bool PodReady(const json& pod) {
  for (const json& c : kube::ArrayMember(kube::Member(pod, "status"), "conditions")) {
    if (kube::StringMember(c, "type") == "Ready") return kube::StringMember(c, "status") == "True";
  }
  return false;
}

// A pod that counts toward its ReplicaSet: not being deleted, not finished.
bool Active(const json& pod) {
  if (Meta(pod).contains("deletionTimestamp")) return false;
  const std::string phase = kube::StringMember(kube::Member(pod, "status"), "phase");
  return phase != "Succeeded" && phase != "Failed";
}

int64_t Replicas(const json& object) {
  return kube::IntMember(kube::Member(object, "spec"), "replicas").value_or(1);
}
int64_t StatusCount(const json& object, const char* field) {
  return kube::IntMember(kube::Member(object, "status"), field).value_or(0);
}

// Whether a field of `wanted` differs from `object`'s status.
bool StatusDiffers(const json& object, const json& wanted) {
  const json& status = kube::Member(object, "status");
  for (const auto& [key, value] : wanted.items()) {
    if (!status.is_object() || !status.contains(key) || status[key] != value) return true;
  }
  return false;
}

// The highest deployment.kubernetes.io/revision among `replica_sets` (0 without one).
int64_t LastRevision(const std::vector<const json*>& replica_sets) {
  int64_t last = 0;
  for (const json* rs : replica_sets) {
    int64_t revision = 0;
    const std::string text = kube::StringMember(kube::Member(Meta(*rs), "annotations"),
                                                "deployment.kubernetes.io/revision");
    if (absl::SimpleAtoi(text, &revision)) last = std::max(last, revision);
  }
  return last;
}

// A Deployment condition: it says when it was last updated, too.
json Condition(const std::string& type, bool status, const std::string& reason,
               const std::string& message) {
  json condition = kube::Condition(type, kube::TrueOrFalse(status), reason, message);
  condition["lastUpdateTime"] = FormatRfc3339(absl::Now());
  return condition;
}

}  // namespace

std::string PodTemplateHash(const json& pod_template) {
  // FNV-1a over the template's canonical JSON (nlohmann sorts object keys).
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : pod_template.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%010x", h & 0xffffffffffull);
}

DeploymentController::DeploymentController(kube::KubeClient* client, absl::Duration period)
    : client_(client), period_(period) {}

DeploymentController::~DeploymentController() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void DeploymentController::Start() {
  thread_ = std::thread([this] {
    do {
      Sync();
    } while (!stop_.WaitForNotificationWithTimeout(period_));
  });
}

void DeploymentController::Sync() {
  absl::StatusOr<json> deployments = client_->List(kDeployments, "", "");
  absl::StatusOr<json> replica_sets = client_->List(kReplicaSets, "", "");
  for (const auto* list : {&deployments, &replica_sets}) {
    if (!list->ok()) {
      LogWarning("deployment controller: cannot list: ", list->status().ToString());
      return;
    }
  }
  // Every pass reads every pod only when there is something to keep (a job's pods alone are not).
  if (kube::ArrayMember(*deployments, "items").empty() &&
      kube::ArrayMember(*replica_sets, "items").empty())
    return;
  absl::StatusOr<json> pods = client_->List(kube::kPods, "", "");
  if (!pods.ok()) {
    LogWarning("deployment controller: cannot list: ", pods.status().ToString());
    return;
  }
  for (const json& rs : kube::ArrayMember(*replica_sets, "items")) SyncReplicaSet(rs, *pods);
  for (const json& d : kube::ArrayMember(*deployments, "items"))
    SyncDeployment(d, *replica_sets, *pods);
}

void DeploymentController::SyncReplicaSet(const json& rs, const json& pods) {
  if (Meta(rs).contains("deletionTimestamp")) return;
  const std::string ns = NamespaceOf(rs), name = NameOf(rs);
  std::vector<json> active;
  for (const json& pod : kube::ArrayMember(pods, "items")) {
    if (NamespaceOf(pod) == ns && Owns(rs, pod) && Active(pod)) active.push_back(pod);
  }
  const int64_t want = Replicas(rs);
  const json& pod_template = kube::Member(kube::Member(rs, "spec"), "template");
  // Pods of this ReplicaSet that failed (their kubelet could not run them at all: a missing
  // service account, an init container that failed): replacements come one at a time, backing
  // off 10 s, 20 s ... 5 minutes after the newest failure, never as a storm.
  int failed = 0;
  std::string newest_failure;
  for (const json& pod : kube::ArrayMember(pods, "items")) {
    if (NamespaceOf(pod) != ns || !Owns(rs, pod) || Meta(pod).contains("deletionTimestamp"))
      continue;
    if (kube::StringMember(kube::Member(pod, "status"), "phase") != "Failed") continue;
    ++failed;
    newest_failure = std::max(newest_failure, kube::StringMember(Meta(pod), "creationTimestamp"));
  }
  int64_t missing = want - static_cast<int64_t>(active.size());
  if (failed > 0 && missing > 0) {
    // As the ReplicaSet controller's: 10 s doubling to 5 min per failed pod.
    const absl::Duration back_off = DoublingDelay(absl::Seconds(10), absl::Minutes(5), failed);
    const std::optional<absl::Time> failed_at = ParseRfc3339(newest_failure);
    missing = failed_at && absl::Now() < *failed_at + back_off ? 0 : 1;
  }
  for (int64_t i = 0; i < missing; ++i) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata",
                 {{"generateName", name + "-"},
                  {"namespace", ns},
                  {"labels", kube::Member(kube::Member(pod_template, "metadata"), "labels")},
                  {"ownerReferences", ControllerRef(rs, "ReplicaSet")}}},
                {"spec", kube::Member(pod_template, "spec")}};
    if (json annotations = kube::Member(kube::Member(pod_template, "metadata"), "annotations");
        annotations.is_object()) {
      pod["metadata"]["annotations"] = annotations;
    }
    if (absl::StatusOr<json> created = client_->Create(kube::kPods, ns, pod); !created.ok()) {
      LogWarning("replicaset ", ns, "/", name,
                 ": cannot create a pod: ", created.status().ToString());
      break;
    }
  }
  if (static_cast<int64_t>(active.size()) > want) {
    // Not ready first, then the newest.
    std::sort(active.begin(), active.end(), [](const json& a, const json& b) {
      if (PodReady(a) != PodReady(b)) return !PodReady(a);
      return kube::StringMember(Meta(a), "creationTimestamp") >
             kube::StringMember(Meta(b), "creationTimestamp");
    });
    for (size_t i = 0; i < active.size() - static_cast<size_t>(want); ++i) {
      if (absl::Status s = client_->Delete(kube::kPods, ns, NameOf(active[i]));
          !s.ok() && !absl::IsNotFound(s)) {
        LogWarning("replicaset ", ns, "/", name, ": cannot delete pod ", NameOf(active[i]), ": ",
                   s.ToString());
      }
    }
  }
  int64_t ready = 0;
  for (const json& pod : active) ready += PodReady(pod) ? 1 : 0;
  json status = {{"replicas", static_cast<int64_t>(active.size())},
                 {"fullyLabeledReplicas", static_cast<int64_t>(active.size())},
                 {"readyReplicas", ready},
                 {"availableReplicas", ready},
                 {"observedGeneration", kube::IntMember(Meta(rs), "generation").value_or(1)}};
  if (StatusDiffers(rs, status)) {
    if (absl::StatusOr<json> r =
            client_->MergePatch(kReplicaSets, ns, name, {{"status", status}}, /*status=*/true);
        !r.ok() && !absl::IsNotFound(r.status())) {
      LogWarning("replicaset ", ns, "/", name,
                 ": cannot update its status: ", r.status().ToString());
    }
  }
}

void DeploymentController::SyncDeployment(const json& d, const json& replica_sets,
                                          const json& pods) {
  if (Meta(d).contains("deletionTimestamp")) return;
  const std::string ns = NamespaceOf(d), name = NameOf(d);
  const json& spec = kube::Member(d, "spec");
  json pod_template = kube::Member(spec, "template");
  const std::string hash = PodTemplateHash(pod_template);
  const std::string new_name = absl::StrCat(name, "-", hash);
  const int64_t want = Replicas(d);
  const bool recreate = kube::StringMember(kube::Member(spec, "strategy"), "type") == "Recreate";

  const json* current = nullptr;
  std::vector<const json*> old;
  for (const json& rs : kube::ArrayMember(replica_sets, "items")) {
    if (NamespaceOf(rs) != ns || !Owns(d, rs)) continue;
    if (NameOf(rs) == new_name) {
      current = &rs;
    } else {
      old.push_back(&rs);
    }
  }
  auto scale = [&](const json& rs, int64_t replicas) {
    if (Replicas(rs) == replicas) return;
    if (absl::StatusOr<json> r =
            client_->MergePatch(kReplicaSets, ns, NameOf(rs), {{"spec", {{"replicas", replicas}}}});
        !r.ok() && !absl::IsNotFound(r.status())) {
      LogWarning("deployment ", ns, "/", name, ": cannot scale ", NameOf(rs), ": ",
                 r.status().ToString());
    }
  };
  int64_t old_pods = 0;
  for (const json* rs : old) {
    for (const json& pod : kube::ArrayMember(pods, "items"))
      old_pods += NamespaceOf(pod) == ns && Owns(*rs, pod) ? 1 : 0;
  }
  if (current == nullptr) {
    if (recreate && old_pods > 0) {
      for (const json* rs : old) scale(*rs, 0);
    } else {
      pod_template["metadata"]["labels"][kPodTemplateHashLabel] = hash;
      json selector = kube::Member(spec, "selector");
      selector["matchLabels"][kPodTemplateHashLabel] = hash;
      json rs = {
          {"apiVersion", "apps/v1"},
          {"kind", "ReplicaSet"},
          {"metadata",
           {{"name", new_name},
            {"namespace", ns},
            {"labels", pod_template["metadata"]["labels"]},
            {"annotations",
             {{"deployment.kubernetes.io/revision", absl::StrCat(LastRevision(old) + 1)}}},
            {"ownerReferences", ControllerRef(d, "Deployment")}}},
          {"spec", {{"replicas", want}, {"selector", selector}, {"template", pod_template}}}};
      if (absl::StatusOr<json> r = client_->Create(kReplicaSets, ns, rs); !r.ok()) {
        // AlreadyExists here is a ReplicaSet of that name this Deployment does not own.
        LogWarning("deployment ", ns, "/", name, ": cannot create ReplicaSet ", new_name, ": ",
                   r.status().ToString());
      }
    }
  } else if (recreate && old_pods > 0) {
    for (const json* rs : old)
      scale(*rs, 0);  // Back to an earlier template: the others stop first.
  } else {
    scale(*current, want);
    // The new version is all ready: the old ones go.
    if (StatusCount(*current, "readyReplicas") >= want) {
      for (const json* rs : old) scale(*rs, 0);
    }
  }

  int64_t replicas = 0, ready = 0;
  for (const json* rs : old) {
    replicas += StatusCount(*rs, "replicas");
    ready += StatusCount(*rs, "readyReplicas");
  }
  const int64_t updated = current != nullptr ? StatusCount(*current, "replicas") : 0;
  const int64_t updated_ready = current != nullptr ? StatusCount(*current, "readyReplicas") : 0;
  replicas += updated;
  ready += updated_ready;
  const bool complete =
      current != nullptr && updated == want && updated_ready == want && replicas == want;
  json status = {{"observedGeneration", kube::IntMember(Meta(d), "generation").value_or(1)},
                 {"replicas", replicas},
                 {"updatedReplicas", updated},
                 {"readyReplicas", ready},
                 {"availableReplicas", ready},
                 {"unavailableReplicas", std::max<int64_t>(0, want - ready)}};
  json conditions = kube::Member(d, "status", "conditions");
  const absl::Time now = absl::Now();
  bool changed = kube::SetCondition(
      conditions,
      ready >= want ? Condition("Available", true, "MinimumReplicasAvailable",
                                "Deployment has minimum availability.")
                    : Condition("Available", false, "MinimumReplicasUnavailable",
                                "Deployment does not have minimum availability."),
      now);
  changed |= kube::SetCondition(
      conditions,
      complete
          ? Condition("Progressing", true, "NewReplicaSetAvailable",
                      absl::StrCat("ReplicaSet \"", new_name, "\" has successfully progressed."))
          : Condition("Progressing", true, "ReplicaSetUpdated",
                      absl::StrCat("ReplicaSet \"", new_name, "\" is progressing.")),
      now);
  if (changed || StatusDiffers(d, status)) {
    status["conditions"] = conditions;
    if (absl::StatusOr<json> r =
            client_->MergePatch(kDeployments, ns, name, {{"status", status}}, /*status=*/true);
        !r.ok() && !absl::IsNotFound(r.status())) {
      LogWarning("deployment ", ns, "/", name,
                 ": cannot update its status: ", r.status().ToString());
    }
  }
}

}  // namespace cohort::local
