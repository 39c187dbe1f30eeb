#pragma once

#include <set>
#include <utility>

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kube/kube_client.h"

namespace cohort::kube::testing {

// An in-memory API server for unit tests of one class: objects by (resource, namespace, name),
// a resourceVersion per write, label-selector equality matching, AlreadyExists on duplicate
// creates and Aborted on stale updates, and a log of watch events that Compact() can forget
// (a watch from before it gets 410 Gone). Deleting an object does not garbage-collect its
// children; tests that need that use the local control plane.
class FakeKubeClient final : public KubeClient {
 public:
  using json = nlohmann::json;

  absl::StatusOr<json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    absl::MutexLock lock(&mu_);
    Note("get", r);
    if (!fail_every_call_.ok()) return fail_every_call_;
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return absl::NotFoundError(absl::StrCat(r.plural, " ", ns, "/", name, " not found"));
    return it->second;
  }

  absl::StatusOr<json> List(const Resource& r, const std::string& ns, const std::string& selector,
                            ListFields fields = ListFields::kAll) override {
    absl::MutexLock lock(&mu_);
    Note("list", r);
    if (!fail_every_call_.ok()) return fail_every_call_;
    json items = json::array();
    for (const auto& [key, obj] : objects_) {
      if (std::get<0>(key) != r.Path("") || std::get<1>(key) != ns) continue;
      if (!Matches(obj, selector)) continue;
      items.push_back(obj);
      if (fields == ListFields::kWithoutSpec) {
        nlohmann::json kept = nlohmann::json::object();
        for (const char* field : {"nodeName", "schedulingGates"}) {
          if (obj.contains("spec") && obj["spec"].is_object() && obj["spec"].contains(field)) {
            kept[field] = obj["spec"][field];
          }
        }
        items.back().erase("spec");
        if (!kept.empty()) items.back()["spec"] = kept;
      }
    }
    return json{{"items", items}, {"metadata", {{"resourceVersion", std::to_string(version_)}}}};
  }

  absl::StatusOr<json> Create(const Resource& r, const std::string& ns, const json& object) override {
    absl::MutexLock lock(&mu_);
    Note("create", r);
    if (!fail_every_call_.ok()) return fail_every_call_;
    std::string name = object["metadata"]["name"];
    auto key = Key(r, ns, name);
    if (objects_.count(key)) return absl::AlreadyExistsError(absl::StrCat(r.plural, " ", name, " already exists"));
    json stored = object;
    stored["metadata"]["namespace"] = ns;
    stored["metadata"]["resourceVersion"] = std::to_string(++version_);
    if (!stored["metadata"].contains("uid")) stored["metadata"]["uid"] = absl::StrCat("uid-", version_);
    objects_[key] = stored;
    created_.push_back(absl::StrCat(r.plural, "/", name));
    Record(r, "ADDED", stored);
    return stored;
  }

  absl::StatusOr<json> UpdateStatus(const Resource& r, const std::string& ns, const json& object) override {
    absl::MutexLock lock(&mu_);
    Note("update", r, "/status");
    if (!fail_every_call_.ok()) return fail_every_call_;
    ++status_writes_;
    auto it = objects_.find(Key(r, ns, object["metadata"]["name"]));
    if (it == objects_.end()) return absl::NotFoundError("not found");
    if (it->second["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]) {
      return absl::AbortedError("the object has been modified; re-read it and try again");
    }
    it->second["status"] = object["status"];
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    Record(r, "MODIFIED", it->second);
    return it->second;
  }

  absl::StatusOr<json> Update(const Resource& r, const std::string& ns, const json& object) override {
    absl::MutexLock lock(&mu_);
    Note("update", r);
    if (!fail_every_call_.ok()) return fail_every_call_;
    auto it = objects_.find(Key(r, ns, object["metadata"]["name"]));
    if (it == objects_.end()) return absl::NotFoundError("not found");
    if (it->second["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]) {
      return absl::AbortedError("the object has been modified; re-read it and try again");
    }
    json status = it->second.value("status", json());
    it->second = object;
    if (!status.is_null()) it->second["status"] = status;
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    Record(r, "MODIFIED", it->second);
    return it->second;
  }

  absl::StatusOr<json> MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                  const json& patch, bool status = false) override {
    absl::MutexLock lock(&mu_);
    Note("patch", r, status ? "/status" : "");
    if (!fail_every_call_.ok()) return fail_every_call_;
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return absl::NotFoundError("not found");
    if (status) {
      it->second["status"].merge_patch(patch.value("status", json::object()));
    } else {
      json keep = it->second.value("status", json());
      it->second.merge_patch(patch);
      if (!keep.is_null()) it->second["status"] = keep;
    }
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    Record(r, "MODIFIED", it->second);
    return it->second;
  }

  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      std::optional<int64_t> grace_period_seconds = std::nullopt) override {
    absl::MutexLock lock(&mu_);
    Note("delete", r);
    if (!fail_every_call_.ok()) return fail_every_call_;
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return absl::NotFoundError("not found");
    json gone = it->second;
    objects_.erase(it);
    gone["metadata"]["resourceVersion"] = std::to_string(++version_);
    deleted_.push_back(absl::StrCat(r.plural, "/", name));
    Record(r, "DELETED", gone);
    return absl::OkStatus();
  }

  // Delivers the logged events after options.resource_version, waiting up to options.timeout
  // (real time) for the first one, then ends the stream as a server would.
  absl::Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const json&)>& on_event) override {
    int64_t from = options.resource_version.empty() ? -1 : std::stoll(options.resource_version);
    std::vector<json> batch;
    {
      absl::MutexLock lock(&mu_);
      ++watches_;
      Note("watch", r);
      if (from < 0) from = version_;
      if (from < compacted_) {
        return absl::OutOfRangeError(absl::StrCat("too old resource version: ", from, " (", compacted_, ")"));
      }
      auto pending = [&] {
        for (const auto& e : log_) {
          if (e.version > from) return true;
        }
        return closed_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&pending), options.timeout);
      for (const auto& e : log_) {
        if (e.version <= from || e.path != r.Path("")) continue;
        if (!ns.empty() && e.event["object"]["metadata"].value("namespace", "") != ns) continue;
        if (!Matches(e.event["object"], options.label_selector)) continue;
        batch.push_back(e.event);
      }
      if (options.bookmarks) {
        batch.push_back({{"type", "BOOKMARK"},
                         {"object", {{"metadata", {{"resourceVersion", std::to_string(version_)}}}}}});
      }
    }
    for (const json& e : batch) {
      if (!on_event(e)) return absl::CancelledError("watch cancelled");
    }
    return absl::OkStatus();
  }

  // Test helpers.
  json& Object(const Resource& r, const std::string& ns, const std::string& name) {
    absl::MutexLock lock(&mu_);
    return objects_.at(Key(r, ns, name));
  }
  // Changes an object as another actor would (bumps its resourceVersion).
  void Modify(const Resource& r, const std::string& ns, const std::string& name,
              const std::function<void(json&)>& change) {
    absl::MutexLock lock(&mu_);
    json& obj = objects_.at(Key(r, ns, name));
    change(obj);
    obj["metadata"]["resourceVersion"] = std::to_string(++version_);
    Record(r, "MODIFIED", obj);
  }
  // Forgets the watch history up to now: a watch from an older version gets 410 Gone.
  void Compact() {
    absl::MutexLock lock(&mu_);
    compacted_ = version_;
    log_.clear();
  }
  // Ends every waiting watch at once (and makes later ones return without waiting).
  void CloseWatches() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  int watches() { absl::MutexLock lock(&mu_); return watches_; }
  size_t Count(const Resource& r) {
    absl::MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& [key, obj] : objects_) n += std::get<0>(key) == r.Path("") ? 1 : 0;
    return n;
  }
  std::vector<std::string> created() { absl::MutexLock lock(&mu_); return created_; }
  std::vector<std::string> deleted() { absl::MutexLock lock(&mu_); return deleted_; }
  int status_writes() { absl::MutexLock lock(&mu_); return status_writes_; }
  // The API calls made since the last TakeCalls(), as "verb group/resource[/status]" (core
  // group ""), for checking RBAC rules against what the code does.
  std::set<std::string> TakeCalls() {
    absl::MutexLock lock(&mu_);
    return std::exchange(calls_, {});
  }

 // Every call fails with `status` (e.g. Unavailable: the API server is unreachable) until it is
  // OK again.
  void FailEveryCall(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_every_call_ = std::move(status);
  }
  int calls_made() {
    absl::MutexLock lock(&mu_);
    return calls_made_;
  }

 private:
  void Note(const char* verb, const Resource& r, const std::string& subresource = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++calls_made_;
    calls_.insert(absl::StrCat(verb, " ", r.group, "/", r.plural, subresource));
  }

  using ObjectKey = std::tuple<std::string, std::string, std::string>;
  static ObjectKey Key(const Resource& r, const std::string& ns, const std::string& name) {
    return {r.Path(""), ns, name};
  }
  void Record(const Resource& r, const char* type, const json& obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    log_.push_back({r.Path(""), version_, {{"type", type}, {"object", obj}}});
  }
  static bool Matches(const json& obj, const std::string& selector) {
    if (selector.empty()) return true;
    const json& labels = obj["metadata"].value("labels", json::object());
    for (absl::string_view term : absl::StrSplit(selector, ',')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(term, '=');
      if (!labels.contains(kv.first) || labels[kv.first] != kv.second) return false;
    }
    return true;
  }

  absl::Mutex mu_;
  absl::Status fail_every_call_ ABSL_GUARDED_BY(mu_);
  int calls_made_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<ObjectKey, json> objects_;
  int64_t version_ = 0;
  std::set<std::string> calls_ ABSL_GUARDED_BY(mu_);
  int status_writes_ = 0;
  struct LoggedEvent {
    std::string path;
    int64_t version;
    json event;
  };
  std::vector<LoggedEvent> log_;
  int64_t compacted_ = 0;
  bool closed_ = false;
  int watches_ = 0;
  std::vector<std::string> created_, deleted_;
};

}  // namespace cohort::kube::testing
