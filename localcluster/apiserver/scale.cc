#include "localcluster/apiserver/scale.h"

#include <vector>

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "localcluster/apiserver/api_server.h"
#include "localcluster/apiserver/request_reply.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// ".spec.replicas" -> {"spec", "replicas"}; nullopt when it is not such a path.
std::optional<std::vector<std::string>> PathParts(const std::string& path) {
  if (!absl::StartsWith(path, ".") || absl::StrContains(path, "[")) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(path.substr(1), '.');
  for (const std::string& part : parts) {
    if (part.empty()) return std::nullopt;
  }
  return parts;
}

const json* Lookup(const json& object, const std::string& path) {
  std::optional<std::vector<std::string>> parts = PathParts(path);
  if (!parts) return nullptr;
  const json* at = &object;
  for (const std::string& part : *parts) {
    if (!at->is_object() || !at->contains(part)) return nullptr;
    at = &(*at)[part];
  }
  return at;
}

}  // namespace

absl::StatusOr<std::optional<ScaleSubresource>> ScaleSubresourceOf(const json& version) {
  const json& subresources = version.value("subresources", json::object());
  if (!subresources.is_object() || !subresources.contains("scale")) return std::nullopt;
  const json& scale = subresources["scale"];
  if (!scale.is_object()) return absl::InvalidArgumentError("subresources.scale must be an object");
  ScaleSubresource out;
  out.spec_replicas_path = scale.value("specReplicasPath", "");
  out.status_replicas_path = scale.value("statusReplicasPath", "");
  out.label_selector_path = scale.value("labelSelectorPath", "");
  // As Kubernetes checks them: simple paths, the spec one under .spec, the others under .status.
  struct Check {
    const char* field;
    const std::string& path;
    const char* under;
    bool required;
  };
  for (const Check& c : {Check{"specReplicasPath", out.spec_replicas_path, ".spec.", true},
                         Check{"statusReplicasPath", out.status_replicas_path, ".status.", true},
                         Check{"labelSelectorPath", out.label_selector_path, ".status.", false}}) {
    if (c.path.empty() && !c.required) continue;
    if (!PathParts(c.path) || !absl::StartsWith(c.path, c.under)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "subresources.scale.", c.field, ": \"", c.path, "\" must be a JSON path under ", c.under,
          " without array notation (e.g. \"", c.under, "replicas\")"));
    }
  }
  return out;
}

json ScaleOf(const ScaleSubresource& scale, const json& object) {
  const json& meta = object.value("metadata", json::object());
  json out = {{"kind", "Scale"}, {"apiVersion", "autoscaling/v1"}, {"metadata", json::object()}};
  for (const char* field : {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}) {
    if (meta.contains(field)) out["metadata"][field] = meta[field];
  }
  const json* spec = Lookup(object, scale.spec_replicas_path);
  const json* status = Lookup(object, scale.status_replicas_path);
  out["spec"] = {{"replicas", spec != nullptr && spec->is_number_integer() ? *spec : json(0)}};
  out["status"] = {
      {"replicas", status != nullptr && status->is_number_integer() ? *status : json(0)}};
  if (!scale.label_selector_path.empty()) {
    const json* selector = Lookup(object, scale.label_selector_path);
    if (selector != nullptr && selector->is_string()) out["status"]["selector"] = *selector;
  }
  return out;
}

absl::StatusOr<json> ObjectPatchFor(const ScaleSubresource& scale, const json& written) {
  const json* replicas = Lookup(written, ".spec.replicas");
  if (replicas == nullptr || !replicas->is_number_integer() || replicas->get<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Scale.spec.replicas: must be a non-negative integer (got ",
                     replicas == nullptr ? "nothing" : replicas->dump(), ")"));
  }
  json patch = json::object();
  json* at = &patch;
  const std::optional<std::vector<std::string>> parts = PathParts(scale.spec_replicas_path);
  for (const std::string& part : *parts) at = &(*at)[part];
  *at = *replicas;
  if (const json* version = Lookup(written, ".metadata.resourceVersion");
      version != nullptr && version->is_string() && !version->get<std::string>().empty()) {
    patch["metadata"]["resourceVersion"] = *version;
  }
  return patch;
}

void ApiServer::ServeScale(const ResourceTarget& t, const httplib::Request& req,
                           httplib::Response& res) {
  absl::StatusOr<json> current = store_.Get(t.type, t.ns, t.name);
  if (!current.ok()) {
    Reply(res, current.status());
    return;
  }
  const ScaleSubresource& scale = *t.type.scale;
  if (req.method == "GET") {
    Reply(res, ScaleOf(scale, *current));
    return;
  }
  WriteRequest write;
  if (absl::Status prepared = PrepareWrite(t, req, write); !prepared.ok()) {
    Reply(res, prepared);
    return;
  }
  // PUT sends the whole Scale; PATCH a merge patch (kubectl scale's) or a JSON patch of it.
  json written = write.body;
  if (req.method == "PATCH") {
    written = ScaleOf(scale, *current);
    try {
      if (absl::StrContains(req.get_header_value("Content-Type"), "json-patch+json")) {
        written = written.patch(write.body);
      } else {
        written.merge_patch(write.body);
      }
    } catch (const json::exception& e) {
      Reply(res, absl::InvalidArgumentError(
                     absl::StrCat("the patch cannot be applied to the Scale: ", e.what())));
      return;
    }
  }
  absl::StatusOr<json> patch = ObjectPatchFor(scale, written);
  if (!patch.ok()) {
    Reply(res, patch.status());
    return;
  }
  absl::StatusOr<json> result =
      store_.Patch(t.type, t.ns, t.name, *patch, /*status_only=*/false, write.record);
  if (result.ok()) result = ScaleOf(scale, *result);
  FinishWrite(write, result, res);
}

}  // namespace cohort::local
