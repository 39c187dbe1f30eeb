#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "operator/client/kube_client.h"

namespace cohort::op::testing {

// An in-memory API server for unit tests of one class: objects by (resource, namespace, name),
// a resourceVersion per write, label-selector equality matching, AlreadyExists on duplicate
// creates and Aborted on stale status updates. Deleting an object does not garbage-collect its
// children; tests that need that use the local control plane.
class FakeKubeClient final : public KubeClient {
 public:
  using json = nlohmann::json;

  absl::StatusOr<json> Get(const Resource& r, const std::string& ns, const std::string& name) override {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(Key(r, ns, name));
    if (it == objects_.end()) return absl::NotFoundError(absl::StrCat(r.plural, " ", ns, "/", name, " not found"));
    return it->second;
  }

  absl::StatusOr<json> List(const Resource& r, const std::string& ns, const std::string& selector) override {
    absl::MutexLock lock(&mu_);
    json items = json::array();
    for (const auto& [key, obj] : objects_) {
      if (std::get<0>(key) != r.Path("") || std::get<1>(key) != ns) continue;
      if (Matches(obj, selector)) items.push_back(obj);
    }
    return json{{"items", items}, {"metadata", {{"resourceVersion", std::to_string(version_)}}}};
  }

  absl::StatusOr<json> Create(const Resource& r, const std::string& ns, const json& object) override {
    absl::MutexLock lock(&mu_);
    std::string name = object["metadata"]["name"];
    auto key = Key(r, ns, name);
    if (objects_.count(key)) return absl::AlreadyExistsError(absl::StrCat(r.plural, " ", name, " already exists"));
    json stored = object;
    stored["metadata"]["namespace"] = ns;
    stored["metadata"]["resourceVersion"] = std::to_string(++version_);
    if (!stored["metadata"].contains("uid")) stored["metadata"]["uid"] = absl::StrCat("uid-", version_);
    objects_[key] = stored;
    created_.push_back(absl::StrCat(r.plural, "/", name));
    return stored;
  }

  absl::StatusOr<json> UpdateStatus(const Resource& r, const std::string& ns, const json& object) override {
    absl::MutexLock lock(&mu_);
    ++status_writes_;
    auto it = objects_.find(Key(r, ns, object["metadata"]["name"]));
    if (it == objects_.end()) return absl::NotFoundError("not found");
    if (it->second["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]) {
      return absl::AbortedError("the object has been modified; re-read it and try again");
    }
    it->second["status"] = object["status"];
    it->second["metadata"]["resourceVersion"] = std::to_string(++version_);
    return it->second;
  }

  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name) override {
    absl::MutexLock lock(&mu_);
    if (objects_.erase(Key(r, ns, name)) == 0) return absl::NotFoundError("not found");
    deleted_.push_back(absl::StrCat(r.plural, "/", name));
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
  }
  size_t Count(const Resource& r) {
    absl::MutexLock lock(&mu_);
    size_t n = 0;
    for (const auto& [key, obj] : objects_) n += std::get<0>(key) == r.Path("") ? 1 : 0;
    return n;
  }
  std::vector<std::string> created() { absl::MutexLock lock(&mu_); return created_; }
  std::vector<std::string> deleted() { absl::MutexLock lock(&mu_); return deleted_; }
  int status_writes() { absl::MutexLock lock(&mu_); return status_writes_; }

 private:
  using ObjectKey = std::tuple<std::string, std::string, std::string>;
  static ObjectKey Key(const Resource& r, const std::string& ns, const std::string& name) {
    return {r.Path(""), ns, name};
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
  std::map<ObjectKey, json> objects_;
  int64_t version_ = 0;
  int status_writes_ = 0;
  std::vector<std::string> created_, deleted_;
};

}  // namespace cohort::op::testing
