#include "localcluster/apiserver/object_store.h"

#include <tuple>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/rfc3339.h"
#include "common/token.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// As the real API server names an object in errors (kubectl adds the namespace itself).
std::string Describe(const ResourceType& t, const std::string& name) {
  return absl::StrCat(t.plural, " \"", name, "\"");
}

// Everything but metadata and status: a change here bumps metadata.generation.
json SpecPart(const json& object) {
  json copy = object;
  copy.erase("metadata");
  copy.erase("status");
  return copy;
}

}  // namespace

ObjectStore::ObjectStore(Clock* clock, size_t history) : clock_(clock), history_limit_(history) {}

void ObjectStore::AddType(const ResourceType& type) {
  absl::MutexLock lock(&mu_);
  types_[type.Key()] = type;
}

void ObjectStore::RemoveType(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto objects = objects_.find(key);
  if (objects != objects_.end()) {
    const ResourceType& t = types_[key];
    while (!objects->second.empty()) Remove(t, objects->second.begin());
  }
  types_.erase(key);
}

std::optional<ResourceType> ObjectStore::FindType(const std::string& group,
                                                  const std::string& plural) const {
  absl::MutexLock lock(&mu_);
  auto it = types_.find(group + "/" + plural);
  if (it == types_.end()) return std::nullopt;
  return it->second;
}

std::vector<ResourceType> ObjectStore::Types() const {
  absl::MutexLock lock(&mu_);
  std::vector<ResourceType> out;
  for (const auto& [key, t] : types_) out.push_back(t);
  return out;
}

int64_t ObjectStore::CurrentVersion() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

void ObjectStore::Record(const ResourceType& t, const char* type, const json& object) {
  history_.push_back({t.Key(),
                      object["metadata"].value("namespace", ""),
                      {version_, type, std::make_shared<const json>(object)}});
  while (history_.size() > history_limit_) {
    oldest_kept_ = history_.front().event.version;
    history_.pop_front();
  }
}

absl::StatusOr<json> ObjectStore::Create(const ResourceType& t, const std::string& ns, json object,
                                         const Admission& admit) {
  if (!object.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  if (!object["metadata"].is_object()) object["metadata"] = json::object();
  std::string name = object["metadata"].value("name", "");
  if (name.empty() && object["metadata"].contains("generateName")) {
    name = absl::StrCat(object["metadata"]["generateName"].get<std::string>(),
                        GenerateToken().substr(0, 5));
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(t.kind, ": metadata.name is required"));
  }
  if (t.namespaced && ns.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.kind, " is namespaced: create it in a namespace"));
  }
  // An empty metadata.namespace is the request's, as Kubernetes fills it in (typed clients send
  // "").
  if (object["metadata"].contains("namespace") && object["metadata"]["namespace"] == "") {
    object["metadata"].erase("namespace");
  }
  if (object["metadata"].contains("namespace") && object["metadata"]["namespace"] != ns &&
      t.namespaced) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata.namespace \"", object["metadata"]["namespace"].get<std::string>(),
                     "\" does not match the request's namespace \"", ns, "\""));
  }
  absl::MutexLock lock(&mu_);
  Objects& objects = objects_[t.Key()];
  if (objects.count({ns, name})) {
    return absl::AlreadyExistsError(absl::StrCat(Describe(t, name), " already exists"));
  }
  object["metadata"]["name"] = name;
  if (t.namespaced) object["metadata"]["namespace"] = ns;
  object["apiVersion"] = t.GroupVersion();
  object["kind"] = t.kind;
  if (admit) {
    if (absl::Status s = admit(object, /*current=*/nullptr, /*status_only=*/false); !s.ok())
      return s;
  }
  json& meta = object["metadata"];
  const bool given_uid = accept_given_uids_ && meta.contains("uid") && meta["uid"].is_string() &&
                         !meta["uid"].get<std::string>().empty() &&
                         !uids_.count(meta["uid"].get<std::string>());
  if (!given_uid) meta["uid"] = absl::StrCat(GenerateToken().substr(0, 8), "-", ++uid_counter_);
  meta["resourceVersion"] = absl::StrCat(++version_);
  meta["creationTimestamp"] = FormatRfc3339(clock_->Now());
  meta["generation"] = 1;
  meta.erase("deletionTimestamp");
  // Secrets: stringData is write-only and lands, base64-encoded, in data.
  if (t.kind == "Secret" && object.contains("stringData")) {
    for (auto& [key, value] : object["stringData"].items()) {
      object["data"][key] = absl::Base64Escape(value.get<std::string>());
    }
    object.erase("stringData");
  }
  if (t.kind == "Pod" && !object.contains("status")) object["status"] = {{"phase", "Pending"}};
  objects[{ns, name}] = object;
  uids_.insert(meta["uid"].get<std::string>());
  Record(t, "ADDED", object);
  // Kubernetes' garbage collector deletes an object whose owners are all gone: one a controller
  // made from a stale view (a ReplicaSet for a Deployment just deleted, a pod for that
  // ReplicaSet) does not outlive them. Here it goes at once; the create itself succeeds, as there.
  if (!gc_paused_ && OwnersGone(object))
    DeleteLocked(t, ns, name, /*grace_seconds=*/0).IgnoreError();
  return object;
}

bool ObjectStore::OwnersGone(const json& object) const {
  const json& refs = object["metadata"].value("ownerReferences", json::array());
  if (!refs.is_array() || refs.empty()) return false;
  for (const json& ref : refs) {
    // A reference without a uid names nothing this store can check: kept.
    if (!ref.is_object() || !ref.contains("uid") || !ref["uid"].is_string()) return false;
    const std::string& uid = ref["uid"].get_ref<const std::string&>();
    if (uid.empty() || uids_.contains(uid)) return false;
  }
  return true;
}

absl::StatusOr<json> ObjectStore::Get(const ResourceType& t, const std::string& ns,
                                      const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto objects = objects_.find(t.Key());
  if (objects != objects_.end()) {
    auto it = objects->second.find({ns, name});
    if (it != objects->second.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrCat(Describe(t, name), " not found"));
}

json ObjectStore::List(const ResourceType& t, const std::string& ns, const Selector& labels,
                       const Selector& fields) const {
  absl::MutexLock lock(&mu_);
  json items = json::array();
  auto objects = objects_.find(t.Key());
  if (objects != objects_.end()) {
    for (const auto& [key, obj] : objects->second) {
      if (!ns.empty() && key.first != ns) continue;
      if (labels.Matches(obj) && fields.Matches(obj)) items.push_back(obj);
    }
  }
  return {{"apiVersion", t.GroupVersion()},
          {"kind", t.kind + "List"},
          {"metadata", {{"resourceVersion", absl::StrCat(version_)}}},
          {"items", std::move(items)}};
}

absl::StatusOr<json> ObjectStore::StoreUpdate(const ResourceType& t, const std::string& ns,
                                              const std::string& name, json updated,
                                              bool status_only, const std::string& expected_version,
                                              const Admission& admit) {
  auto& objects = objects_[t.Key()];
  auto it = objects.find({ns, name});
  if (it == objects.end())
    return absl::NotFoundError(absl::StrCat(Describe(t, name), " not found"));
  json& current = it->second;
  if (!expected_version.empty() && expected_version != current["metadata"]["resourceVersion"]) {
    return absl::AbortedError(
        absl::StrCat("Operation cannot be fulfilled on ", Describe(t, name),
                     ": the object has been modified; please apply your changes to "
                     "the latest version and try again"));
  }
  json result;
  if (status_only) {
    result = current;
    if (updated.contains("status")) result["status"] = updated["status"];
  } else {
    result = std::move(updated);
    // Fields the server owns.
    for (const char* field : {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "namespace", "name"}) {
      if (current["metadata"].contains(field)) {
        result["metadata"][field] = current["metadata"][field];
      } else {
        result["metadata"].erase(field);
      }
    }
    if (t.status_subresource) {
      if (current.contains("status")) {
        result["status"] = current["status"];
      } else {
        result.erase("status");
      }
    }
    result["apiVersion"] = t.GroupVersion();
    result["kind"] = t.kind;
  }
  if (admit) {
    if (absl::Status s = admit(result, &current, status_only); !s.ok()) return s;
  }
  // After admission: a default it filled in is part of the spec.
  if (!status_only && SpecPart(result) != SpecPart(current)) {
    result["metadata"]["generation"] = current["metadata"].value("generation", 1) + 1;
  }
  if (result == current) return current;  // A no-op write does not bump the version.
  result["metadata"]["resourceVersion"] = absl::StrCat(++version_);
  current = result;
  Record(t, "MODIFIED", current);
  return current;
}

absl::StatusOr<json> ObjectStore::Update(const ResourceType& t, const std::string& ns,
                                         const std::string& name, json object, bool status_only,
                                         const Admission& admit) {
  if (!object.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  if (object.contains("metadata") && object["metadata"].contains("name") &&
      object["metadata"]["name"] != name) {
    return absl::InvalidArgumentError("metadata.name does not match the name in the URL");
  }
  std::string expected =
      object.contains("metadata") ? object["metadata"].value("resourceVersion", "") : "";
  absl::MutexLock lock(&mu_);
  return StoreUpdate(t, ns, name, std::move(object), status_only, expected, admit);
}

absl::StatusOr<json> ObjectStore::Patch(const ResourceType& t, const std::string& ns,
                                        const std::string& name, const json& patch,
                                        bool status_only, const Admission& admit) {
  if (!patch.is_object()) return absl::InvalidArgumentError("a merge patch must be a JSON object");
  absl::MutexLock lock(&mu_);
  auto& objects = objects_[t.Key()];
  auto it = objects.find({ns, name});
  if (it == objects.end())
    return absl::NotFoundError(absl::StrCat(Describe(t, name), " not found"));
  json patched = it->second;
  patched.merge_patch(patch);
  std::string expected =
      patch.contains("metadata") ? patch["metadata"].value("resourceVersion", "") : "";
  return StoreUpdate(t, ns, name, std::move(patched), status_only, expected, admit);
}

void ObjectStore::Remove(const ResourceType& t, Objects::iterator it) {
  json gone = std::move(it->second);
  objects_[t.Key()].erase(it);
  uids_.erase(gone["metadata"].value("uid", ""));
  gone["metadata"]["resourceVersion"] = absl::StrCat(++version_);
  Record(t, "DELETED", gone);
  CollectGarbage(gone["metadata"].value("uid", ""));
}

absl::StatusOr<json> ObjectStore::DeleteLocked(const ResourceType& t, const std::string& ns,
                                               const std::string& name,
                                               std::optional<int64_t> grace_seconds) {
  auto& objects = objects_[t.Key()];
  auto it = objects.find({ns, name});
  if (it == objects.end())
    return absl::NotFoundError(absl::StrCat(Describe(t, name), " not found"));
  json& obj = it->second;
  bool bound = t.kind == "Pod" && obj.contains("spec") && obj["spec"].is_object() &&
               !obj["spec"].value("nodeName", "").empty();
  if (bound && grace_seconds.value_or(1) != 0) {
    if (obj["metadata"].contains("deletionTimestamp")) return obj;  // Already terminating.
    int64_t grace = grace_seconds.value_or(obj["spec"].value("terminationGracePeriodSeconds", 30));
    obj["metadata"]["deletionTimestamp"] = FormatRfc3339(clock_->Now() + absl::Seconds(grace));
    obj["metadata"]["deletionGracePeriodSeconds"] = grace;
    obj["metadata"]["resourceVersion"] = absl::StrCat(++version_);
    Record(t, "MODIFIED", obj);
    return obj;
  }
  json copy = obj;
  Remove(t, it);
  return copy;
}

absl::StatusOr<json> ObjectStore::Delete(const ResourceType& t, const std::string& ns,
                                         const std::string& name,
                                         std::optional<int64_t> grace_seconds) {
  absl::MutexLock lock(&mu_);
  return DeleteLocked(t, ns, name, grace_seconds);
}

void ObjectStore::CollectGarbage(const std::string& owner_uid) {
  if (owner_uid.empty()) return;
  if (gc_paused_) {
    gone_owners_.push_back(owner_uid);
    return;
  }
  std::vector<std::tuple<ResourceType, std::string, std::string>> dependents;
  for (const auto& [key, objects] : objects_) {
    for (const auto& [id, obj] : objects) {
      const json refs = obj["metadata"].value("ownerReferences", json::array());
      if (!refs.is_array()) continue;
      for (const json& ref : refs) {
        if (ref.is_object() && ref.contains("uid") && ref["uid"] == owner_uid) {
          dependents.emplace_back(types_[key], id.first, id.second);
        }
      }
    }
  }
  for (const auto& [t, ns, name] : dependents)
    DeleteLocked(t, ns, name, std::nullopt).IgnoreError();
}

absl::StatusOr<std::vector<ObjectStore::WatchEvent>> ObjectStore::WaitForEvents(
    const ResourceType& t, const std::string& ns, int64_t* after, absl::Duration timeout) const {
  std::string key = t.Key();
  absl::MutexLock lock(&mu_);
  if (*after < oldest_kept_ - 1) {
    return absl::OutOfRangeError(
        absl::StrCat("too old resource version: ", *after, " (", oldest_kept_ - 1, ")"));
  }
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ > *after || woken_; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<WatchEvent> out;
  // History is ordered by version: skip to the first change after `*after`.
  auto it = std::lower_bound(history_.begin(), history_.end(), *after + 1,
                             [](const Change& c, int64_t v) { return c.event.version < v; });
  for (; it != history_.end(); ++it) {
    if (it->type_key == key && (ns.empty() || it->ns == ns)) out.push_back(it->event);
  }
  *after = version_;
  return out;
}

void ObjectStore::PauseGarbageCollection(bool paused) {
  absl::MutexLock lock(&mu_);
  gc_paused_ = paused;
  if (paused) return;
  for (const std::string& uid : std::exchange(gone_owners_, {})) CollectGarbage(uid);
}

void ObjectStore::AcceptGivenUids(bool accept) {
  absl::MutexLock lock(&mu_);
  accept_given_uids_ = accept;
}

void ObjectStore::Compact() {
  absl::MutexLock lock(&mu_);
  history_.clear();
  oldest_kept_ = version_ + 1;
}

void ObjectStore::WakeWatches() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

std::vector<ResourceType> BuiltinTypes() {
  auto core = [](std::string plural, std::string singular, std::string kind, bool namespaced,
                 bool status, std::vector<std::string> short_names) {
    return ResourceType{"", "v1", plural, singular, kind, namespaced, status, short_names};
  };
  std::vector<ResourceType> types = {
      core("namespaces", "namespace", "Namespace", false, true, {"ns"}),
      core("nodes", "node", "Node", false, true, {"no"}),
      core("pods", "pod", "Pod", true, true, {"po"}),
      core("services", "service", "Service", true, true, {"svc"}),
      core("endpoints", "endpoints", "Endpoints", true, false, {"ep"}),
      core("secrets", "secret", "Secret", true, false, {}),
      core("configmaps", "configmap", "ConfigMap", true, false, {"cm"}),
      core("events", "event", "Event", true, false, {"ev"}),
      core("serviceaccounts", "serviceaccount", "ServiceAccount", true, false, {"sa"}),
  };
  for (ResourceType& t : types) {
    if (t.kind == "Pod" || t.kind == "Service") t.categories = {"all"};
  }
  types.push_back({"coordination.k8s.io", "v1", "leases", "lease", "Lease", true, false, {}});
  // What a chart installs: the operator's Deployment and its RBAC (the deployment controller
  // keeps ReplicaSets and pods; rbac.h authorizes service accounts by these objects).
  types.push_back(
      {"apps", "v1", "deployments", "deployment", "Deployment", true, true, {"deploy"}});
  types.push_back({"apps", "v1", "replicasets", "replicaset", "ReplicaSet", true, true, {"rs"}});
  types.back().categories = {"all"};
  types[types.size() - 2].categories = {"all"};
  // `kubectl auth can-i` asks a SelfSubjectAccessReview; a webhook, a SubjectAccessReview.
  types.push_back({"authorization.k8s.io",
                   "v1",
                   "selfsubjectaccessreviews",
                   "selfsubjectaccessreview",
                   "SelfSubjectAccessReview",
                   false,
                   false,
                   {}});
  types.push_back({"authorization.k8s.io",
                   "v1",
                   "subjectaccessreviews",
                   "subjectaccessreview",
                   "SubjectAccessReview",
                   false,
                   false,
                   {}});
  for (auto [plural, singular, kind, namespaced] :
       std::vector<std::tuple<std::string, std::string, std::string, bool>>{
           {"roles", "role", "Role", true},
           {"rolebindings", "rolebinding", "RoleBinding", true},
           {"clusterroles", "clusterrole", "ClusterRole", false},
           {"clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", false}}) {
    types.push_back(
        {"rbac.authorization.k8s.io", "v1", plural, singular, kind, namespaced, false, {}});
  }
  types.push_back({"apiextensions.k8s.io",
                   "v1",
                   "customresourcedefinitions",
                   "customresourcedefinition",
                   "CustomResourceDefinition",
                   false,
                   true,
                   {"crd", "crds"}});
  return types;
}

}  // namespace cohort::local
