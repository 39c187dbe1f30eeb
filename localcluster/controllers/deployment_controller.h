#pragma once

#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace cohort::local {

inline const kube::Resource kDeployments{"apps", "v1", "deployments"};
inline const kube::Resource kReplicaSets{"apps", "v1", "replicasets"};

// The label a ReplicaSet's pods carry: which version of the Deployment's template made them.
inline constexpr char kPodTemplateHashLabel[] = "pod-template-hash";

// The hash of a pod template, as the name suffix and pod-template-hash label of its ReplicaSet
// (ten lowercase hex digits; equal templates, equal hashes).
std::string PodTemplateHash(const nlohmann::json& pod_template);

// The local control plane's Deployment and ReplicaSet controllers, in one loop that reads every
// Deployment, ReplicaSet and pod a few times a second (as Helm's charts use them; no watch).
//
// - A Deployment owns one ReplicaSet per version of its pod template (<name>-<hash>). A new
//   template gets a new ReplicaSet at the full replica count; the old ones are scaled to zero
//   once the new one's pods are all ready (a rolling update that never drops below the wanted
//   count: maxSurge 100%, maxUnavailable 0). strategy.type Recreate scales the old ones to zero
//   first and starts the new one when their pods are gone. status: observedGeneration,
//   replicas, updatedReplicas, readyReplicas, availableReplicas, and the conditions Available
//   and Progressing (reason NewReplicaSetAvailable once complete), which `kubectl rollout
//   status` reads.
// - A ReplicaSet keeps spec.replicas pods of its template, owned by it (generateName
//   <rs>-), creating the missing and deleting the surplus (not-ready first); pods being deleted
//   do not count. status: replicas, readyReplicas, availableReplicas, observedGeneration.
// Deleting either deletes what it owns (the API server's garbage collection).
class DeploymentController {
 public:
  explicit DeploymentController(kube::KubeClient* client,
                                absl::Duration period = absl::Milliseconds(200));
  ~DeploymentController();  // Stops.

  void Start();
  // One pass over every Deployment and ReplicaSet (what the loop runs; tests call it directly).
  void Sync();

 private:
  void SyncDeployment(const nlohmann::json& deployment, const nlohmann::json& replica_sets,
                      const nlohmann::json& pods);
  void SyncReplicaSet(const nlohmann::json& replica_set, const nlohmann::json& pods);

  kube::KubeClient* const client_;
  const absl::Duration period_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace cohort::local
