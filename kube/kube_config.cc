#include "kube/kube_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort::kube {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The `field` of a named entry of a kubeconfig list ("clusters", "users", "contexts").
std::optional<YAML::Node> Named(const YAML::Node& root, const char* list, const std::string& name,
                                const char* field) {
  if (!root[list] || !root[list].IsSequence()) return std::nullopt;
  for (const YAML::Node& entry : root[list]) {
    if (entry["name"] && entry["name"].as<std::string>() == name && entry[field].IsMap()) {
      return entry[field];
    }
  }
  return std::nullopt;
}

// An inline base64 field ("<key>-data") or a file field ("<key>").
absl::StatusOr<std::string> DataOrFile(const YAML::Node& node, const std::string& key,
                                       const std::filesystem::path& base,
                                       const std::string& where) {
  if (node[key + "-data"]) {
    std::string decoded;
    if (!absl::Base64Unescape(node[key + "-data"].as<std::string>(), &decoded)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", key, "-data is not valid base64"));
    }
    return decoded;
  }
  if (node[key]) {
    std::filesystem::path p = node[key].as<std::string>();
    if (p.is_relative()) p = base / p;
    return ReadFile(p.string(), absl::StrCat(where, " ", key));
  }
  return std::string();
}

}  // namespace

absl::StatusOr<KubeConfig> LoadKubeConfig(const std::string& path_arg,
                                          const std::string& context_arg) {
  std::string path = path_arg;
  if (path.empty()) {
    if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
      path = std::string(*absl::StrSplit(env, ':').begin());
    } else if (const char* home = std::getenv("HOME")) {
      path = absl::StrCat(home, "/.kube/config");
    }
  }
  absl::StatusOr<std::string> text = ReadFile(path, "kubeconfig");
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat(text.status().message(), "; pass --kubeconfig or set KUBECONFIG"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig '", path, "' is not valid YAML: ", e.what()));
  }
  std::string context = context_arg;
  if (context.empty() && root["current-context"])
    context = root["current-context"].as<std::string>();
  if (context.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig '", path, "' has no current-context; pass --context"));
  }
  std::optional<YAML::Node> found_ctx = Named(root, "contexts", context, "context");
  if (!found_ctx) {
    return absl::NotFoundError(
        absl::StrCat("kubeconfig '", path, "' has no context '", context, "'"));
  }
  const YAML::Node& ctx = *found_ctx;
  std::string cluster_name = ctx["cluster"] ? ctx["cluster"].as<std::string>() : "";
  std::string user_name = ctx["user"] ? ctx["user"].as<std::string>() : "";
  std::optional<YAML::Node> found_cluster = Named(root, "clusters", cluster_name, "cluster");
  if (!found_cluster || !(*found_cluster)["server"]) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig '", path, "': context '", context,
                                                   "' names cluster '", cluster_name,
                                                   "', which has no server"));
  }
  const YAML::Node& cluster = *found_cluster;
  std::filesystem::path base = std::filesystem::path(path).parent_path();
  KubeConfig cfg;
  cfg.server = cluster["server"].as<std::string>();
  cfg.insecure_skip_tls_verify =
      cluster["insecure-skip-tls-verify"] && cluster["insecure-skip-tls-verify"].as<bool>();
  std::string where = absl::StrCat("kubeconfig '", path, "' cluster '", cluster_name, "'");
  absl::StatusOr<std::string> ca = DataOrFile(cluster, "certificate-authority", base, where);
  if (!ca.ok()) return ca.status();
  cfg.ca_pem = *ca;
  cfg.namespace_ = ctx["namespace"] ? ctx["namespace"].as<std::string>() : "default";
  if (std::optional<YAML::Node> found_user = Named(root, "users", user_name, "user")) {
    const YAML::Node& user = *found_user;
    where = absl::StrCat("kubeconfig '", path, "' user '", user_name, "'");
    if (user["token"]) cfg.token = user["token"].as<std::string>();
    if (user["tokenFile"]) {
      absl::StatusOr<std::string> token =
          ReadFile(user["tokenFile"].as<std::string>(), where + " tokenFile");
      if (!token.ok()) return token.status();
      cfg.token = std::string(absl::StripAsciiWhitespace(*token));
    }
    absl::StatusOr<std::string> cert = DataOrFile(user, "client-certificate", base, where);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = DataOrFile(user, "client-key", base, where);
    if (!key.ok()) return key.status();
    cfg.client_cert_pem = *cert;
    cfg.client_key_pem = *key;
  }
  return cfg;
}

absl::StatusOr<KubeConfig> LoadInClusterConfig(const std::string& account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) {
    return absl::FailedPreconditionError(
        "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); pass --kubeconfig");
  }
  KubeConfig cfg;
  std::string h = host;
  cfg.server = absl::StrCat(
      "https://", h.find(':') != std::string::npos ? absl::StrCat("[", h, "]") : h, ":", port);
  absl::StatusOr<std::string> token = ReadFile(account_dir + "/token", "service account token");
  if (!token.ok()) return token.status();
  cfg.token = std::string(absl::StripAsciiWhitespace(*token));
  absl::StatusOr<std::string> ca = ReadFile(account_dir + "/ca.crt", "service account CA");
  if (!ca.ok()) return ca.status();
  cfg.ca_pem = *ca;
  absl::StatusOr<std::string> ns =
      ReadFile(account_dir + "/namespace", "service account namespace");
  cfg.namespace_ = ns.ok() ? std::string(absl::StripAsciiWhitespace(*ns)) : "default";
  return cfg;
}

}  // namespace cohort::kube
