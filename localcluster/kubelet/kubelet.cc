#include "localcluster/kubelet/kubelet.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "localcluster/controllers/node_lifecycle.h"
#include "localcluster/controllers/scheduler.h"
#include "localcluster/kubelet/pod_worker.h"
#include "localcluster/kubelet/podman_runtime.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string PodKey(const json& pod) {
  return absl::StrCat(pod["metadata"].value("namespace", ""), "/",
                      pod["metadata"].value("name", ""));
}

// The node's Ready condition while its kubelet runs.
json KubeletReady() {
  return kube::Condition("Ready", "True", "KubeletReady", "cohort local kubelet is ready");
}

}  // namespace

Kubelet::Kubelet(kube::KubeClient* client, KubeletOptions options)
    : client_(client), options_(std::move(options)) {}

Kubelet::~Kubelet() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_heartbeat_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (informer_) informer_->Stop();
  std::map<std::string, std::unique_ptr<PodWorker>> workers;
  {
    absl::MutexLock lock(&mu_);
    workers.swap(workers_);
  }
  workers.clear();  // Each worker kills its processes.
}

std::string Kubelet::PodDir(const std::string& root_dir, const std::string& ns,
                            const std::string& pod) {
  return (fs::path(root_dir) / absl::StrCat(ns, "_", pod)).string();
}

std::string Kubelet::LogPath(const std::string& root_dir, const std::string& ns,
                             const std::string& pod, const std::string& container) {
  return (fs::path(PodDir(root_dir, ns, pod)) / absl::StrCat(container, ".log")).string();
}

absl::Status Kubelet::Start() {
  fs::create_directories(options_.root_dir);
  if (options_.runtime == ContainerRuntime::kPodman) {
    if (absl::Status s = CheckPodman(); !s.ok()) return s;
    if (options_.podman_network.empty())
      return absl::InvalidArgumentError("the podman runtime needs a podman network");
    // Pods a killed kubelet of this node left behind (its PodReaper was killed too).
    RemovePodSandboxes(kNodeLabel, NodeLabelValue(options_));
    absl::StatusOr<PodReaper> reaper = PodReaper::Start(kNodeLabel, NodeLabelValue(options_));
    if (!reaper.ok()) return reaper.status();
    reaper_ = *std::move(reaper);
  }
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata",
                {{"name", options_.node_name},
                 {"labels", {{"kubernetes.io/hostname", options_.node_name}}}}},
               {"status",
                {{"conditions", json::array()},
                 {"addresses",
                  {{{"type", "InternalIP"}, {"address", options_.node_address}},
                   {{"type", "Hostname"}, {"address", options_.node_name}}}}}}};
  kube::SetCondition(node["status"]["conditions"], KubeletReady(), absl::Now());
  if (options_.max_pods > 0) {
    node["status"]["capacity"] = {{"pods", absl::StrCat(options_.max_pods)}};
    node["status"]["allocatable"] = {{"pods", absl::StrCat(options_.max_pods)}};
  }
  absl::StatusOr<json> created = client_->Create(kube::kNodes, "", node);
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  Heartbeat();  // The Lease exists before the node counts as Ready anywhere.
  if (absl::IsAlreadyExists(created.status())) {
    LogInfo("node ", options_.node_name, " existed: reporting it Ready");
  }
  heartbeat_ = std::thread([this] {
    while (!stop_heartbeat_.WaitForNotificationWithTimeout(options_.lease_duration / 4))
      Heartbeat();
  });
  informer_ = std::make_unique<kube::Informer>(
      client_, kube::kPods, "", "",
      [this](const std::string& type, const json& pod) { OnPod(type, pod); });
  informer_->Start();
  return absl::OkStatus();
}

void Kubelet::Heartbeat() {
  const std::string& node = options_.node_name;
  json renew = {{"spec", {{"renewTime", FormatRfc3339Micro(absl::Now())}}}};
  absl::StatusOr<json> lease = client_->MergePatch(kube::kLeases, kNodeLeaseNamespace, node, renew);
  if (absl::IsNotFound(lease.status())) {
    json create = {{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata", {{"name", node}, {"namespace", kNodeLeaseNamespace}}},
                   {"spec",
                    {{"holderIdentity", node},
                     {"leaseDurationSeconds",
                      std::max<int64_t>(1, absl::ToInt64Seconds(options_.lease_duration))},
                     {"renewTime", renew["spec"]["renewTime"]}}}};
    lease = client_->Create(kube::kLeases, kNodeLeaseNamespace, create);
  }
  if (!lease.ok())
    LogWarning("node ", node, ": cannot renew its lease: ", lease.status().ToString());
  // Marked lost while this kubelet was stopped or starved: report Ready again.
  absl::StatusOr<json> current = client_->Get(kube::kNodes, "", node);
  if (!current.ok() || kube::ConditionStatus(*current, "Ready") == "True") return;
  json write = *current;
  kube::SetCondition(write["status"]["conditions"], KubeletReady(), absl::Now());
  absl::StatusOr<json> written = client_->UpdateStatus(kube::kNodes, "", write);
  if (written.ok()) LogInfo("node ", node, ": Ready again");
}

void Kubelet::OnPod(const std::string& type, const json& pod) {
  std::string uid = pod["metadata"].value("uid", "");
  std::string key = absl::StrCat(PodKey(pod), "#", uid);
  std::unique_ptr<PodWorker> finished;
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  if (type == "DELETED") {
    for (auto w = workers_.begin(); w != workers_.end(); ++w) {
      // A DELETED from a relist carries only the name.
      if (w->first == key || (uid.empty() && absl::StartsWith(w->first, key))) {
        w->second->Deleted();
        finished = std::move(w->second);
        workers_.erase(w);
        break;
      }
    }
    mu_.Unlock();
    finished.reset();  // Joins the worker outside the lock.
    mu_.Lock();
    return;
  }
  auto existing = workers_.find(key);
  if (existing != workers_.end()) {
    existing->second->Update(pod);
    return;
  }
  if (pod.value("spec", json::object()).value("nodeName", "") != options_.node_name) return;
  if (pod.value("status", json::object()).value("phase", "") == "Succeeded" ||
      pod.value("status", json::object()).value("phase", "") == "Failed") {
    return;  // Finished before this kubelet started.
  }
  // The scheduler binds a pod and gives it its address in one write; a pod bound by its author
  // gets its address in a later one.
  std::string address = pod["metadata"]
                            .value("annotations", json::object())
                            .value(Scheduler::kPodAddressAnnotation, "");
  if (address.empty()) return;
  auto worker = std::make_unique<PodWorker>(client_, options_, pod, address);
  worker->Update(pod);
  workers_[key] = std::move(worker);
}

}  // namespace cohort::local
