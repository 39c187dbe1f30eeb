// RBAC as the local API server evaluates it (rbac.h): which bindings grant which requests.
#include "localcluster/apiserver/rbac.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cohort::local {
namespace {

using json = nlohmann::json;

json Rule(json api_groups, json resources, json verbs) {
  return {{"apiGroups", std::move(api_groups)},
          {"resources", std::move(resources)},
          {"verbs", std::move(verbs)}};
}
json Role(const std::string& name, const std::string& ns, json rules) {
  json role = {{"metadata", {{"name", name}}}, {"rules", std::move(rules)}};
  if (!ns.empty()) role["metadata"]["namespace"] = ns;
  return role;
}
json Binding(const std::string& name, const std::string& ns, const std::string& role_kind,
             const std::string& role, json subjects) {
  json b = {
      {"metadata", {{"name", name}}},
      {"roleRef", {{"kind", role_kind}, {"name", role}, {"apiGroup", "rbac.authorization.k8s.io"}}},
      {"subjects", std::move(subjects)}};
  if (!ns.empty()) b["metadata"]["namespace"] = ns;
  return b;
}
RequestAttributes Request(std::string verb, std::string group, std::string resource, std::string ns,
                          std::string name = "", std::string subresource = "") {
  RequestAttributes r;
  r.verb = std::move(verb);
  r.api_group = std::move(group);
  r.resource = std::move(resource);
  r.ns = std::move(ns);
  r.name = std::move(name);
  r.subresource = std::move(subresource);
  return r;
}

// The operator's shape: a ClusterRole bound cluster-wide to its service account, and leases in
// its own namespace through a Role.
RbacObjects OperatorRbac() {
  RbacObjects o;
  o.cluster_roles = {Role("op", "",
                          {Rule({""}, {"pods"}, {"list", "watch", "create", "delete"}),
                           Rule({"cohort.dev"}, {"distributedjobs/status"}, {"update"}),
                           Rule({""}, {"pods/log"}, {"get"}),
                           Rule({""}, {"configmaps"}, {"get"}),
                           {{"nonResourceURLs", {"/metrics", "/debug/*"}}, {"verbs", {"get"}}}})};
  o.cluster_role_bindings = {
      Binding("op", "", "ClusterRole", "op",
              {{{"kind", "ServiceAccount"}, {"name", "op"}, {"namespace", "sys"}}})};
  o.roles = {Role("leader", "sys", {Rule({"coordination.k8s.io"}, {"leases"}, {"get", "update"})}),
             Role("names", "sys",
                  {{{"apiGroups", {""}},
                    {"resources", {"secrets"}},
                    {"verbs", {"get"}},
                    {"resourceNames", {"only-this"}}}})};
  o.role_bindings = {
      Binding("leader", "sys", "Role", "leader", {{{"kind", "ServiceAccount"}, {"name", "op"}}}),
      Binding("names", "sys", "Role", "names", {{{"kind", "Group"}, {"name", "readers"}}}),
      Binding("wide", "team", "ClusterRole", "op", {{{"kind", "User"}, {"name", "alice"}}})};
  return o;
}

TEST(Rbac, ClusterRoleBindingGrantsItsRulesEverywhere_OnlyTheirVerbs) {
  const RbacObjects o = OperatorRbac();
  const UserInfo op = ServiceAccountUser("sys", "op");
  EXPECT_TRUE(RbacAllows(op, Request("list", "", "pods", "default"), o));
  EXPECT_TRUE(RbacAllows(op, Request("list", "", "pods", ""), o)) << "all namespaces";
  EXPECT_TRUE(RbacAllows(op, Request("create", "", "pods", "any"), o));
  EXPECT_FALSE(RbacAllows(op, Request("update", "", "pods", "any", "p"), o));
  EXPECT_FALSE(RbacAllows(op, Request("list", "", "nodes", ""), o));
  EXPECT_FALSE(
      RbacAllows(ServiceAccountUser("other", "op"), Request("list", "", "pods", "default"), o))
      << "a service account of the same name in another namespace";
}

TEST(Rbac, SubresourcesAreTheirOwnResources) {
  const RbacObjects o = OperatorRbac();
  const UserInfo op = ServiceAccountUser("sys", "op");
  EXPECT_TRUE(
      RbacAllows(op, Request("update", "cohort.dev", "distributedjobs", "ns", "j", "status"), o));
  EXPECT_FALSE(RbacAllows(op, Request("update", "cohort.dev", "distributedjobs", "ns", "j"), o));
  EXPECT_TRUE(RbacAllows(op, Request("get", "", "pods", "ns", "p", "log"), o));
  EXPECT_FALSE(RbacAllows(op, Request("get", "", "pods", "ns", "p"), o));
}

TEST(Rbac, RoleBindingGrantsOnlyInItsNamespace_ServiceAccountSubjectDefaultsToIt) {
  const RbacObjects o = OperatorRbac();
  const UserInfo op = ServiceAccountUser("sys", "op");
  EXPECT_TRUE(RbacAllows(op, Request("update", "coordination.k8s.io", "leases", "sys", "l"), o));
  EXPECT_FALSE(
      RbacAllows(op, Request("update", "coordination.k8s.io", "leases", "default", "l"), o));
  // A RoleBinding to a ClusterRole grants the ClusterRole's rules in the binding's namespace only.
  const UserInfo alice{"alice", {"system:authenticated"}};
  EXPECT_TRUE(RbacAllows(alice, Request("create", "", "pods", "team"), o));
  EXPECT_FALSE(RbacAllows(alice, Request("create", "", "pods", "other"), o));
  EXPECT_FALSE(RbacAllows(alice, Request("create", "", "pods", ""), o));
}

TEST(Rbac, GroupsAndResourceNames) {
  const RbacObjects o = OperatorRbac();
  const UserInfo bob{"bob", {"readers", "system:authenticated"}};
  EXPECT_TRUE(RbacAllows(bob, Request("get", "", "secrets", "sys", "only-this"), o));
  EXPECT_FALSE(RbacAllows(bob, Request("get", "", "secrets", "sys", "another"), o));
  EXPECT_FALSE(RbacAllows(bob, Request("list", "", "secrets", "sys"), o))
      << "resourceNames never grant a list";
  EXPECT_FALSE(RbacAllows(UserInfo{"carol", {"system:authenticated"}},
                          Request("get", "", "secrets", "sys", "only-this"), o));
}

TEST(Rbac, NonResourceUrls_ExactAndPrefix) {
  const RbacObjects o = OperatorRbac();
  const UserInfo op = ServiceAccountUser("sys", "op");
  RequestAttributes metrics;
  metrics.resource_request = false;
  metrics.verb = "get";
  metrics.path = "/metrics";
  EXPECT_TRUE(RbacAllows(op, metrics, o));
  metrics.path = "/debug/pprof";
  EXPECT_TRUE(RbacAllows(op, metrics, o));
  metrics.path = "/logs";
  EXPECT_FALSE(RbacAllows(op, metrics, o));
}

TEST(Rbac, Wildcards) {
  RbacObjects o;
  o.cluster_roles = {Role("admin", "", {Rule({"*"}, {"*"}, {"*"})})};
  o.cluster_role_bindings = {
      Binding("admin", "", "ClusterRole", "admin", {{{"kind", "Group"}, {"name", "admins"}}})};
  EXPECT_TRUE(RbacAllows(UserInfo{"x", {"admins"}},
                         Request("deletecollection", "apps", "deployments", "a"), o));
  EXPECT_TRUE(
      RbacAllows(UserInfo{"x", {"admins"}}, Request("get", "", "pods", "a", "p", "log"), o));
}

TEST(Rbac, SubresourceWildcardIsStarSlashName_NotResourceSlashStar) {
  RbacObjects o;
  o.cluster_roles = {Role("logs", "", {Rule({""}, {"*/log", "pods/*"}, {"get"})})};
  o.cluster_role_bindings = {
      Binding("logs", "", "ClusterRole", "logs", {{{"kind", "User"}, {"name", "u"}}})};
  const UserInfo u{"u", {}};
  EXPECT_TRUE(RbacAllows(u, Request("get", "", "pods", "a", "p", "log"), o));
  EXPECT_FALSE(RbacAllows(u, Request("get", "", "pods", "a", "p", "status"), o))
      << "Kubernetes has no pods/*";
  EXPECT_FALSE(RbacAllows(u, Request("get", "", "pods", "a", "p"), o));
}

TEST(Rbac, ForbiddenMessageIsKubernetesWords) {
  const UserInfo op = ServiceAccountUser("sys", "op");
  EXPECT_EQ(ForbiddenMessage(op, Request("list", "", "pods", "default")),
            "User \"system:serviceaccount:sys:op\" cannot list resource \"pods\" in API group \"\" "
            "in the namespace "
            "\"default\"");
  EXPECT_EQ(ForbiddenMessage(op, Request("list", "", "nodes", "")),
            "User \"system:serviceaccount:sys:op\" cannot list resource \"nodes\" in API group "
            "\"\" at the cluster scope");
  EXPECT_EQ(ServiceAccountUser("sys", "op").groups,
            (std::vector<std::string>{"system:serviceaccounts", "system:serviceaccounts:sys",
                                      "system:authenticated"}));
}

}  // namespace
}  // namespace cohort::local
