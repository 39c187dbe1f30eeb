#include "localcluster/apiserver/api_server.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include <functional>
#include <set>

#include <httplib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "common/token.h"
#include "kube/conditions.h"
#include "kube/json_fields.h"
#include "kube/retry.h"
#include "localcluster/apiserver/kube_protobuf.h"
#include "localcluster/apiserver/openapi.h"
#include "localcluster/apiserver/pod_validation.h"
#include "localcluster/apiserver/request_reply.h"
#include "localcluster/apiserver/scale.h"
#include "localcluster/apiserver/schema_validation.h"
#include "localcluster/apiserver/server_side_apply.h"
#include "localcluster/apiserver/table.h"
#include "localcluster/apiserver/tls.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// The kind a CRD object defines (its storage version, else its first served one).
absl::StatusOr<ResourceType> TypeFromCrd(const json& crd) {
  const json& spec = crd.value("spec", json::object());
  const json& names = spec.value("names", json::object());
  ResourceType t;
  t.group = spec.value("group", "");
  t.plural = names.value("plural", "");
  t.singular = names.value("singular", "");
  t.kind = names.value("kind", "");
  t.short_names = names.value("shortNames", std::vector<std::string>{});
  t.categories = names.value("categories", std::vector<std::string>{});
  t.namespaced = spec.value("scope", "Namespaced") == "Namespaced";
  if (t.group.empty() || t.plural.empty() || t.kind.empty()) {
    return absl::InvalidArgumentError(
        "a CustomResourceDefinition needs spec.group, spec.names.plural and spec.names.kind");
  }
  if (crd["metadata"].value("name", "") != t.plural + "." + t.group) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata.name must be spec.names.plural+\".\"+spec.group (", t.plural, ".", t.group, ")"));
  }
  if (t.singular.empty()) t.singular = absl::AsciiStrToLower(t.kind);
  const json* chosen = nullptr;
  const json versions = spec.value("versions", json::array());
  for (const json& v : versions) {
    if (v.value("storage", false) || (chosen == nullptr && v.value("served", true))) chosen = &v;
  }
  if (chosen == nullptr)
    return absl::InvalidArgumentError("a CustomResourceDefinition needs spec.versions");
  t.version = chosen->value("name", "");
  t.status_subresource =
      chosen->contains("subresources") && (*chosen)["subresources"].contains("status");
  absl::StatusOr<std::optional<ScaleSubresource>> scale = ScaleSubresourceOf(*chosen);
  if (!scale.ok()) return scale.status();
  t.scale = *std::move(scale);
  t.printer_columns = chosen->value("additionalPrinterColumns", json::array());
  if (chosen->contains("schema") && (*chosen)["schema"].is_object()) {
    json schema = (*chosen)["schema"].value("openAPIV3Schema", json());
    if (schema.is_object()) t.schema = std::make_shared<const json>(std::move(schema));
  }
  return t;
}

json ResourceList(const std::string& group_version, const std::vector<ResourceType>& types) {
  json resources = json::array();
  const json verbs = {"create", "delete", "get", "list", "patch", "update", "watch"};
  for (const ResourceType& t : types) {
    if (t.GroupVersion() != group_version) continue;
    resources.push_back({{"name", t.plural},
                         {"singularName", t.singular},
                         {"namespaced", t.namespaced},
                         {"kind", t.kind},
                         {"verbs", verbs},
                         {"shortNames", t.short_names}});
    if (!t.categories.empty()) resources.back()["categories"] = t.categories;
    if (t.status_subresource) {
      resources.push_back({{"name", t.plural + "/status"},
                           {"singularName", ""},
                           {"namespaced", t.namespaced},
                           {"kind", t.kind},
                           {"verbs", {"get", "patch", "update"}}});
    }
    if (t.scale) {
      resources.push_back({{"name", t.plural + "/scale"},
                           {"singularName", ""},
                           {"namespaced", t.namespaced},
                           {"group", "autoscaling"},
                           {"version", "v1"},
                           {"kind", "Scale"},
                           {"verbs", {"get", "patch", "update"}}});
    }
    if (t.kind == "Pod") {
      resources.push_back({{"name", "pods/eviction"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"group", "policy"},
                           {"version", "v1"},
                           {"kind", "Eviction"},
                           {"verbs", {"create"}}});
      resources.push_back({{"name", "pods/log"},
                           {"singularName", ""},
                           {"namespaced", true},
                           {"kind", "Pod"},
                           {"verbs", {"get"}}});
    }
  }
  return {{"kind", "APIResourceList"},
          {"apiVersion", "v1"},
          {"groupVersion", group_version},
          {"resources", resources}};
}

// The key service account tokens are signed with: 32 bytes from OpenSSL's CSPRNG.
std::string SigningKey() {
  std::string key(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(key.size())) != 1) {
    LogError("local API server: no random bytes for the service account token key: ",
             ERR_get_error());
    std::abort();
  }
  return key;
}

}  // namespace

ApiServer::ApiServer(const ApiServerOptions& options, Clock* clock)
    : options_(options),
      clock_(clock),
      service_account_key_(SigningKey()),
      store_(clock, options.watch_history) {}

ApiServer::~ApiServer() {
  stopping_ = true;
  store_.WakeWatches();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string ApiServer::url() const {
  return absl::StrCat(options_.tls ? "https://" : "http://",
                      options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host, ":", port_);
}

std::string ApiServer::Kubeconfig(const std::string& default_namespace) const {
  std::string cluster = absl::StrCat("    server: ", url(), "\n");
  if (options_.tls)
    absl::StrAppend(&cluster, "    certificate-authority-data: ", absl::Base64Escape(ca_pem_),
                    "\n");
  std::string user = options_.token.empty()
                         ? "  user: {}\n"
                         : absl::StrCat("  user:\n    token: ", options_.token, "\n");
  return absl::StrCat("apiVersion: v1\nkind: Config\nclusters:\n- name: cohort-local\n  cluster:\n",
                      cluster, "users:\n- name: cohort-local\n", user,
                      "contexts:\n- name: cohort-local\n  context:\n    cluster: cohort-local\n    "
                      "user: cohort-local\n"
                      "    namespace: ",
                      default_namespace, "\ncurrent-context: cohort-local\n");
}

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                            Clock* clock) {
  std::unique_ptr<ApiServer> s(new ApiServer(options, clock));
  for (const ResourceType& t : BuiltinTypes()) s->store_.AddType(t);
  for (const char* ns : {"default", "kube-system", "kube-node-lease"}) {
    s->store_
        .Create(*s->store_.FindType("", "namespaces"), "",
                {{"metadata", {{"name", ns}}}, {"status", {{"phase", "Active"}}}})
        .IgnoreError();
  }
  if (options.tls) {
    absl::StatusOr<Certificate> cert = MakeSelfSignedCertificate(options.certificate_addresses);
    if (!cert.ok()) return cert.status();
    s->server_ = std::make_unique<httplib::SSLServer>(cert->cert, cert->key);
    s->ca_pem_ = cert->pem;
    X509_free(cert->cert);
    EVP_PKEY_free(cert->key);
  } else {
    s->server_ = std::make_unique<httplib::Server>();
  }
  if (!s->server_->is_valid())
    return absl::InternalError("could not set up the API server's HTTP server");
  // Every watch holds a thread for its whole life.
  s->server_->new_task_queue = [] { return new httplib::ThreadPool(128); };
  s->server_->set_keep_alive_max_count(100000);
  s->server_->set_tcp_nodelay(true);
  s->Route();
  s->port_ = options.port == 0
                 ? s->server_->bind_to_any_port(options.host)
                 : (s->server_->bind_to_port(options.host, options.port) ? options.port : -1);
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("the API server cannot listen on ", options.host,
                                               ":", options.port, "; pick another --port"));
  }
  s->thread_ = std::thread([server = s->server_.get()] { server->listen_after_bind(); });
  // httplib's stop() does nothing until the loop runs, so a server stopped right after Start()
  // would never end: return only once it runs.
  while (!s->server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return s;
}

void ApiServer::Route() {
  httplib::Server& svr = *server_;
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.token.empty() || req.path == "/healthz" || req.path == "/readyz" ||
        req.path == "/livez") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    absl::StatusOr<UserInfo> user = Authenticate(req);
    absl::Status allowed = user.ok() ? Authorize(*user, req) : user.status();
    if (!allowed.ok()) {
      Reply(res, allowed);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  RouteDiscovery();
  // Everything else under /api and /apis names a resource: one handler per verb.
  for (const char* prefix : {R"(/api/.+)", R"(/apis/.+)"}) {
    svr.Get(prefix, ForResource("GET", &ApiServer::ServeGet));
    svr.Post(prefix, ForResource("POST", &ApiServer::ServeCreate));
    svr.Put(prefix, ForResource("PUT", &ApiServer::ServeUpdate));
    svr.Patch(prefix, ForResource("PATCH", &ApiServer::ServePatch));
    svr.Delete(prefix, ForResource("DELETE", &ApiServer::ServeDelete));
  }
  // A handler that throws answers 500 naming what went wrong (not the error handler's 404).
  svr.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr thrown) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(thrown);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("local API server: ", req.method, " ", req.path, ": ", what);
        Reply(res, absl::InternalError(absl::StrCat("the server failed on ", req.method, " ",
                                                    req.path, ": ", what)));
      });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    Reply(res, absl::NotFoundError(absl::StrCat(
                   "the server could not find the requested resource (", req.path, ")")));
    res.status = 404;
  });
}

void ApiServer::RouteDiscovery() {
  httplib::Server& svr = *server_;
  for (const char* probe : {"/healthz", "/readyz", "/livez"}) {
    svr.Get(probe, [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok", "text/plain");
    });
  }
  svr.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    Reply(res, json{{"major", "1"},
                    {"minor", "32"},
                    {"gitVersion", "v1.32.0-cohort-local"},
                    {"platform", "linux/amd64"}});
  });
  // OpenAPI v3 (openapi.h): what kubectl reads for server-side field validation and explain.
  svr.Get("/openapi/v3", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, OpenApiV3Index(store_.Types()));
  });
  svr.Get(R"(/openapi/v3/(api/v1|apis/[^/]+/[^/]+))",
          [this](const httplib::Request& req, httplib::Response& res) {
            std::optional<json> document = OpenApiV3Document(req.matches[1].str(), store_.Types());
            if (!document) {
              Reply(res, absl::NotFoundError(absl::StrCat(
                             "the server could not find the requested resource (", req.path, ")")));
              return;
            }
            Reply(res, *document);
          });
  svr.Get("/api", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, json{{"kind", "APIVersions"},
                    {"versions", {"v1"}},
                    {"serverAddressByClientCIDRs",
                     {{{"clientCIDR", "0.0.0.0/0"},
                       {"serverAddress", url().substr(url().find("://") + 3)}}}}});
  });
  svr.Get("/apis", [this](const httplib::Request&, httplib::Response& res) {
    json groups = json::array();
    std::set<std::string> seen;
    for (const ResourceType& t : store_.Types()) {
      if (t.group.empty() || !seen.insert(t.GroupVersion()).second) continue;
      json version = {{"groupVersion", t.GroupVersion()}, {"version", t.version}};
      groups.push_back({{"name", t.group}, {"versions", {version}}, {"preferredVersion", version}});
    }
    Reply(res, json{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}});
  });
  svr.Get("/api/v1", [this](const httplib::Request&, httplib::Response& res) {
    Reply(res, ResourceList("v1", store_.Types()));
  });
  svr.Get(R"(/apis/([^/]+)/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::string gv = absl::StrCat(req.matches[1].str(), "/", req.matches[2].str());
    json list = ResourceList(gv, store_.Types());
    if (list["resources"].empty()) {
      Reply(res, absl::NotFoundError(
                     absl::StrCat("the server could not find the requested resource (", gv, ")")));
      return;
    }
    Reply(res, list);
  });
}

// The requests that are not a plain read or write of an object: a subresource with a verb of
// its own, or a kind that is a question rather than an object. Tried before the verb's handler.
const ApiServer::Special ApiServer::kSpecials[] = {
    {"GET", "log", "", &ApiServer::ServeLog},
    {"POST", "token", "", &ApiServer::ServeToken},
    {"POST", "eviction", "", &ApiServer::ServeEviction},
    {"GET", "scale", "", &ApiServer::ServeScale},
    {"PUT", "scale", "", &ApiServer::ServeScale},
    {"PATCH", "scale", "", &ApiServer::ServeScale},
    {"POST", "", "SelfSubjectAccessReview", &ApiServer::ServeAccessReview},
    {"POST", "", "SubjectAccessReview", &ApiServer::ServeAccessReview},
};

std::function<void(const httplib::Request&, httplib::Response&)> ApiServer::ForResource(
    const char* method, ResourceHandler serve) {
  return [this, method, serve](const httplib::Request& req, httplib::Response& res) {
    absl::StatusOr<ResourceTarget> target = ParseTarget(store_, req.path);
    if (!target.ok()) {
      Reply(res, target.status());
      return;
    }
    for (const Special& special : kSpecials) {
      if (special.method != std::string_view(method)) continue;
      if (*special.subresource != '\0' ? target->subresource == special.subresource
                                       : target->type.kind == special.kind) {
        (this->*special.serve)(*target, req, res);
        return;
      }
    }
    (this->*serve)(*target, req, res);
  };
}

void ApiServer::ServeGet(const ResourceTarget& t, const httplib::Request& req,
                         httplib::Response& res) {
  bool table = absl::StrContains(req.get_header_value("Accept"), "as=Table");
  if (!t.name.empty()) {
    absl::StatusOr<json> obj = store_.Get(t.type, t.ns, t.name);
    if (obj.ok() && table)
      obj = ToTable(t.type, {*obj}, clock_->Now(), absl::StrCat(store_.CurrentVersion()));
    Reply(res, obj);
    return;
  }
  absl::StatusOr<Selector> labels = Selector::ParseLabels(req.get_param_value("labelSelector"));
  absl::StatusOr<Selector> fields = Selector::ParseFields(req.get_param_value("fieldSelector"));
  if (!labels.ok() || !fields.ok()) {
    Reply(res, absl::FailedPreconditionError(!labels.ok() ? labels.status().message()
                                                          : fields.status().message()));
    return;
  }
  std::string watch = req.get_param_value("watch");
  if (watch == "1" || watch == "true") {
    Watch(t.type, t.ns, t.name, *labels, *fields, req, res);
    return;
  }
  json list = store_.List(t.type, t.ns, *labels, *fields);
  if (table) {
    std::vector<json> items(list["items"].begin(), list["items"].end());
    Reply(res, ToTable(t.type, items, clock_->Now(), list["metadata"]["resourceVersion"]));
    return;
  }
  Reply(res, list);
}

void ApiServer::ServeDelete(const ResourceTarget& t, const httplib::Request& req,
                            httplib::Response& res) {
  if (t.name.empty()) {
    Reply(res, absl::UnimplementedError(
                   "deleting a collection is not supported; delete objects by name"));
    return;
  }
  std::optional<int64_t> grace;
  int64_t g;
  if (absl::SimpleAtoi(req.get_param_value("gracePeriodSeconds"), &g)) grace = g;
  json options = json::parse(req.body, nullptr, false);
  if (options.is_object() && options.contains("gracePeriodSeconds") &&
      options["gracePeriodSeconds"].is_number()) {
    grace = options["gracePeriodSeconds"].get<int64_t>();
  }
  absl::StatusOr<json> deleted = store_.Delete(t.type, t.ns, t.name, grace);
  AfterDelete(t.type, deleted);
  Reply(res, deleted);
}

absl::Status ApiServer::PrepareWrite(const ResourceTarget& t, const httplib::Request& req,
                                     WriteRequest& write) {
  absl::StatusOr<json> body = ParseBody(req.body, req.get_header_value("Content-Type"));
  if (!body.ok()) return body.status();
  write.body = *std::move(body);
  // A custom resource is pruned, defaulted and validated against its CRD's schema on every
  // write (schema_validation.h); the unknown fields fieldValidation=Warn drops come back as
  // Warning headers.
  if (t.type.schema != nullptr) {
    CustomResourceWrite cr_write;
    cr_write.verb = req.method == "POST"  ? CustomResourceWrite::Verb::kCreate
                    : req.method == "PUT" ? CustomResourceWrite::Verb::kUpdate
                                          : CustomResourceWrite::Verb::kPatch;
    absl::StatusOr<FieldValidation> validation = ParseFieldValidation(
        req.get_param_value("fieldValidation"), req.method == "POST"  ? "CreateOptions"
                                                : req.method == "PUT" ? "UpdateOptions"
                                                                      : "PatchOptions");
    if (!validation.ok()) return validation.status();
    cr_write.field_validation = *validation;
    write.admit = [type = &t.type, cr_write, warnings = &write.warnings](json& object, const json*,
                                                                         bool status_only) {
      CustomResourceWrite this_write = cr_write;
      this_write.status_only = status_only;
      return AdmitCustomResource(*type, this_write, object, warnings);
    };
  }
  if (t.type.group.empty() && t.type.kind == "Pod") {
    write.admit = [](json& object, const json* current, bool status_only) {
      return status_only ? absl::OkStatus() : ValidatePodWrite(object, current);
    };
  }
  // Field ownership (server_side_apply.h): every write but an apply records what its manager
  // changed in metadata.managedFields, against the object it replaces.
  write.manager =
      FieldManagerOf(req.get_param_value("fieldManager"), req.get_header_value("User-Agent"));
  write.record = [this, type = &t.type, manager = write.manager, admit = write.admit](
                     json& object, const json* current, bool status_only) {
    if (admit) {
      if (absl::Status s = admit(object, current, status_only); !s.ok()) return s;
    }
    RecordUpdate(current, object, manager, type->status_subresource, clock_->Now());
    return absl::OkStatus();
  };
  return absl::OkStatus();
}

void ApiServer::FinishWrite(const WriteRequest& write, const absl::StatusOr<json>& result,
                            httplib::Response& res, int ok_code) {
  for (const std::string& w : write.warnings) res.set_header("Warning", WarningHeader(w));
  Reply(res, result, ok_code);
}

void ApiServer::ServeCreate(const ResourceTarget& t, const httplib::Request& req,
                            httplib::Response& res) {
  WriteRequest write;
  if (absl::Status prepared = PrepareWrite(t, req, write); !prepared.ok()) {
    Reply(res, prepared);
    return;
  }
  if (!t.name.empty()) {
    Reply(res, absl::UnimplementedError("POST goes to the collection, not to an object"));
    return;
  }
  if (absl::Status creatable = BeforeCreate(t.type, write.body); !creatable.ok()) {
    Reply(res, creatable);
    return;
  }
  absl::StatusOr<json> result =
      store_.Create(t.type, t.type.namespaced ? t.ns : "", write.body, write.record);
  FinishWrite(write, AfterWrite(t.type, std::move(result), /*status_only=*/false), res, 201);
}

void ApiServer::ServeUpdate(const ResourceTarget& t, const httplib::Request& req,
                            httplib::Response& res) {
  WriteRequest write;
  if (absl::Status prepared = PrepareWrite(t, req, write); !prepared.ok()) {
    Reply(res, prepared);
    return;
  }
  const bool status = t.subresource == "status";
  absl::StatusOr<json> result =
      store_.Update(t.type, t.ns, t.name, write.body, status, write.record);
  FinishWrite(write, AfterWrite(t.type, std::move(result), status), res);
}

void ApiServer::ServePatch(const ResourceTarget& t, const httplib::Request& req,
                           httplib::Response& res) {
  WriteRequest write;
  if (absl::Status prepared = PrepareWrite(t, req, write); !prepared.ok()) {
    Reply(res, prepared);
    return;
  }
  const bool status = t.subresource == "status";
  const std::string content_type = req.get_header_value("Content-Type");
  absl::StatusOr<json> result;
  if (absl::StrContains(content_type, "apply-patch")) {
    if (!t.subresource.empty()) {
      Reply(res, absl::UnimplementedError(absl::StrCat(
                     "server-side apply to the ", t.subresource,
                     " subresource is not supported here; apply the object, or patch its ",
                     t.subresource)));
      return;
    }
    const bool existed = store_.Get(t.type, t.ns, t.name).ok();
    const std::string force = req.get_param_value("force");
    result = Apply(t.type, t.ns, t.name, write.body, write.manager, force == "true" || force == "1",
                   write.admit);
    result = AfterWrite(t.type, std::move(result), /*status_only=*/false);
    // 201 when the apply created the object, as Kubernetes answers.
    FinishWrite(write, result, res, result.ok() && !existed ? 201 : 200);
    return;
  }
  if (absl::StrContains(content_type, "json-patch+json")) {
    absl::StatusOr<json> current = store_.Get(t.type, t.ns, t.name);
    if (!current.ok()) {
      Reply(res, current.status());
      return;
    }
    try {
      json patched = current->patch(write.body);
      result = store_.Update(t.type, t.ns, t.name, patched, status, write.record);
    } catch (const json::exception& e) {
      result =
          absl::InvalidArgumentError(absl::StrCat("the JSON patch cannot be applied: ", e.what()));
    }
  } else {
    result = store_.Patch(t.type, t.ns, t.name, write.body, status, write.record);
  }
  FinishWrite(write, AfterWrite(t.type, std::move(result), status), res);
}

absl::Status ApiServer::BeforeCreate(const ResourceType& type, const json& object) {
  if (type.kind != "CustomResourceDefinition") return absl::OkStatus();
  return TypeFromCrd(object).status();
}

absl::StatusOr<json> ApiServer::AfterWrite(const ResourceType& type, absl::StatusOr<json> written,
                                           bool status_only) {
  if (!written.ok() || status_only || type.kind != "CustomResourceDefinition") return written;
  return Establish(*written);
}

void ApiServer::AfterDelete(const ResourceType& type, const absl::StatusOr<json>& deleted) {
  if (!deleted.ok() || type.kind != "CustomResourceDefinition") return;
  if (absl::StatusOr<ResourceType> defined = TypeFromCrd(*deleted); defined.ok())
    store_.RemoveType(defined->Key());
}

void ApiServer::ServeEviction(const ResourceTarget& t, const httplib::Request& req,
                              httplib::Response& res) {
  std::optional<json> body = BodyOrAnswer(req, res);
  if (!body) return;
  Reply(res, Evict(t.type, t.ns, t.name));
}

absl::StatusOr<json> ApiServer::Apply(const ResourceType& type, const std::string& ns,
                                      const std::string& name, const json& applied,
                                      const std::string& manager, bool force,
                                      const ObjectStore::Admission& admit) {
  if (!applied.is_object()) return absl::InvalidArgumentError("the apply patch must be an object");
  json body = applied;
  const std::string named = body.contains("metadata") && body["metadata"].is_object()
                                ? body["metadata"].value("name", "")
                                : "";
  if (named != name) {
    return absl::InvalidArgumentError(absl::StrCat("the apply patch names \"", named,
                                                   "\" but the request names \"", name,
                                                   "\"; metadata.name must match the URL"));
  }
  if (type.namespaced) body["metadata"]["namespace"] = ns;
  // Optimistic: read, merge, write with the version read; another write in between (or a create
  // of the same name) means again.
  absl::StatusOr<json> applied_object;
  absl::Status raced = kube::RetryOnConflict([&]() -> absl::Status {
    absl::StatusOr<json> current = store_.Get(type, ns, name);
    if (!current.ok() && current.status().code() != absl::StatusCode::kNotFound)
      return current.status();
    if (!current.ok()) {
      if (absl::Status creatable = BeforeCreate(type, body); !creatable.ok()) return creatable;
    }
    absl::StatusOr<json> merged = ServerSideApply(current.ok() ? &*current : nullptr, body, manager,
                                                  force, type.status_subresource, clock_->Now());
    if (!merged.ok()) {
      // The answer (a field owned by another manager is a conflict too, but applying again
      // cannot change it): not tried again.
      applied_object = merged.status();
      return absl::OkStatus();
    }
    applied_object = current.ok() ? store_.Update(type, ns, name, *merged, false, admit)
                                  : store_.Create(type, ns, *merged, admit);
    if (absl::IsAlreadyExists(applied_object.status()))
      return absl::AbortedError("created meanwhile");
    return absl::IsAborted(applied_object.status()) ? applied_object.status() : absl::OkStatus();
  });
  if (absl::IsAborted(raced)) {
    return absl::AbortedError(
        absl::StrCat(name, " kept changing while it was applied; apply again"));
  }
  if (!raced.ok()) return raced;
  return applied_object;
}

absl::StatusOr<json> ApiServer::Establish(const json& crd) {
  absl::StatusOr<ResourceType> t = TypeFromCrd(crd);
  if (!t.ok()) return t.status();
  store_.AddType(*t);
  json status = {{"acceptedNames", crd["spec"]["names"]}, {"storedVersions", {t->version}}};
  kube::SetCondition(status["conditions"],
                     kube::Condition("NamesAccepted", "True", "NoConflicts", "no conflicts found"),
                     clock_->Now());
  kube::SetCondition(status["conditions"],
                     kube::Condition("Established", "True", "InitialNamesAccepted",
                                     "the initial names have been accepted"),
                     clock_->Now());
  if (crd.contains("status") && crd["status"].value("conditions", json::array()).size() == 2)
    return crd;  // Done before.
  return store_.Patch(*store_.FindType("apiextensions.k8s.io", "customresourcedefinitions"), "",
                      crd["metadata"]["name"], {{"status", status}}, /*status_only=*/true);
}

absl::StatusOr<json> ApiServer::Evict(const ResourceType& pods, const std::string& ns,
                                      const std::string& name) {
  absl::StatusOr<json> pod = store_.Get(pods, ns, name);
  if (!pod.ok()) return pod.status();
  json conditions = kube::Member(*pod, "status", "conditions");
  if (kube::SetCondition(conditions,
                         kube::Condition("DisruptionTarget", "True", "EvictionByEvictionAPI",
                                         "Eviction API: evicting"),
                         clock_->Now())) {
    absl::StatusOr<json> marked_pod = store_.Patch(
        pods, ns, name, {{"status", {{"conditions", conditions}}}}, /*status_only=*/true);
    if (!marked_pod.ok()) return marked_pod.status();
  }
  absl::StatusOr<json> deleted = store_.Delete(pods, ns, name, std::nullopt);
  if (!deleted.ok()) return deleted.status();
  return json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Success"}, {"code", 201}};
}

void ApiServer::ServeLog(const ResourceTarget& t, const httplib::Request& req,
                         httplib::Response& res) {
  const std::string& ns = t.ns;
  const std::string& name = t.name;
  absl::StatusOr<json> pod = store_.Get(*store_.FindType("", "pods"), ns, name);
  if (!pod.ok()) {
    Reply(res, pod.status());
    return;
  }
  if (!options_.pod_logs) {
    Reply(res, absl::UnimplementedError("this API server has no kubelet, so it serves no logs"));
    return;
  }
  std::string container = req.get_param_value("container");
  if (container.empty()) {
    const json containers = (*pod)["spec"].value("containers", json::array());
    if (!containers.empty()) container = containers[0].value("name", "");
  }
  absl::StatusOr<std::string> text = options_.pod_logs(ns, name, container);
  if (!text.ok()) {
    Reply(res, text.status());
    return;
  }
  int64_t tail = -1;
  if (absl::SimpleAtoi(req.get_param_value("tailLines"), &tail) && tail >= 0) {
    std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();  // After the last newline.
    size_t from = lines.size() > static_cast<size_t>(tail) ? lines.size() - tail : 0;
    std::string last;
    for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&last, lines[i], "\n");
    *text = std::move(last);
  }
  res.status = 200;
  res.set_content(*text, "text/plain");
}

}  // namespace cohort::local
