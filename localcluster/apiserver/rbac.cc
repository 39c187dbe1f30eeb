#include "localcluster/apiserver/rbac.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "kube/json_fields.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

bool Lists(const json& rule, const char* field, const std::string& value) {
  for (const json& v : kube::ArrayMember(rule, field)) {
    if (v.is_string() && (v == "*" || v == value)) return true;
  }
  return false;
}

bool RuleAllows(const json& rule, const RequestAttributes& r) {
  if (!Lists(rule, "verbs", r.verb)) return false;
  if (!r.resource_request) {
    for (const json& url : kube::ArrayMember(rule, "nonResourceURLs")) {
      if (!url.is_string()) continue;
      const std::string u = url.get<std::string>();
      if (u == "*" || u == r.path ||
          (!u.empty() && u.back() == '*' && r.path.rfind(u.substr(0, u.size() - 1), 0) == 0)) {
        return true;
      }
    }
    return false;
  }
  if (!Lists(rule, "apiGroups", r.api_group)) return false;
  const std::string resource =
      r.subresource.empty() ? r.resource : absl::StrCat(r.resource, "/", r.subresource);
  bool resource_ok = false;
  for (const json& v : kube::ArrayMember(rule, "resources")) {
    if (!v.is_string()) continue;
    const std::string s = v.get<std::string>();
    // As Kubernetes matches: "*", the exact "resource" or "resource/subresource", or
    // "*/subresource".
    resource_ok = resource_ok || s == "*" || s == resource ||
                  (!r.subresource.empty() && s == "*/" + r.subresource);
  }
  if (!resource_ok) return false;
  const json& names = kube::ArrayMember(rule, "resourceNames");
  if (names.empty()) return true;
  return !r.name.empty() && Lists(rule, "resourceNames", r.name);
}

bool SubjectMatches(const json& subject, const UserInfo& user, const std::string& binding_ns) {
  const std::string kind = kube::StringMember(subject, "kind");
  const std::string name = kube::StringMember(subject, "name");
  if (kind == "User") return name == user.name;
  if (kind == "Group")
    return std::find(user.groups.begin(), user.groups.end(), name) != user.groups.end();
  if (kind == "ServiceAccount") {
    // A RoleBinding's ServiceAccount subject without a namespace is in the binding's namespace.
    std::string ns = kube::StringMember(subject, "namespace");
    if (ns.empty()) ns = binding_ns;
    return user.name == absl::StrCat("system:serviceaccount:", ns, ":", name);
  }
  return false;
}

const json* Named(const std::vector<json>& objects, const std::string& name,
                  const std::string& ns = "") {
  for (const json& o : objects) {
    const json& meta = kube::Member(o, "metadata");
    if (kube::StringMember(meta, "name") == name &&
        (ns.empty() || kube::StringMember(meta, "namespace") == ns))
      return &o;
  }
  return nullptr;
}

bool RoleAllows(const json* role, const RequestAttributes& request) {
  if (role == nullptr) return false;
  for (const json& rule : kube::ArrayMember(*role, "rules")) {
    if (RuleAllows(rule, request)) return true;
  }
  return false;
}

bool BindingGrants(const json& binding, const UserInfo& user, const std::string& binding_ns) {
  for (const json& subject : kube::ArrayMember(binding, "subjects")) {
    if (SubjectMatches(subject, user, binding_ns)) return true;
  }
  return false;
}

}  // namespace

UserInfo ServiceAccountUser(const std::string& ns, const std::string& name) {
  return {absl::StrCat("system:serviceaccount:", ns, ":", name),
          {"system:serviceaccounts", absl::StrCat("system:serviceaccounts:", ns),
           "system:authenticated"}};
}

bool RbacAllows(const UserInfo& user, const RequestAttributes& request,
                const RbacObjects& objects) {
  for (const json& binding : objects.cluster_role_bindings) {
    if (!BindingGrants(binding, user, "")) continue;
    const json& ref = kube::Member(binding, "roleRef");
    if (kube::StringMember(ref, "kind") != "ClusterRole") continue;
    if (RoleAllows(Named(objects.cluster_roles, kube::StringMember(ref, "name")), request))
      return true;
  }
  if (request.ns.empty()) return false;
  for (const json& binding : objects.role_bindings) {
    const std::string ns = kube::StringMember(kube::Member(binding, "metadata"), "namespace");
    if (ns != request.ns || !BindingGrants(binding, user, ns)) continue;
    const json& ref = kube::Member(binding, "roleRef");
    const std::string kind = kube::StringMember(ref, "kind"),
                      name = kube::StringMember(ref, "name");
    const json* role = kind == "Role"          ? Named(objects.roles, name, ns)
                       : kind == "ClusterRole" ? Named(objects.cluster_roles, name)
                                               : nullptr;
    if (RoleAllows(role, request)) return true;
  }
  return false;
}

std::string ForbiddenMessage(const UserInfo& user, const RequestAttributes& r) {
  if (!r.resource_request) {
    return absl::StrCat("User \"", user.name, "\" cannot ", r.verb, " path \"", r.path, "\"");
  }
  std::string what = absl::StrCat("User \"", user.name, "\" cannot ", r.verb, " resource \"",
                                  r.resource, r.subresource.empty() ? "" : "/" + r.subresource,
                                  "\" in API group \"", r.api_group, "\"");
  return r.ns.empty() ? absl::StrCat(what, " at the cluster scope")
                      : absl::StrCat(what, " in the namespace \"", r.ns, "\"");
}

}  // namespace cohort::local
