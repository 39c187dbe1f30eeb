#include "localcluster/controllers/scheduler.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "kube/json_fields.h"
#include "localcluster/controllers/node_lifecycle.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

std::string PodKey(const json& pod) {
  const json& meta = kube::Member(pod, "metadata");
  return absl::StrCat(kube::StringMember(meta, "namespace"), "/", kube::StringMember(meta, "name"));
}

std::string Uid(const json& object) {
  return kube::StringMember(kube::Member(object, "metadata"), "uid");
}

bool Finished(const json& pod) {
  std::string phase = kube::StringMember(kube::Member(pod, "status"), "phase");
  return phase == "Succeeded" || phase == "Failed";
}

// Neither finished nor being deleted: it counts toward its node's load.
bool Running(const json& pod) {
  return !Finished(pod) && !kube::Member(pod, "metadata").contains("deletionTimestamp");
}

bool Gated(const json& pod) {
  return !kube::Member(pod, "spec").value("schedulingGates", json::array()).empty();
}

// A Node's status.allocatable.pods (else capacity.pods), as a number; nullopt: none given.
std::optional<int64_t> MaxPods(const json& node) {
  for (const char* field : {"allocatable", "capacity"}) {
    const json& pods = kube::Member(kube::Member(kube::Member(node, "status"), field), "pods");
    int64_t n = 0;
    if (pods.is_number_integer()) return pods.get<int64_t>();
    if (pods.is_string() && absl::SimpleAtoi(pods.get<std::string>(), &n)) return n;
  }
  return std::nullopt;
}

// The cluster DNS names a pod answers to.
std::vector<std::string> DnsNames(const json& pod) {
  const json& spec = kube::Member(pod, "spec");
  std::string hostname = kube::StringMember(spec, "hostname");
  std::string subdomain = kube::StringMember(spec, "subdomain");
  std::string ns = kube::StringMember(kube::Member(pod, "metadata"), "namespace");
  if (hostname.empty() || subdomain.empty())
    return {kube::StringMember(kube::Member(pod, "metadata"), "name")};
  std::string base = absl::StrCat(hostname, ".", subdomain, ".", ns, ".svc");
  return {base, base + ".cluster.local", absl::StrCat(hostname, ".", subdomain, ".", ns),
          absl::StrCat(hostname, ".", subdomain)};
}

}  // namespace

Scheduler::Scheduler(kube::KubeClient* client, SchedulerOptions options)
    : client_(client), options_(std::move(options)) {}

Scheduler::~Scheduler() {
  if (pods_) pods_->Stop();
  if (nodes_) nodes_->Stop();
}

void Scheduler::Start() {
  {
    absl::MutexLock lock(&mu_);
    WriteHostsFile();
  }
  nodes_ = std::make_unique<kube::Informer>(
      client_, kube::kNodes, "", "",
      [this](const std::string& type, const json& n) { OnNode(type, n); });
  pods_ = std::make_unique<kube::Informer>(
      client_, kube::kPods, "", "",
      [this](const std::string& type, const json& p) { OnPod(type, p); });
  nodes_->Start();
  pods_->Start();
}

bool Scheduler::WaitForReadyNodes(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(ready_nodes_.size()) >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void Scheduler::OnNode(const std::string& type, const json& node) {
  std::string name = kube::StringMember(kube::Member(node, "metadata"), "name");
  absl::MutexLock lock(&mu_);
  const std::optional<int64_t> max_pods = type == "DELETED" ? std::nullopt : MaxPods(node);
  const bool room_changed =
      max_pods != (max_pods_.contains(name) ? std::optional(max_pods_[name]) : std::nullopt);
  if (max_pods) {
    max_pods_[name] = *max_pods;
  } else {
    max_pods_.erase(name);
  }
  bool ready = type != "DELETED" && kube::ConditionStatus(node, "Ready") == "True" &&
               options_.subnets.contains(name);
  // `kubectl cordon` sets spec.unschedulable; `kubectl uncordon` clears it.
  const bool cordoned =
      type != "DELETED" && kube::Member(kube::Member(node, "spec"), "unschedulable") == true;
  bool cordon_changed = false;
  if (cordoned != cordoned_.contains(name)) {
    cordon_changed = true;
    if (cordoned) {
      cordoned_.insert(name);
      LogInfo("node ", name, " is cordoned (spec.unschedulable): no new pods go there");
    } else {
      cordoned_.erase(name);
      if (type != "DELETED") LogInfo("node ", name, " is uncordoned: new pods may go there");
    }
  }
  bool was_ready = ready_nodes_.contains(name);
  if (ready == was_ready) {
    if ((room_changed || cordon_changed) && ready) ScheduleWaiting();
    return;
  }
  if (ready) {
    ready_nodes_.insert(name);
    LogInfo("node ", name, " is Ready");
    ScheduleWaiting();
  } else {
    ready_nodes_.erase(name);
    LogWarning("node ", name, type == "DELETED" ? " was removed" : " is not Ready",
               ": no new pods go there");
  }
}

void Scheduler::OnPod(const std::string& type, const json& pod) {
  const std::string key = PodKey(pod);
  const std::string uid = Uid(pod);
  absl::MutexLock lock(&mu_);
  auto placed = placed_.find(key);
  // A DELETED from a relist carries only the name; a pod of the same name and another uid is
  // a successor (the old one is gone).
  if (type == "DELETED" || (placed != placed_.end() && !uid.empty() && placed->second.uid != uid) ||
      (waiting_.contains(key) && Uid(waiting_[key]) != uid)) {
    Forget(key);
    if (type == "DELETED") return;
    placed = placed_.end();
  }
  if (placed != placed_.end()) {
    placed->second.running = Running(pod);
    const bool occupied = std::exchange(placed->second.occupies, !Finished(pod));
    if (occupied && !placed->second.occupies) ScheduleWaiting();  // Its node has room again.
    return;
  }
  const json& meta = kube::Member(pod, "metadata");
  std::string node = kube::StringMember(kube::Member(pod, "spec"), "nodeName");
  if (!node.empty()) {
    // Bound before this scheduler saw it: by us, before a relist (keep its address out of
    // others' hands), or by the pod's author (give it an address on its node).
    std::string address =
        kube::StringMember(kube::Member(meta, "annotations"), kPodAddressAnnotation);
    if (address.empty() && options_.subnets.contains(node) && Running(pod)) {
      Place(key, pod, node).IgnoreError();  // Logged; its next event tries again.
      return;
    }
    if (!address.empty()) {
      used_addresses_.insert(address);
      names_[address] = DnsNames(pod);
      WriteHostsFile();
    }
    placed_[key] = Placed{.uid = uid,
                          .node = node,
                          .address = address,
                          .running = Running(pod),
                          .occupies = !Finished(pod)};
    return;
  }
  if (!Running(pod)) {
    waiting_.erase(key);  // Deleted while it waited.
    return;
  }
  waiting_[key] = pod;
  ScheduleWaiting();
}

void Scheduler::ScheduleWaiting() {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (Gated(it->second)) {
      // The real scheduler's words for it.
      MarkUnscheduled(it->first, it->second, "SchedulingGated",
                      "Scheduling is blocked due to non-empty scheduling gates");
      ++it;
    } else if (Bind(it->first, it->second)) {
      it = waiting_.erase(it);
    } else {
      MarkUnscheduled(it->first, it->second, "Unschedulable", UnschedulableMessage());
      ++it;
    }
  }
}

std::set<std::string> Scheduler::FullNodes() const {
  std::map<std::string, int64_t> occupied;
  for (const auto& [key, p] : placed_) {
    if (p.occupies) ++occupied[p.node];
  }
  std::set<std::string> full;
  for (const auto& [node, max] : max_pods_) {
    if (occupied[node] >= max) full.insert(node);
  }
  return full;
}

std::string Scheduler::ChooseNode() const {
  std::map<std::string, int> load;
  for (const std::string& node : ready_nodes_) load[node] = 0;
  for (const auto& [key, p] : placed_) {
    if (p.running && load.contains(p.node)) ++load[p.node];
  }
  const std::set<std::string> full = FullNodes();
  std::string best;
  for (const auto& [node, pods] : load) {
    if (full.contains(node) || cordoned_.contains(node)) continue;
    if (best.empty() || pods < load[best]) best = node;
  }
  return best;
}

std::string Scheduler::UnschedulableMessage() const {
  const int nodes = static_cast<int>(options_.subnets.size());
  int cordoned = 0;
  for (const std::string& node : cordoned_) cordoned += ready_nodes_.contains(node);
  int full = 0;
  for (const std::string& node : FullNodes())
    full += ready_nodes_.contains(node) && !cordoned_.contains(node);
  const int not_ready = nodes - static_cast<int>(ready_nodes_.size());
  // Each node counted once, under the first reason that rules it out.
  std::vector<std::string> reasons;
  if (not_ready > 0) reasons.push_back(absl::StrCat(not_ready, " node(s) were not ready"));
  if (cordoned > 0) reasons.push_back(absl::StrCat(cordoned, " node(s) were unschedulable"));
  if (full > 0) reasons.push_back(absl::StrCat(full, " Too many pods"));
  if (reasons.empty()) reasons.push_back("no node has room");
  return absl::StrCat("0/", nodes, " nodes are available: ", absl::StrJoin(reasons, ", "), ".");
}

std::string Scheduler::AllocateAddress(const std::string& node) {
  const PodSubnet& subnet = options_.subnets.at(node);
  const int capacity = (subnet.last - subnet.first + 1) * 253;
  int& next = next_address_[node];
  for (int tried = 0; tried < capacity; ++tried) {
    int n = next++ % capacity;
    std::string address = absl::StrCat(subnet.prefix, subnet.first + n / 253, ".", 2 + n % 253);
    if (used_addresses_.insert(address).second) return address;
  }
  return "";
}

bool Scheduler::Bind(const std::string& key, const json& pod) {
  std::string node = ChooseNode();
  if (node.empty()) return false;
  absl::Status placed = Place(key, pod, node);
  // Gone meanwhile: its DELETED event follows. Anything else: the next event retries.
  return placed.ok() || absl::IsNotFound(placed);
}

absl::Status Scheduler::Place(const std::string& key, const json& pod, const std::string& node) {
  std::string address = AllocateAddress(node);
  if (address.empty()) {
    LogWarning("node ", node, " has no pod address left for ", key);
    return absl::ResourceExhaustedError(absl::StrCat("node ", node, " has no pod address left"));
  }
  const json& meta = kube::Member(pod, "metadata");
  // Named before it is bound: its kubelet may start it at once, and its peers resolve it.
  names_[address] = DnsNames(pod);
  WriteHostsFile();
  json place = {{"metadata", {{"annotations", {{kPodAddressAnnotation, address}}}}},
                {"spec", {{"nodeName", node}}}};
  absl::StatusOr<json> placed = client_->MergePatch(
      kube::kPods, kube::StringMember(meta, "namespace"), kube::StringMember(meta, "name"), place);
  if (!placed.ok()) {
    used_addresses_.erase(address);
    names_.erase(address);
    WriteHostsFile();
    if (!absl::IsNotFound(placed.status())) {
      LogWarning("placing pod ", key, " on ", node, ": ", placed.status().ToString());
    }
    return placed.status();
  }
  placed_[key] =
      Placed{.uid = Uid(pod), .node = node, .address = address, .running = true, .occupies = true};
  marked_unscheduled_.erase(key);
  return absl::OkStatus();
}

void Scheduler::MarkUnscheduled(const std::string& key, const json& pod, const std::string& reason,
                                const std::string& message) {
  std::string& marked = marked_unscheduled_[key];
  const std::string now_marked = absl::StrCat(reason, ": ", message);
  if (marked == now_marked) return;
  marked = now_marked;
  const json& meta = kube::Member(pod, "metadata");
  // A merge patch replaces the whole list: the pod's other conditions go with it.
  json conditions = kube::Member(pod, "status", "conditions");
  kube::SetCondition(conditions, kube::Condition("PodScheduled", "False", reason, message),
                     absl::Now());
  json patch = {{"status", {{"conditions", conditions}}}};
  absl::StatusOr<json> written =
      client_->MergePatch(kube::kPods, kube::StringMember(meta, "namespace"),
                          kube::StringMember(meta, "name"), patch, /*status=*/true);
  if (!written.ok() && !absl::IsNotFound(written.status())) {
    LogWarning("marking pod ", key, " ", reason, ": ", written.status().ToString());
    marked_unscheduled_.erase(key);  // Written again on the pod's next event.
  }
}

void Scheduler::Forget(const std::string& key) {
  waiting_.erase(key);
  marked_unscheduled_.erase(key);
  auto placed = placed_.find(key);
  if (placed == placed_.end()) return;
  const bool freed = placed->second.occupies;
  if (!placed->second.address.empty()) {
    used_addresses_.erase(placed->second.address);
    names_.erase(placed->second.address);
    WriteHostsFile();
  }
  placed_.erase(placed);
  if (freed) ScheduleWaiting();  // Its node has room again.
}

void Scheduler::WriteHostsFile() {
  if (options_.hosts_file.empty()) return;
  std::string text;
  for (const auto& [address, names] : names_)
    absl::StrAppend(&text, address, " ", absl::StrJoin(names, " "), "\n");
  {
    std::ofstream out(options_.hosts_file + ".tmp");
    out << text;
  }
  std::error_code ec;
  std::filesystem::rename(options_.hosts_file + ".tmp", options_.hosts_file, ec);
  if (ec) LogWarning("cannot write the hosts file ", options_.hosts_file, ": ", ec.message());
}

}  // namespace cohort::local
