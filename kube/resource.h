#pragma once

#include <string>

namespace cohort::kube {

// A kind of Kubernetes object: where its REST endpoints live.
struct Resource {
  std::string group;    // "" for the core API.
  std::string version;  // "v1", "v1alpha1".
  std::string plural;   // "pods", "distributedjobs".

  // "/api/v1/namespaces/<ns>/<plural>" or "/apis/<group>/<version>/namespaces/<ns>/<plural>";
  // without the namespace part when `ns` is empty (cluster-scoped kinds, or all namespaces).
  std::string Path(const std::string& ns) const;
};

inline const Resource kPods{"", "v1", "pods"};
inline const Resource kServices{"", "v1", "services"};
inline const Resource kSecrets{"", "v1", "secrets"};
inline const Resource kConfigMaps{"", "v1", "configmaps"};
inline const Resource kNodes{"", "v1", "nodes"};
inline const Resource kEvents{"", "v1", "events"};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases"};

}  // namespace cohort::kube
