// The local API server's authentication and authorization: service account tokens (issued and
// verified), the token of its kubeconfig, RBAC over the cluster's Roles and Bindings, and access
// reviews (kubectl auth can-i).
#include <openssl/hmac.h>

#include <httplib.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/rfc3339.h"
#include "common/token.h"
#include "kube/json_fields.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/apiserver/request_reply.h"

namespace cohort::local {

using json = nlohmann::json;

void ApiServer::ServeToken(const ResourceTarget& t, const httplib::Request& req,
                           httplib::Response& res) {
  std::optional<json> body = BodyOrAnswer(req, res);
  if (!body) return;
  // TokenRequest: what the kubelet mounts into a pod as its service account's token. The
  // namespace's "default" service account exists without an object, as if Kubernetes' service
  // account controller had made it.
  if (t.name != "default") {
    if (absl::StatusOr<json> account = store_.Get(t.type, t.ns, t.name); !account.ok()) {
      Reply(res, account.status());
      return;
    }
  }
  json spec = body->value("spec", json::object());
  const absl::Time expires = clock_->Now() + absl::Hours(24 * 365);
  Reply(res,
        json{{"kind", "TokenRequest"},
             {"apiVersion", "authentication.k8s.io/v1"},
             {"metadata", {{"name", t.name}, {"namespace", t.ns}}},
             {"spec", spec},
             {"status",
              {{"token", IssueServiceAccountToken(t.ns, t.name)},
               {"expirationTimestamp", FormatRfc3339(expires)}}}},
        201);
}

void ApiServer::ServeAccessReview(const ResourceTarget& t, const httplib::Request& req,
                                  httplib::Response& res) {
  std::optional<json> body = BodyOrAnswer(req, res);
  if (!body) return;
  absl::StatusOr<UserInfo> caller =
      options_.token.empty() ? UserInfo{"admin", {"system:masters"}} : Authenticate(req);
  if (!caller.ok()) {
    Reply(res, caller.status());
    return;
  }
  UserInfo subject = *caller;
  if (t.type.kind == "SubjectAccessReview") {
    const json& spec = kube::Member(*body, "spec");
    subject.name = kube::StringMember(spec, "user");
    subject.groups.clear();
    for (const json& g : kube::ArrayMember(spec, "groups")) {
      if (g.is_string()) subject.groups.push_back(g.get<std::string>());
    }
  }
  Reply(res, AccessReview(subject, *body), 201);
}

std::string ApiServer::IssueServiceAccountToken(const std::string& ns,
                                                const std::string& name) const {
  const std::string payload = absl::StrCat(ns, ":", name);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), service_account_key_.data(), static_cast<int>(service_account_key_.size()),
       reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), mac, &length);
  return absl::StrCat(
      "sa:", payload, ":",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(mac), length)));
}

std::optional<UserInfo> ApiServer::VerifyServiceAccountToken(const std::string& token) const {
  std::vector<std::string> parts = absl::StrSplit(token, ':');
  if (parts.size() != 4 || parts[0] != "sa") return std::nullopt;
  const std::string expected = IssueServiceAccountToken(parts[1], parts[2]);
  if (expected.size() != token.size() ||
      CRYPTO_memcmp(expected.data(), token.data(), token.size()) != 0) {
    return std::nullopt;
  }
  // A deleted service account's tokens stop working (the namespace's "default" always exists).
  if (parts[2] != "default") {
    std::optional<ResourceType> accounts = store_.FindType("", "serviceaccounts");
    if (!accounts || !store_.Get(*accounts, parts[1], parts[2]).ok()) return std::nullopt;
  }
  return ServiceAccountUser(parts[1], parts[2]);
}

absl::StatusOr<UserInfo> ApiServer::Authenticate(const httplib::Request& req) const {
  const std::string authorization = req.get_header_value("Authorization");
  constexpr absl::string_view kBearer = "Bearer ";
  const std::string token = absl::StartsWith(authorization, kBearer)
                                ? authorization.substr(kBearer.size())
                                : std::string();
  UserInfo user;
  if (!token.empty() && TokenMatches(authorization, options_.token)) {
    user = {"cohort-local-admin", {"system:masters", "system:authenticated"}};
  } else if (std::optional<UserInfo> account = VerifyServiceAccountToken(token)) {
    user = *account;
  } else {
    return absl::UnauthenticatedError("Unauthorized: a valid bearer token is required");
  }
  const std::string as = req.get_header_value("Impersonate-User");
  if (as.empty()) return user;
  if (!user.IsMaster()) {
    return absl::PermissionDeniedError(
        absl::StrCat("users \"", as, "\" is forbidden: User \"", user.name,
                     "\" cannot impersonate resource \"users\" in API group \"\""));
  }
  std::vector<std::string> parts = absl::StrSplit(as, ':');
  UserInfo impersonated = parts.size() == 4 && parts[0] == "system" && parts[1] == "serviceaccount"
                              ? ServiceAccountUser(parts[2], parts[3])
                              : UserInfo{as, {"system:authenticated"}};
  for (size_t i = 0; i < req.get_header_value_count("Impersonate-Group"); ++i) {
    impersonated.groups.push_back(req.get_header_value("Impersonate-Group", i));
  }
  return impersonated;
}

RbacObjects ApiServer::RbacSnapshot() {
  RbacObjects objects;
  auto items = [this](const char* plural) {
    std::vector<json> out;
    if (std::optional<ResourceType> t = store_.FindType("rbac.authorization.k8s.io", plural)) {
      json list = store_.List(*t, "", Selector(), Selector());
      for (json& item : list["items"]) out.push_back(std::move(item));
    }
    return out;
  };
  objects.cluster_roles = items("clusterroles");
  objects.cluster_role_bindings = items("clusterrolebindings");
  objects.roles = items("roles");
  objects.role_bindings = items("rolebindings");
  return objects;
}

absl::Status ApiServer::Authorize(const UserInfo& user, const httplib::Request& req) {
  if (user.IsMaster()) {
    return absl::OkStatus();
  }
  absl::StatusOr<ResourceTarget> target = ParseTarget(store_, req.path);
  if (!target.ok())
    return absl::OkStatus();  // Discovery, OpenAPI, /version: every user may read them.
  RequestAttributes r;
  const std::string& method = req.method;
  r.api_group = target->type.group;
  r.resource = target->type.plural;
  r.subresource = target->subresource;
  r.ns = target->ns;
  r.name = target->name;
  const std::string watch = req.get_param_value("watch");
  if (method == "GET") {
    r.verb = (watch == "1" || watch == "true") ? "watch" : !r.name.empty() ? "get" : "list";
  } else if (method == "POST") {
    r.verb = "create";
  } else if (method == "PUT") {
    r.verb = "update";
  } else if (method == "PATCH") {
    r.verb = "patch";
  } else if (method == "DELETE") {
    r.verb = r.name.empty() ? "deletecollection" : "delete";
  } else {
    r.verb = absl::AsciiStrToLower(method);
  }
  // A review asks about oneself: anyone authenticated may, as Kubernetes' system:basic-user allows.
  if (target->type.kind == "SelfSubjectAccessReview" && r.verb == "create") return absl::OkStatus();
  const RbacObjects rbac = RbacSnapshot();
  if (!RbacAllows(user, r, rbac)) return absl::PermissionDeniedError(ForbiddenMessage(user, r));
  // A patch (an apply) that would create the object needs create too, as in Kubernetes.
  if (r.verb == "patch" && r.subresource.empty() && !store_.Get(target->type, r.ns, r.name).ok()) {
    r.verb = "create";
    if (!RbacAllows(user, r, rbac)) return absl::PermissionDeniedError(ForbiddenMessage(user, r));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ApiServer::AccessReview(const UserInfo& user, const json& review) {
  const json& spec = kube::Member(review, "spec");
  RequestAttributes r;
  if (const json& attributes = kube::Member(spec, "resourceAttributes"); attributes.is_object()) {
    r.verb = kube::StringMember(attributes, "verb");
    r.api_group = kube::StringMember(attributes, "group");
    r.resource = kube::StringMember(attributes, "resource");
    r.subresource = kube::StringMember(attributes, "subresource");
    r.ns = kube::StringMember(attributes, "namespace");
    r.name = kube::StringMember(attributes, "name");
  } else {
    const json& non_resource = kube::Member(spec, "nonResourceAttributes");
    r.resource_request = false;
    r.verb = kube::StringMember(non_resource, "verb");
    r.path = kube::StringMember(non_resource, "path");
  }
  const bool masters = user.IsMaster();
  const bool allowed = masters || RbacAllows(user, r, RbacSnapshot());
  json answer = review;
  answer["status"] = {{"allowed", allowed}};
  if (allowed)
    answer["status"]["reason"] = masters ? "a member of system:masters" : "allowed by RBAC";
  return answer;
}

}  // namespace cohort::local
