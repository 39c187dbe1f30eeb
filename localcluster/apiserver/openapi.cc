#include "localcluster/apiserver/openapi.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

constexpr char kObjectMeta[] = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
constexpr char kListMeta[] = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

std::string Ref(const std::string& name) { return absl::StrCat("#/components/schemas/", name); }

std::string GroupVersionPath(const ResourceType& t) {
  return t.group.empty() ? "api/v1" : absl::StrCat("apis/", t.GroupVersion());
}

json StringSchema(const std::string& description) {
  return {{"type", "string"}, {"description", description}};
}

json TypeMetaProperties() {
  return {
      {"apiVersion",
       StringSchema(
           "APIVersion defines the versioned schema of this representation of an object. Servers "
           "should convert recognized schemas to the latest internal value, and may reject "
           "unrecognized values. More info: https://git.k8s.io/community/contributors/devel/"
           "sig-architecture/api-conventions.md#resources")},
      {"kind",
       StringSchema(
           "Kind is a string value representing the REST resource this object represents. Servers "
           "may infer this from the endpoint the client submits requests to. Cannot be updated. In "
           "CamelCase. More info: https://git.k8s.io/community/contributors/devel/"
           "sig-architecture/api-conventions.md#types-kinds")}};
}

// ObjectMeta and ListMeta, the fields a user reads about in `kubectl explain <kind>.metadata`.
json MetaSchemas() {
  auto string_map = [](const std::string& description) {
    return json{{"type", "object"},
                {"additionalProperties", {{"type", "string"}, {"default", ""}}},
                {"description", description}};
  };
  json object_meta = {
      {"description",
       "ObjectMeta is metadata that all persisted resources must have, which includes all objects "
       "users must create."},
      {"type", "object"},
      {"properties",
       {{"name", StringSchema("Name must be unique within a namespace. Cannot be updated.")},
        {"generateName",
         StringSchema("Optional prefix the server uses to generate a unique name when name is "
                      "not provided.")},
        {"namespace", StringSchema("The namespace the object belongs to. Cannot be updated.")},
        {"labels",
         string_map("Map of string keys and values that can be used to organize and categorize "
                    "(scope and select) objects.")},
        {"annotations",
         string_map("Unstructured key value map stored with a resource that may be set by "
                    "external tools.")},
        {"uid",
         StringSchema(
             "UID is the unique in time and space value for this object. Set by the server.")},
        {"resourceVersion",
         StringSchema("An opaque value that represents the internal version of this object, "
                      "for optimistic concurrency and watches. Set by the server.")},
        {"generation",
         {{"type", "integer"},
          {"format", "int64"},
          {"description",
           "A sequence number representing a specific generation of the desired "
           "state. Set by the server."}}},
        {"creationTimestamp",
         {{"type", "string"},
          {"format", "date-time"},
          {"description", "When this object was created. Set by the server."}}},
        {"deletionTimestamp",
         {{"type", "string"},
          {"format", "date-time"},
          {"description",
           "When this object will be deleted. Set by the server when a "
           "graceful deletion is requested."}}},
        {"ownerReferences",
         {{"type", "array"},
          {"description",
           "Objects this object depends on; when all of them are deleted, so is this object."},
          {"items",
           {{"type", "object"},
            {"required", {"apiVersion", "kind", "name", "uid"}},
            {"properties",
             {{"apiVersion", StringSchema("API version of the referent.")},
              {"kind", StringSchema("Kind of the referent.")},
              {"name", StringSchema("Name of the referent.")},
              {"uid", StringSchema("UID of the referent.")},
              {"controller",
               {{"type", "boolean"},
                {"description",
                 "If true, this reference points to the "
                 "managing controller."}}},
              {"blockOwnerDeletion", {{"type", "boolean"}}}}}}}}},
        {"finalizers",
         {{"type", "array"},
          {"items", {{"type", "string"}, {"default", ""}}},
          {"description", "Must be empty before the object is deleted from the registry."}}}}}};
  json list_meta = {
      {"description",
       "ListMeta describes metadata that synthetic resources must have, including lists."},
      {"type", "object"},
      {"properties",
       {{"resourceVersion", StringSchema("The version of the list, for watches from it.")},
        {"continue", StringSchema("Set if the list was cut short; pass it to get the rest.")},
        {"remainingItemCount", {{"type", "integer"}, {"format", "int64"}}}}}};
  return {{kObjectMeta, object_meta}, {kListMeta, list_meta}};
}

json Gvk(const ResourceType& t, const std::string& kind) {
  return {{"group", t.group}, {"version", t.version}, {"kind", kind}};
}

json Parameter(const std::string& name, const std::string& in, const std::string& description,
               bool required = false) {
  json p = {{"name", name},
            {"in", in},
            {"description", description},
            {"schema", {{"type", "string"}, {"uniqueItems", true}}}};
  if (required) p["required"] = true;
  return p;
}

// The parameters of a write: kubectl looks for fieldValidation to send its --validate choice.
json WriteParameters() {
  return json::array(
      {Parameter("dryRun", "query",
                 "When present, modifications are not persisted (not supported here)."),
       Parameter("fieldManager", "query",
                 "A name associated with the actor or entity that is making these changes."),
       Parameter("fieldValidation", "query",
                 "How the server handles fields the object's schema does not declare: Ignore drops "
                 "them silently, "
                 "Warn (the default) drops them with a warning each, Strict fails the request.")});
}

json Operation(const ResourceType& t, const std::string& action, const std::string& kind,
               const json& schema, bool write) {
  json content = {{"application/json", {{"schema", schema}}}};
  json op = {{"operationId", absl::StrCat(action, kind)},
             {"x-kubernetes-action", action},
             {"x-kubernetes-group-version-kind", Gvk(t, kind)},
             {"responses", {{"200", {{"description", "OK"}, {"content", content}}}}}};
  if (write) {
    op["parameters"] = WriteParameters();
    op["requestBody"] = {{"content", content}, {"required", true}};
  }
  return op;
}

}  // namespace

std::string OpenApiSchemaName(const ResourceType& type) {
  std::vector<std::string> labels = absl::StrSplit(type.group, '.');
  std::reverse(labels.begin(), labels.end());
  return absl::StrCat(absl::StrJoin(labels, "."), ".", type.version, ".", type.kind);
}

json OpenApiV3Index(const std::vector<ResourceType>& types) {
  json paths = json::object();
  for (const ResourceType& t : types) {
    std::string gv = GroupVersionPath(t);
    paths[gv] = {{"serverRelativeURL", absl::StrCat("/openapi/v3/", gv)}};
  }
  return {{"paths", paths}};
}

std::optional<json> OpenApiV3Document(const std::string& group_version_path,
                                      const std::vector<ResourceType>& types) {
  json paths = json::object();
  json schemas = json::object();
  for (const ResourceType& t : types) {
    if (GroupVersionPath(t) != group_version_path) continue;
    json object_schema = json::object();
    json list_schema = json::object();
    if (t.schema != nullptr) {
      std::string name = OpenApiSchemaName(t);
      json schema = *t.schema;
      if (!schema.contains("properties") || !schema["properties"].is_object())
        schema["properties"] = json::object();
      schema["properties"].update(TypeMetaProperties());
      schema["properties"]["metadata"] = {
          {"allOf", {{{"$ref", Ref(kObjectMeta)}}}},
          {"description",
           "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
           "sig-architecture/api-conventions.md#metadata"}};
      schema["x-kubernetes-group-version-kind"] = {Gvk(t, t.kind)};
      schemas[name] = schema;
      json list_properties = TypeMetaProperties();
      list_properties["items"] = {{"type", "array"},
                                  {"description", absl::StrCat("List of ", t.plural, ".")},
                                  {"items", {{"$ref", Ref(name)}}}};
      list_properties["metadata"] = {{"allOf", {{{"$ref", Ref(kListMeta)}}}},
                                     {"description", "Standard list metadata."}};
      schemas[name + "List"] = {{"description", absl::StrCat(t.kind, "List is a list of ", t.kind)},
                                {"type", "object"},
                                {"required", {"items"}},
                                {"properties", list_properties},
                                {"x-kubernetes-group-version-kind", {Gvk(t, t.kind + "List")}}};
      object_schema = {{"$ref", Ref(name)}};
      list_schema = {{"$ref", Ref(name + "List")}};
    }
    std::string collection = absl::StrCat(
        "/", group_version_path, t.namespaced ? "/namespaces/{namespace}/" : "/", t.plural);
    // json::array, not a braced list of one json: clang reads `json x = {j}` as a copy of j (an
    // object, which push_back below rejects), gcc as an array of it.
    json path_parameters =
        json::array({Parameter("name", "path", absl::StrCat("name of the ", t.kind), true)});
    json collection_parameters = json::array();
    if (t.namespaced) {
      json ns = Parameter("namespace", "path",
                          "object name and auth scope, such as for teams and projects", true);
      path_parameters.push_back(ns);
      collection_parameters.push_back(ns);
    }
    paths[collection] = {{"get", Operation(t, "list", t.kind + "List", list_schema, false)},
                         {"post", Operation(t, "post", t.kind, object_schema, true)},
                         {"parameters", collection_parameters}};
    std::string item = absl::StrCat(collection, "/{name}");
    paths[item] = {{"get", Operation(t, "get", t.kind, object_schema, false)},
                   {"put", Operation(t, "put", t.kind, object_schema, true)},
                   {"patch", Operation(t, "patch", t.kind, object_schema, true)},
                   {"delete", Operation(t, "delete", t.kind, json::object(), false)},
                   {"parameters", path_parameters}};
    if (t.status_subresource) {
      paths[item + "/status"] = {{"get", Operation(t, "get", t.kind, object_schema, false)},
                                 {"put", Operation(t, "put", t.kind, object_schema, true)},
                                 {"patch", Operation(t, "patch", t.kind, object_schema, true)},
                                 {"parameters", path_parameters}};
    }
  }
  if (paths.empty()) return std::nullopt;
  if (!schemas.empty()) schemas.update(MetaSchemas());
  return json{{"openapi", "3.0.0"},
              {"info", {{"title", "Kubernetes"}, {"version", "v1.32.0"}}},
              {"paths", paths},
              {"components", {{"schemas", schemas}}}};
}

}  // namespace cohort::local
