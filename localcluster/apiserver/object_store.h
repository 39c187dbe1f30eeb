#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "localcluster/apiserver/selector.h"

namespace cohort::local {

// A kind the API server serves: built in (pods, services, ...) or registered by a
// CustomResourceDefinition.
// A CRD's subresources.scale: where the object keeps what its Scale shows (JSON paths from the
// object's root, ".spec.replicas").
struct ScaleSubresource {
  std::string spec_replicas_path;
  std::string status_replicas_path;
  std::string label_selector_path;  // Empty: none.
};

struct ResourceType {
  std::string group;  // "" for the core API.
  std::string version;
  std::string plural;
  std::string singular;
  std::string kind;
  bool namespaced = true;
  bool status_subresource = false;
  std::vector<std::string> short_names;
  nlohmann::json printer_columns = nlohmann::json::array();  // additionalPrinterColumns.
  // A CRD version's openAPIV3Schema: writes are pruned, defaulted and validated against it
  // (schema_validation.h). Null for built-in kinds: stored as sent. Shared: a ResourceType is
  // copied for every request.
  std::shared_ptr<const nlohmann::json> schema = nullptr;
  std::vector<std::string> categories = {};              // For `kubectl get all` and the like.
  std::optional<ScaleSubresource> scale = std::nullopt;  // Served at <plural>/<name>/scale.

  std::string GroupVersion() const { return group.empty() ? version : group + "/" + version; }
  std::string Key() const { return group + "/" + plural; }  // One version per kind here.
};

// The kinds a Kubernetes API server serves without a CustomResourceDefinition (those Cohort,
// kubectl and Helm use).
std::vector<ResourceType> BuiltinTypes();

// The API server's state: objects by kind, namespace and name, one resourceVersion counter for
// all writes (as etcd's revision), a bounded history of changes for watches (an older
// resourceVersion gets 410 Gone), graceful deletion of bound pods, and ownerReference garbage
// collection. Errors: NotFound, AlreadyExists, Aborted (stale resourceVersion), InvalidArgument,
// OutOfRange (410). Thread-safe.
class ObjectStore {
 public:
  struct WatchEvent {
    int64_t version;
    std::string type;  // ADDED, MODIFIED, DELETED.
    std::shared_ptr<const nlohmann::json> object;
  };

  // Checks, and may change (defaults, pruning, field ownership), an object about to be stored,
  // given whole as it would be stored, with the object it replaces (null on create): the API
  // server's decoding and validation of a custom resource, and its managedFields. An error
  // aborts the write and is returned. Runs with the store locked: it must not call the store.
  // `status_only`: a write to the status subresource.
  using Admission = std::function<absl::Status(nlohmann::json& object,
                                               const nlohmann::json* current, bool status_only)>;

  ObjectStore(Clock* clock, size_t history = 50000);

  void AddType(const ResourceType& type);
  void RemoveType(const std::string& key);
  std::optional<ResourceType> FindType(const std::string& group, const std::string& plural) const;
  std::vector<ResourceType> Types() const;

  absl::StatusOr<nlohmann::json> Create(const ResourceType& t, const std::string& ns,
                                        nlohmann::json object, const Admission& admit = nullptr);
  absl::StatusOr<nlohmann::json> Get(const ResourceType& t, const std::string& ns,
                                     const std::string& name) const;
  // A List object of `t` in `ns` ("" = all namespaces).
  nlohmann::json List(const ResourceType& t, const std::string& ns, const Selector& labels,
                      const Selector& fields) const;
  // PUT: the whole object, or only its status when `status_only`.
  absl::StatusOr<nlohmann::json> Update(const ResourceType& t, const std::string& ns,
                                        const std::string& name, nlohmann::json object,
                                        bool status_only, const Admission& admit = nullptr);
  // A JSON merge patch (strategic merge patches are applied the same way); `admit` sees the
  // patched object.
  absl::StatusOr<nlohmann::json> Patch(const ResourceType& t, const std::string& ns,
                                       const std::string& name, const nlohmann::json& patch,
                                       bool status_only, const Admission& admit = nullptr);
  // Removes the object and garbage-collects its dependents. A pod bound to a node is only marked
  // (deletionTimestamp) unless `grace_seconds` is 0: its kubelet stops it, then deletes it with 0.
  // Returns the object as of the deletion.
  absl::StatusOr<nlohmann::json> Delete(const ResourceType& t, const std::string& ns,
                                        const std::string& name,
                                        std::optional<int64_t> grace_seconds);

  int64_t CurrentVersion() const;
  // Events of `t` in `ns` after `*after`, waiting up to `timeout` for the first one; advances
  // `*after`. OutOfRange when `*after` is older than the history kept.
  absl::StatusOr<std::vector<WatchEvent>> WaitForEvents(const ResourceType& t,
                                                        const std::string& ns, int64_t* after,
                                                        absl::Duration timeout) const;
  // For unit tests that stand in for a real cluster's timing or fixtures (tests/kube/
  // fake_kube_client.h). While paused, an owner's dependents outlive it, as under a busy garbage
  // collector; resuming collects them.
  void PauseGarbageCollection(bool paused);
  // An object created with a metadata.uid keeps it (fixtures that name their owners by uid); a
  // real API server assigns its own, as this one does by default.
  void AcceptGivenUids(bool accept);
  // Forgets the history of changes up to now, as etcd's compaction does: a watch from an older
  // resourceVersion gets 410 Gone (OutOfRange) and must list again.
  void Compact();
  // Wakes every waiting watch, now and from now on (for shutdown).
  void WakeWatches();

 private:
  using Objects = std::map<std::pair<std::string, std::string>, nlohmann::json>;  // (ns, name).

  absl::StatusOr<nlohmann::json> StoreUpdate(const ResourceType& t, const std::string& ns,
                                             const std::string& name, nlohmann::json updated,
                                             bool status_only, const std::string& expected_version,
                                             const Admission& admit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(const ResourceType& t, Objects::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<nlohmann::json> DeleteLocked(const ResourceType& t, const std::string& ns,
                                              const std::string& name,
                                              std::optional<int64_t> grace_seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectGarbage(const std::string& owner_uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `object` has owner references and every owner they name is gone.
  bool OwnersGone(const nlohmann::json& object) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(const ResourceType& t, const char* type, const nlohmann::json& object)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  const size_t history_limit_;
  mutable absl::Mutex mu_;
  std::map<std::string, ResourceType> types_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Objects> objects_ ABSL_GUARDED_BY(mu_);  // By type key.
  int64_t version_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t uid_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> uids_ ABSL_GUARDED_BY(mu_);  // Of the stored objects.
  struct Change {
    std::string type_key;
    std::string ns;
    WatchEvent event;
  };
  std::deque<Change> history_ ABSL_GUARDED_BY(mu_);
  int64_t oldest_kept_ ABSL_GUARDED_BY(mu_) = 1;  // Watches from before this get 410.
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool gc_paused_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> gone_owners_
      ABSL_GUARDED_BY(mu_);  // Deleted while collection was paused.
  bool accept_given_uids_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::local
