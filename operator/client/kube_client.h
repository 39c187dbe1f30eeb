#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cohort::op {

// A kind of Kubernetes object: where its REST endpoints live.
struct Resource {
  std::string group;    // "" for the core API.
  std::string version;  // "v1", "v1alpha1".
  std::string plural;   // "pods", "distributedjobs".

  // "/api/v1/namespaces/<ns>/<plural>" or "/apis/<group>/<version>/namespaces/<ns>/<plural>".
  std::string Path(const std::string& ns) const;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kEvents{"", "v1", "events"};
inline const Resource kDistributedJobs{"cohort.dev", "v1alpha1", "distributedjobs"};

// The API calls the operator makes. Errors map HTTP statuses onto one meaning each: NotFound
// (404), AlreadyExists (409 on create), Aborted (409 conflict on update: re-read and retry),
// InvalidArgument (400/422), PermissionDenied (403), Unavailable (429/5xx/connection: retry).
// Implementations: the HTTP client (against a real cluster or the local control plane) and an
// in-memory fake for unit tests. Thread-safe.
class KubeClient {
 public:
  virtual ~KubeClient() = default;

  virtual absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                             const std::string& name) = 0;
  // A list object ("items", "metadata.resourceVersion"); `label_selector` like "a=b,c=d".
  virtual absl::StatusOr<nlohmann::json> List(const Resource& r, const std::string& ns,
                                              const std::string& label_selector) = 0;
  virtual absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                                const nlohmann::json& object) = 0;
  // PUT of the status subresource; the object's metadata.resourceVersion must be current.
  virtual absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                                      const nlohmann::json& object) = 0;
  // Deletes with background propagation (ownerReferences garbage-collect the children).
  virtual absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name) = 0;
};

}  // namespace cohort::op
