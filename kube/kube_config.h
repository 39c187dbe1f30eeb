#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace cohort::kube {

// How to reach and authenticate to an API server: from a kubeconfig file or from the pod's
// service account (in-cluster).
struct KubeConfig {
  std::string server;  // "https://host:port" (or http:// for a local control plane).
  std::string ca_pem;  // CA bundle to verify the server; empty: the system's.
  bool insecure_skip_tls_verify = false;
  std::string token;  // Bearer token, if any.
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string namespace_;  // The context's (or service account's) namespace; "default" if none.
};

// Reads a kubeconfig: `path`, else $KUBECONFIG (first entry), else ~/.kube/config; the named
// `context`, else current-context. Inline *-data fields are base64; file fields are resolved
// relative to the kubeconfig's directory. Errors name the file and the missing or bad entry
// (NotFound for a missing file or context, InvalidArgument for malformed content).
absl::StatusOr<KubeConfig> LoadKubeConfig(const std::string& path = "",
                                          const std::string& context = "");

// The pod's own service account: KUBERNETES_SERVICE_HOST/PORT and the token, CA and namespace
// files under `account_dir`. FailedPrecondition when not running in a cluster.
absl::StatusOr<KubeConfig> LoadInClusterConfig(
    const std::string& account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

}  // namespace cohort::kube
