#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cohort::local {

// Who made a request, once authenticated: the cluster's administrator (the kubeconfig's token,
// group system:masters) or a service account (a token the API server issued for it).
struct UserInfo {
  std::string name;  // "system:serviceaccount:<namespace>:<name>" for a service account.
  std::vector<std::string> groups;
  bool IsServiceAccount() const { return name.rfind("system:serviceaccount:", 0) == 0; }
  // A member of system:masters: allowed everything, RBAC unread (as Kubernetes' authorizer).
  bool IsMaster() const {
    return std::find(groups.begin(), groups.end(), "system:masters") != groups.end();
  }
};

// The user a service account authenticates as, with Kubernetes' groups for it.
UserInfo ServiceAccountUser(const std::string& ns, const std::string& name);

// What a request asks, in RBAC's terms.
struct RequestAttributes {
  bool resource_request = true;
  std::string verb;         // get, list, watch, create, update, patch, delete, deletecollection.
  std::string api_group;    // "" for the core group.
  std::string resource;     // Plural: "pods".
  std::string subresource;  // "status", "log", "eviction", "token" or "".
  std::string ns;           // "" for cluster-scoped kinds and all-namespace requests.
  std::string name;         // "" for collections.
  std::string path;         // For non-resource requests (/version, /apis, ...).
};

// The objects RBAC reads, as the API server stores them.
struct RbacObjects {
  std::vector<nlohmann::json> cluster_roles, cluster_role_bindings, roles, role_bindings;
};

// Whether Kubernetes' RBAC authorizer would allow `request` for `user`: a ClusterRoleBinding, or a
// RoleBinding in the request's namespace, whose subjects name the user (User), one of its groups
// (Group) or its service account (ServiceAccount), and whose role (Role in that namespace, or
// ClusterRole) has a rule matching the verb, API group, resource (or resource/subresource, or
// "*"), and resourceNames when it lists any; or a nonResourceURLs rule for a non-resource
// request. Rules only add: nothing denies.
bool RbacAllows(const UserInfo& user, const RequestAttributes& request, const RbacObjects& objects);

// Kubernetes' words for a refused request: `User "x" cannot list resource "pods" in API group ""
// in the namespace "default"`.
std::string ForbiddenMessage(const UserInfo& user, const RequestAttributes& request);

}  // namespace cohort::local
