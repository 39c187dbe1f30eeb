#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "kube/kube_client.h"
#include "localcluster/apiserver/object_store.h"
#include "localcluster/apiserver/selector.h"

namespace cohort::kube::testing {

// A KubeClient over the local API server's ObjectStore, without HTTP, for unit tests of one
// class (the reconciler, leader election, informers): the objects behave as the end-to-end
// tests' API server keeps them (resourceVersions, Aborted on a stale write, the status
// subresource, set-based label selectors, ownerReference garbage collection, 410 Gone after
// Compact(), a Secret's stringData written into data), as controller-runtime's fake client sits
// on client-go's object tracker. Adds what tests need to look and to break things: the calls
// made, failing every call, ending watches, pausing garbage collection; and an object created
// with a uid keeps it (fixtures name their owners by uid).
// Kinds that are not built in (a CRD's) are served as namespaced kinds with a status
// subresource.
class FakeKubeClient final : public KubeClient {
 public:
  using json = nlohmann::json;

  FakeKubeClient() : store_(Clock::Real()) {
    for (const local::ResourceType& t : local::BuiltinTypes()) store_.AddType(t);
    store_.AcceptGivenUids(true);  // Fixtures name their owners by uid.
  }

  absl::StatusOr<json> Get(const Resource& r, const std::string& ns,
                           const std::string& name) override {
    if (absl::Status s = Call("get", r); !s.ok()) return s;
    return store_.Get(TypeOf(r), ns, name);
  }

  absl::StatusOr<json> List(const Resource& r, const std::string& ns, const std::string& selector,
                            ListFields fields = ListFields::kAll) override {
    if (absl::Status s = Call("list", r); !s.ok()) return s;
    absl::StatusOr<local::Selector> labels = local::Selector::ParseLabels(selector);
    if (!labels.ok()) return labels.status();
    json list = store_.List(TypeOf(r), ns, *labels, *local::Selector::ParseFields(""));
    if (fields == ListFields::kWithoutSpec) {
      for (json& item : list["items"]) {
        json kept = json::object();
        for (const char* field : {"nodeName", "schedulingGates"}) {
          if (item.contains("spec") && item["spec"].is_object() && item["spec"].contains(field)) {
            kept[field] = item["spec"][field];
          }
        }
        item.erase("spec");
        if (!kept.empty()) item["spec"] = kept;
      }
    }
    return list;
  }

  absl::StatusOr<json> Create(const Resource& r, const std::string& ns,
                              const json& object) override {
    if (absl::Status s = Call("create", r); !s.ok()) return s;
    absl::StatusOr<json> created = store_.Create(TypeOf(r, &object), ns, object);
    if (created.ok()) Remember(Change::kCreated, r, *created);
    return created;
  }

  absl::StatusOr<json> UpdateStatus(const Resource& r, const std::string& ns,
                                    const json& object) override {
    if (absl::Status s = Call("update", r, "/status"); !s.ok()) return s;
    {
      absl::MutexLock lock(&mu_);
      ++status_writes_;
    }
    return store_.Update(TypeOf(r), ns, NameOf(object), object, /*status_only=*/true);
  }

  absl::StatusOr<json> Update(const Resource& r, const std::string& ns,
                              const json& object) override {
    if (absl::Status s = Call("update", r); !s.ok()) return s;
    return store_.Update(TypeOf(r), ns, NameOf(object), object, /*status_only=*/false);
  }

  absl::StatusOr<json> MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                  const json& patch, bool status = false) override {
    if (absl::Status s = Call("patch", r, status ? "/status" : ""); !s.ok()) return s;
    return store_.Patch(TypeOf(r), ns, name, patch, status);
  }

  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      std::optional<int64_t> grace_period_seconds = std::nullopt) override {
    if (absl::Status s = Call("delete", r); !s.ok()) return s;
    absl::StatusOr<json> deleted = store_.Delete(TypeOf(r), ns, name, grace_period_seconds);
    if (deleted.ok()) Remember(Change::kDeleted, r, *deleted);
    return deleted.status();
  }

  // The changes after options.resource_version, waiting up to options.timeout (real time) for
  // the first change of any kind, then a bookmark, then the end of the stream as a server's
  // timeout would end it.
  absl::Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const json&)>& on_event) override {
    if (absl::Status s = Call("watch", r); !s.ok()) return s;
    {
      absl::MutexLock lock(&mu_);
      ++watches_;
    }
    absl::StatusOr<local::Selector> labels = local::Selector::ParseLabels(options.label_selector);
    if (!labels.ok()) return labels.status();
    int64_t after = store_.CurrentVersion();
    if (!options.resource_version.empty() && !absl::SimpleAtoi(options.resource_version, &after)) {
      return absl::InvalidArgumentError(
          absl::StrCat("resourceVersion '", options.resource_version, "'"));
    }
    absl::StatusOr<std::vector<local::ObjectStore::WatchEvent>> events =
        store_.WaitForEvents(TypeOf(r), ns, &after, options.timeout);
    if (!events.ok()) return events.status();
    for (const local::ObjectStore::WatchEvent& e : *events) {
      if (!labels->Matches(*e.object)) continue;
      if (!on_event(json{{"type", e.type}, {"object", *e.object}}))
        return absl::CancelledError("watch cancelled");
    }
    if (options.bookmarks &&
        !on_event(json{{"type", "BOOKMARK"},
                       {"object", {{"metadata", {{"resourceVersion", absl::StrCat(after)}}}}}})) {
      return absl::CancelledError("watch cancelled");
    }
    return absl::OkStatus();
  }

  // Test helpers.
  // The object as stored; null when there is none.
  json Object(const Resource& r, const std::string& ns, const std::string& name) {
    absl::StatusOr<json> object = store_.Get(TypeOf(r), ns, name);
    return object.ok() ? *object : json();
  }
  // Changes an object as another actor would: a write of it and one of its status (each bumps
  // its resourceVersion when it changes something).
  void Modify(const Resource& r, const std::string& ns, const std::string& name,
              const std::function<void(json&)>& change) {
    const local::ResourceType type = TypeOf(r);
    absl::StatusOr<json> object = store_.Get(type, ns, name);
    if (!object.ok()) return;
    json changed = *object;
    change(changed);
    // The object, then (a kind with a status subresource keeps its status on the first write)
    // the status; a write that changes nothing is no event.
    absl::StatusOr<json> written = store_.Update(type, ns, name, changed, /*status_only=*/false);
    if (written.ok() && type.status_subresource && changed.contains("status")) {
      json status = *written;
      status["status"] = changed["status"];
      store_.Update(type, ns, name, status, /*status_only=*/true).IgnoreError();
    }
  }
  // While paused, a deleted owner's dependents stay, as under a busy garbage collector;
  // resuming collects them.
  void PauseGarbageCollection(bool paused) { store_.PauseGarbageCollection(paused); }
  // Forgets the watch history up to now: a watch from an older version gets 410 Gone.
  void Compact() { store_.Compact(); }
  // Ends every waiting watch at once (and makes later ones return without waiting).
  void CloseWatches() { store_.WakeWatches(); }
  int watches() {
    absl::MutexLock lock(&mu_);
    return watches_;
  }
  size_t Count(const Resource& r) {
    return store_
        .List(TypeOf(r), "", *local::Selector::ParseLabels(""),
              *local::Selector::ParseFields(""))["items"]
        .size();
  }
  // "<plural>/<name>" of every object created, and of every object deleted (a dependent the
  // garbage collector took is not listed).
  std::vector<std::string> created() {
    absl::MutexLock lock(&mu_);
    return created_;
  }
  std::vector<std::string> deleted() {
    absl::MutexLock lock(&mu_);
    return deleted_;
  }
  int status_writes() {
    absl::MutexLock lock(&mu_);
    return status_writes_;
  }
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
  // Calls written as TakeCalls() names them ("create /pods") fail with `status` until it is OK
  // again; other calls go through.
  void FailCalls(const std::string& call, absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (status.ok()) {
      fail_calls_.erase(call);
    } else {
      fail_calls_[call] = std::move(status);
    }
  }
  int calls_made() {
    absl::MutexLock lock(&mu_);
    return calls_made_;
  }

 private:
  // Notes the call; the failure every call gets, if any.
  absl::Status Call(const char* verb, const Resource& r, const std::string& subresource = "") {
    absl::MutexLock lock(&mu_);
    ++calls_made_;
    std::string call = absl::StrCat(verb, " ", r.group, "/", r.plural, subresource);
    auto failing = fail_calls_.find(call);
    calls_.insert(std::move(call));
    if (failing != fail_calls_.end() && fail_every_call_.ok()) return failing->second;
    return fail_every_call_;
  }
  // The store's kind for `r`; a kind it does not know is added (named after `object`'s kind when
  // one is created).
  local::ResourceType TypeOf(const Resource& r, const json* object = nullptr) {
    if (std::optional<local::ResourceType> known = store_.FindType(r.group, r.plural); known)
      return *known;
    local::ResourceType added{r.group,
                              r.version,
                              r.plural,
                              r.plural,
                              r.plural,
                              /*namespaced=*/true,
                              /*status_subresource=*/true,
                              {}};
    if (object != nullptr && object->is_object() && (*object).value("kind", "") != "")
      added.kind = (*object)["kind"];
    store_.AddType(added);
    return added;
  }
  static std::string NameOf(const json& object) {
    return object.is_object() && object.contains("metadata") && object["metadata"].is_object()
               ? object["metadata"].value("name", "")
               : "";
  }
  // Records "<plural>/<name>" in created_ or deleted_ (the list named under the lock, not passed by
  // reference without it: the thread-safety analysis holds tests to the annotations too).
  enum class Change { kCreated, kDeleted };
  void Remember(Change change, const Resource& r, const json& object) {
    absl::MutexLock lock(&mu_);
    (change == Change::kCreated ? created_ : deleted_)
        .push_back(absl::StrCat(r.plural, "/", NameOf(object)));
  }

  local::ObjectStore store_;
  absl::Mutex mu_;
  absl::Status fail_every_call_ ABSL_GUARDED_BY(mu_);
  int calls_made_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Status> fail_calls_ ABSL_GUARDED_BY(mu_);
  int status_writes_ ABSL_GUARDED_BY(mu_) = 0;
  int watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> created_ ABSL_GUARDED_BY(mu_), deleted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::kube::testing
