#include "localcluster/kubelet/volumes.h"

#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "kube/json_fields.h"

namespace cohort::local {

using json = nlohmann::json;
namespace fs = std::filesystem;

PodVolumes::PodVolumes(kube::KubeClient* client, const json& pod, std::string dir,
                       std::string api_ca_pem, WaitFn wait)
    : client_(client),
      pod_(pod),
      ns_(pod["metadata"].value("namespace", "")),
      name_(pod["metadata"].value("name", "")),
      dir_(std::move(dir)),
      api_ca_pem_(std::move(api_ca_pem)),
      wait_(std::move(wait)) {}

absl::Status PodVolumes::Prepare() {
  std::error_code ec;
  const json spec = pod_.value("spec", json::object());
  for (const json& v : spec.value("volumes", json::array())) {
    std::string name = v.value("name", "");
    std::string path = (fs::path(dir_) / "volumes" / name).string();
    if (v.contains("hostPath")) {
      directories_[name] = v["hostPath"].value("path", "");
      continue;
    }
    fs::create_directories(path);
    // As Kubernetes makes an emptyDir: writable by whatever user the containers run as.
    fs::permissions(path, fs::perms::all, ec);
    directories_[name] = path;
    // Volumes of API data are mounted read-only, as Kubernetes mounts them; emptyDir and others
    // are an empty directory.
    std::vector<json> sources;
    if (v.contains("secret") || v.contains("configMap") || v.contains("downwardAPI")) {
      sources.push_back(v);
    } else if (v.contains("projected")) {
      for (const json& source : kube::Member(v, "projected").value("sources", json::array()))
        sources.push_back(source);
    } else {
      continue;
    }
    read_only_.insert(name);
    for (const json& source : sources) {
      if (absl::Status s = WriteVolumeSource(source, path); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("volume \"", name, "\": ", s.message()));
      }
    }
  }
  return MountServiceAccount(spec);
}

absl::Status PodVolumes::WriteVolumeSource(const json& source, const std::string& dir) {
  auto write = [&](const std::string& path, const std::string& content) -> absl::Status {
    const fs::path file = fs::path(dir) / path;
    bool up = false;
    for (const fs::path& part : fs::path(path)) up |= part == "..";
    if (path.empty() || up || path[0] == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("path \"", path, "\" must be relative, without \"..\" elements"));
    }
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
    return absl::OkStatus();
  };
  if (source.contains("serviceAccountToken")) {
    absl::StatusOr<std::string> token = IssueToken(ServiceAccount());
    if (!token.ok()) return token.status();
    return write(kube::Member(source, "serviceAccountToken").value("path", "token"), *token);
  }
  if (source.contains("downwardAPI")) {
    for (const json& item : kube::Member(source, "downwardAPI").value("items", json::array())) {
      const std::string field = kube::StringMember(kube::Member(item, "fieldRef"), "fieldPath");
      const json& meta = kube::Member(pod_, "metadata");
      std::string value;
      if (field == "metadata.name")
        value = name_;
      else if (field == "metadata.namespace")
        value = ns_;
      else if (field == "metadata.uid")
        value = meta.value("uid", "");
      else if (field == "metadata.labels" || field == "metadata.annotations") {
        // key="value" lines, sorted by key (json objects are).
        const json map = meta.value(field.substr(9), json::object());
        for (const auto& [key, v] : map.items())
          absl::StrAppend(&value, key, "=", json(v).dump(), "\n");
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("downwardAPI item \"", item.value("path", ""),
                         "\": only fieldRef of metadata.name, namespace, uid, ",
                         "labels and annotations is supported here",
                         field.empty() ? "" : absl::StrCat(" (not ", field, ")")));
      }
      if (absl::Status s = write(item.value("path", ""), value); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const bool secret = source.contains("secret");
  if (!secret && !source.contains("configMap")) {
    return absl::InvalidArgumentError(
        "only secret, configMap, downwardAPI and serviceAccountToken sources are supported here");
  }
  const json& ref = kube::Member(source, secret ? "secret" : "configMap");
  // A secret volume names it secretName; a projected source, name.
  const std::string object_name = ref.value("secretName", ref.value("name", ""));
  absl::StatusOr<json> object =
      ref.value("optional", false)
          ? client_->Get(secret ? kube::kSecrets : kube::kConfigMaps, ns_, object_name)
          : WaitFor(secret ? kube::kSecrets : kube::kConfigMaps, object_name);
  if (!object.ok())
    return absl::IsNotFound(object.status()) && ref.value("optional", false) ? absl::OkStatus()
                                                                             : object.status();
  const json data = object->value("data", json::object());  // items() must not outlive it.
  auto content = [&](const std::string& key) {
    std::string text = data.value(key, "");
    if (secret) absl::Base64Unescape(data.value(key, ""), &text);
    return text;
  };
  if (ref.contains("items")) {
    for (const json& item : ref["items"]) {
      const std::string key = item.value("key", "");
      if (!data.contains(key)) {
        return absl::NotFoundError(absl::StrCat(secret ? "secret " : "config map ", object_name,
                                                " has no key \"", key, "\""));
      }
      if (absl::Status s = write(item.value("path", key), content(key)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  for (const auto& [key, value] : data.items()) {
    if (absl::Status s = write(key, content(key)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string PodVolumes::ServiceAccount() const {
  const json& spec = kube::Member(pod_, "spec");
  std::string account = spec.value("serviceAccountName", spec.value("serviceAccount", ""));
  return account.empty() ? "default" : account;
}

absl::StatusOr<std::string> PodVolumes::IssueToken(const std::string& account) {
  const kube::Resource token_request{"", "v1", absl::StrCat("serviceaccounts/", account, "/token")};
  absl::StatusOr<json> issued = client_->Create(token_request, ns_,
                                                {{"apiVersion", "authentication.k8s.io/v1"},
                                                 {"kind", "TokenRequest"},
                                                 {"spec", json::object()}});
  if (!issued.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("no token for service account ", ns_, "/",
                                                      account, ": ", issued.status().message()));
  }
  return kube::StringMember(kube::Member(*issued, "status"), "token");
}

absl::Status PodVolumes::MountServiceAccount(const json& spec) {
  if (!spec.value("automountServiceAccountToken", true)) return absl::OkStatus();
  absl::StatusOr<std::string> token = IssueToken(ServiceAccount());
  if (!token.ok()) return token.status();
  const fs::path dir = fs::path(dir_) / "serviceaccount";
  fs::create_directories(dir);
  std::ofstream(dir / "token") << *token;
  std::ofstream(dir / "ca.crt") << api_ca_pem_;
  std::ofstream(dir / "namespace") << ns_;
  service_account_dir_ = dir.string();
  return absl::OkStatus();
}

absl::StatusOr<json> PodVolumes::WaitFor(const kube::Resource& kind, const std::string& name) {
  absl::Time deadline = absl::Now() + absl::Minutes(2);
  while (true) {
    absl::StatusOr<json> object = client_->Get(kind, ns_, name);
    if (object.ok() || !absl::IsNotFound(object.status())) return object;
    if (absl::Now() > deadline || !wait_(absl::Milliseconds(200))) {
      return absl::NotFoundError(
          absl::StrCat("volume source ", kind.plural, "/", name, " does not exist"));
    }
  }
}

}  // namespace cohort::local
