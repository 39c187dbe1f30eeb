#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/resource.h"

namespace cohort::kube {

// A watch's position and filter. The server ends the stream after `timeout` (it is sent as
// timeoutSeconds) and, with `bookmarks`, sends BOOKMARK events that advance the resourceVersion
// without a change, so a resumed watch rarely starts from a version the server has forgotten.
struct WatchOptions {
  std::string label_selector;
  std::string resource_version;  // Events after this version; "" means from now.
  absl::Duration timeout = absl::Minutes(5);
  bool bookmarks = true;
};

// 410 Gone: the resourceVersion a watch asked for is older than the server keeps. The caller
// must list again (which gives a current version) and watch from there.
inline bool IsGone(const absl::Status& s) { return absl::IsOutOfRange(s); }

// The API calls the operator makes. Errors map HTTP statuses onto one meaning each: NotFound
// (404), AlreadyExists (409 on create), Aborted (409 conflict on update: re-read and retry),
// InvalidArgument (400/422), PermissionDenied (403), Unauthenticated (401), OutOfRange (410
// Gone, see IsGone), Unavailable (429/5xx/connection errors, after the client's own retries).
// Implementations: the HTTP client (against a real cluster or the local control plane) and an
// in-memory fake for unit tests. Thread-safe.
class KubeClient {
 public:
  virtual ~KubeClient() = default;

  virtual absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                             const std::string& name) = 0;
  // A list object ("items", "metadata.resourceVersion"); `label_selector` like "a=b,c=d".
  // kWithoutSpec drops each item's "spec" but its nodeName and schedulingGates while the response
  // is parsed: for
  // callers that read only metadata, status and the node, it keeps a 1,000-pod list from costing
  // megabytes.
  enum class ListFields { kAll, kWithoutSpec };
  virtual absl::StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns,
                                              const std::string& label_selector,
                                              ListFields fields = ListFields::kAll) = 0;
  virtual absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                                const nlohmann::json& object) = 0;
  // PUT of the whole object; its metadata.resourceVersion must be current (else Aborted).
  virtual absl::StatusOr<nlohmann::json> Update(const Resource& r, const std::string& ns,
                                                const nlohmann::json& object) = 0;
  // PUT of the status subresource; the object's metadata.resourceVersion must be current.
  virtual absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                                      const nlohmann::json& object) = 0;
  // A JSON merge patch (RFC 7386) of the object, or of its status when `status` is set.
  virtual absl::StatusOr<nlohmann::json> MergePatch(const Resource& r, const std::string& ns,
                                                    const std::string& name,
                                                    const nlohmann::json& patch,
                                                    bool status = false) = 0;
  // Deletes with background propagation (ownerReferences garbage-collect the children).
  // `grace_period_seconds` overrides a pod's terminationGracePeriodSeconds (0: at once).
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                              std::optional<int64_t> grace_period_seconds = std::nullopt) = 0;

  // Streams watch events ({"type": ADDED|MODIFIED|DELETED|BOOKMARK, "object": ...}) to
  // `on_event` until the server ends the stream (OK: resume from the last resourceVersion
  // seen), `on_event` returns false (Cancelled), or an error (IsGone: list again).
  virtual absl::Status Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                             const std::function<bool(const nlohmann::json& event)>& on_event) = 0;
};

}  // namespace cohort::kube
