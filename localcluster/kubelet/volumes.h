#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace cohort::local {

// Where Kubernetes mounts a pod's service account.
inline constexpr char kServiceAccountMountPath[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// A pod's volumes, as the kubelet lays them out under the pod's directory before any container
// starts: emptyDir (and every other kind but hostPath) an empty directory, hostPath the host's own
// path, and volumes of API data (secret, configMap, downwardAPI, projected) written as files. Also
// the pod's service account (kubelet.h), projected on its own. Each runtime then shows them to a
// container its own way: paths rewritten for processes, bind mounts for podman.
class PodVolumes {
 public:
  // Called while a secret or config map a volume needs does not exist yet; waits up to the
  // duration given and returns true, or returns false at once when the pod is being stopped.
  using WaitFn = std::function<bool(absl::Duration)>;

  // `dir`: the pod's directory; `api_ca_pem`: the CA the service account mount carries.
  PodVolumes(kube::KubeClient* client, const nlohmann::json& pod, std::string dir,
             std::string api_ca_pem, WaitFn wait);

  // Lays out spec.volumes, then mounts the service account (unless automountServiceAccountToken
  // is false). The first error, naming the volume.
  absl::Status Prepare();

  // Volume name -> its directory on the host (or the hostPath).
  const std::map<std::string, std::string>& directories() const { return directories_; }
  // Volumes of API data, which Kubernetes mounts read-only.
  bool read_only(const std::string& volume) const { return read_only_.contains(volume); }
  // The service account's files; empty: none mounted.
  const std::string& service_account_dir() const { return service_account_dir_; }

 private:
  // One source of a volume of API data (a secret, configMap or downwardAPI volume, or a source
  // of a projected one: those and serviceAccountToken), written into `dir`: every key, or the
  // `items` named, at their paths.
  absl::Status WriteVolumeSource(const nlohmann::json& source, const std::string& dir);
  std::string ServiceAccount() const;
  // A token for the pod's service account, from the API server (TokenRequest).
  absl::StatusOr<std::string> IssueToken(const std::string& account);
  // The pod's service account, as the kubelet projects it (kubelet.h).
  absl::Status MountServiceAccount(const nlohmann::json& spec);
  absl::StatusOr<nlohmann::json> WaitFor(const kube::Resource& kind, const std::string& name);

  kube::KubeClient* const client_;
  const nlohmann::json pod_;
  const std::string ns_;
  const std::string name_;
  const std::string dir_;
  const std::string api_ca_pem_;
  const WaitFn wait_;
  std::map<std::string, std::string> directories_;
  std::set<std::string> read_only_;  // Secrets, config maps, downward API and projected volumes.
  std::string service_account_dir_;
};

}  // namespace cohort::local
