#include "localcluster/apiserver/api_server.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

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
#include "localcluster/apiserver/schema_validation.h"
#include "localcluster/apiserver/server_side_apply.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

// --- TLS: one self-signed certificate for 127.0.0.1, localhost and any further addresses, that
// is its own CA. ---

struct Certificate {
  X509* cert = nullptr;
  EVP_PKEY* key = nullptr;
  std::string pem;
};

absl::StatusOr<Certificate> MakeSelfSignedCertificate(const std::vector<std::string>& addresses) {
  Certificate c;
  c.key = EVP_EC_gen("P-256");
  c.cert = X509_new();
  if (c.key == nullptr || c.cert == nullptr)
    return absl::InternalError("OpenSSL could not make a key");
  X509_set_version(c.cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(c.cert), static_cast<long>(time(nullptr)));
  X509_gmtime_adj(X509_getm_notBefore(c.cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.cert), 3600L * 24 * 365);
  X509_set_pubkey(c.cert, c.key);
  X509_NAME* name = X509_get_subject_name(c.cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("cohort-local-cluster"), -1, -1,
                             0);
  X509_set_issuer_name(c.cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, c.cert, c.cert, nullptr, nullptr, 0);
  std::string names = "IP:127.0.0.1,DNS:localhost";
  for (const std::string& a : addresses) absl::StrAppend(&names, ",IP:", a);
  for (auto [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                            std::pair{NID_key_usage, "critical,digitalSignature,keyCertSign"},
                            std::pair{NID_subject_alt_name, names.c_str()}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) return absl::InternalError("OpenSSL could not add a certificate extension");
    X509_add_ext(c.cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(c.cert, c.key, EVP_sha256()) == 0)
    return absl::InternalError("OpenSSL could not sign");
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, c.cert);
  char* data = nullptr;
  long length = BIO_get_mem_data(bio, &data);
  c.pem.assign(data, length);
  BIO_free(bio);
  return c;
}

// --- Responses ---

const char* ReasonOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return "NotFound";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case absl::StatusCode::kAborted:
      return "Conflict";
    case absl::StatusCode::kInvalidArgument:
      return "Invalid";
    case absl::StatusCode::kOutOfRange:
      return "Expired";
    case absl::StatusCode::kUnauthenticated:
      return "Unauthorized";
    case absl::StatusCode::kPermissionDenied:
      return "Forbidden";
    case absl::StatusCode::kUnimplemented:
      return "MethodNotAllowed";
    case absl::StatusCode::kFailedPrecondition:
      return "BadRequest";
    default:
      return "InternalError";
  }
}

int HttpCodeOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kInvalidArgument:
      return 422;
    case absl::StatusCode::kOutOfRange:
      return 410;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnimplemented:
      return 405;
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    default:
      return 500;
  }
}

json StatusObject(const absl::Status& s) {
  if (std::optional<json> body = StatusBody(s)) return *body;  // Built whole, with its details.
  return {{"kind", "Status"},
          {"apiVersion", "v1"},
          {"metadata", json::object()},
          {"status", "Failure"},
          {"message", std::string(s.message())},
          {"reason", ReasonOf(s.code())},
          {"code", HttpCodeOf(s.code())}};
}

void Reply(httplib::Response& res, const absl::StatusOr<json>& result, int ok_code = 200) {
  if (result.ok()) {
    res.status = ok_code;
    res.set_content(result->dump(), "application/json");
  } else {
    json status = StatusObject(result.status());
    res.status = status.value("code", HttpCodeOf(result.status().code()));
    res.set_content(status.dump(), "application/json");
  }
}

// A Warning response header (RFC 7234, code 299) as the API server sends one; kubectl prints
// its text as "Warning: <text>".
std::string WarningHeader(const std::string& text) {
  std::string quoted;
  for (char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return absl::StrCat("299 - \"", quoted, "\"");
}

// "5s", "3m", "2h", "4d": kubectl's AGE.
std::string HumanAge(absl::Duration d) {
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 3600 * 2) return absl::StrCat(s / 60, "m", s % 60 ? absl::StrCat(s % 60, "s") : "");
  if (s < 86400 * 2)
    return absl::StrCat(s / 3600, "h", (s % 3600) / 60 ? absl::StrCat((s % 3600) / 60, "m") : "");
  return absl::StrCat(s / 86400, "d");
}

// A JSONPath of the simple form printer columns use: ".status.phase".
json Lookup(const json& object, const std::string& path) {
  const json* node = &object;
  for (absl::string_view part : absl::StrSplit(path, '.', absl::SkipEmpty())) {
    if (!node->is_object() || !node->contains(std::string(part))) return nullptr;
    node = &(*node)[std::string(part)];
  }
  return *node;
}

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

// kubectl get asks for a Table; the columns are the CRD's printer columns or a kind's usual ones.
json ToTable(const ResourceType& t, const std::vector<json>& objects, absl::Time now,
             const std::string& resource_version) {
  json columns = json::array({{{"name", "Name"},
                               {"type", "string"},
                               {"format", "name"},
                               {"description", "Name of the object"},
                               {"priority", 0}}});
  std::vector<std::function<json(const json&)>> cells = {
      [](const json& o) { return o["metadata"].value("name", ""); }};
  auto age = [now](const json& o) -> json {
    std::optional<absl::Time> created = ParseRfc3339(o["metadata"].value("creationTimestamp", ""));
    return created ? json(HumanAge(now - *created)) : json("<unknown>");
  };
  auto column = [&](const std::string& name, const std::string& type, int priority, auto cell) {
    columns.push_back({{"name", name},
                       {"type", type},
                       {"format", ""},
                       {"description", name},
                       {"priority", priority}});
    cells.push_back(cell);
  };
  if (!t.printer_columns.empty()) {
    for (const json& c : t.printer_columns) {
      std::string path = c.value("jsonPath", "");
      std::string type = c.value("type", "string");
      column(c.value("name", ""), type, c.value("priority", 0),
             [path, type, age](const json& o) -> json {
               if (type == "date") {
                 std::optional<absl::Time> at = ParseRfc3339(
                     Lookup(o, path).is_string() ? Lookup(o, path).get<std::string>() : "");
                 return at ? age(json{{"metadata", {{"creationTimestamp", FormatRfc3339(*at)}}}})
                           : json("<unknown>");
               }
               json v = Lookup(o, path);
               return v.is_null() ? json("") : v;
             });
    }
  } else if (t.kind == "Pod") {
    column("Ready", "string", 0, [](const json& o) -> json {
      // As Kubernetes counts: the containers, plus native sidecars (init containers that always
      // restart), ready out of all.
      const json& status = o.value("status", json::object());
      size_t total = o["spec"].value("containers", json::array()).size();
      std::set<std::string> sidecars;
      for (const json& c : o["spec"].value("initContainers", json::array())) {
        if (c.value("restartPolicy", "") == "Always") sidecars.insert(c.value("name", ""));
      }
      total += sidecars.size();
      int ready = 0;
      for (const json& s : status.value("containerStatuses", json::array()))
        ready += s.value("ready", false) ? 1 : 0;
      for (const json& s : status.value("initContainerStatuses", json::array())) {
        ready += sidecars.count(s.value("name", "")) && s.value("ready", false) ? 1 : 0;
      }
      return absl::StrCat(ready, "/", total);
    });
    column("Status", "string", 0, [](const json& o) -> json {
      if (o["metadata"].contains("deletionTimestamp")) return "Terminating";
      const json& st = o.value("status", json::object());
      for (const json& s : st.value("containerStatuses", json::array())) {
        const json& state = s.value("state", json::object());
        if (state.contains("terminated") && state["terminated"].value("exitCode", 0) != 0) {
          return state["terminated"].value("reason", "Error");
        }
      }
      return st.value("phase", "Pending");
    });
    column("Restarts", "integer", 0, [](const json& o) -> json {
      int n = 0;
      for (const json& s :
           o.value("status", json::object()).value("containerStatuses", json::array())) {
        n += s.value("restartCount", 0);
      }
      return n;
    });
    column("Age", "string", 0, age);
    column("IP", "string", 1, [](const json& o) -> json {
      return o.value("status", json::object()).value("podIP", "<none>");
    });
    column("Node", "string", 1,
           [](const json& o) -> json { return o["spec"].value("nodeName", "<none>"); });
  } else if (t.kind == "Node") {
    // As kubectl prints a node: Ready when its Ready condition is True, else NotReady.
    column("Status", "string", 0, [](const json& o) -> json {
      for (const json& c : o.value("status", json::object()).value("conditions", json::array())) {
        if (c.value("type", "") == "Ready")
          return c.value("status", "") == "True" ? "Ready" : "NotReady";
      }
      return "Unknown";
    });
    column("Age", "string", 0, age);
    column("Internal-IP", "string", 1, [](const json& o) -> json {
      for (const json& a : o.value("status", json::object()).value("addresses", json::array())) {
        if (a.value("type", "") == "InternalIP") return a.value("address", "");
      }
      return "<none>";
    });
  } else {
    column("Age", "string", 0, age);
  }
  json rows = json::array();
  for (const json& o : objects) {
    json row_cells = json::array();
    for (const auto& cell : cells) row_cells.push_back(cell(o));
    rows.push_back({{"cells", row_cells},
                    {"object",
                     {{"kind", "PartialObjectMetadata"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", o["metadata"]}}}});
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", resource_version}}},
          {"columnDefinitions", columns},
          {"rows", rows}};
}

absl::StatusOr<ResourceTarget> ParseTarget(ObjectStore& store, const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  std::string group;
  size_t i;
  if (parts.size() >= 2 && parts[0] == "api") {
    i = 2;
  } else if (parts.size() >= 3 && parts[0] == "apis") {
    group = parts[1];
    i = 3;
  } else {
    return absl::NotFoundError(
        absl::StrCat("the server could not find the requested resource (", path, ")"));
  }
  ResourceTarget t;
  std::vector<std::string> rest(parts.begin() + i, parts.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    t.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty()) return absl::NotFoundError(absl::StrCat("no resource in ", path));
  std::optional<ResourceType> type = store.FindType(group, rest[0]);
  std::string version = group.empty() ? parts[1] : parts[2];
  if (!type || type->version != version) {
    return absl::NotFoundError(absl::StrCat("the server could not find the requested resource (",
                                            group.empty() ? "" : group + "/", version, ", ",
                                            rest[0], ")"));
  }
  t.type = *type;
  if (rest.size() >= 2) t.name = rest[1];
  if (rest.size() >= 3) t.subresource = rest[2];
  if (rest.size() > 3 ||
      (!t.subresource.empty() && t.subresource != "status" && t.subresource != "eviction" &&
       t.subresource != "log" && !(t.subresource == "token" && t.type.kind == "ServiceAccount"))) {
    return absl::NotFoundError(absl::StrCat("the server does not serve ", path));
  }
  return t;
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

absl::StatusOr<json> ParseBody(const std::string& body, const std::string& content_type) {
  if (absl::StrContains(content_type, kKubeProtobufMediaType)) return DecodeKubeProtobuf(body);
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the request body (Content-Type: ", content_type.empty() ? "none" : content_type,
        ") is not valid JSON; this server reads JSON (and the protobuf of a few kinds typed "
        "clients write)"));
  }
  return parsed;
}

// The request's body (ParseBody); nullopt once its error is answered.
std::optional<json> BodyOrAnswer(const httplib::Request& req, httplib::Response& res) {
  absl::StatusOr<json> body = ParseBody(req.body, req.get_header_value("Content-Type"));
  if (!body.ok()) {
    Reply(res, body.status());
    return std::nullopt;
  }
  return *std::move(body);
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

void ApiServer::ServeEviction(const ResourceTarget& t, const httplib::Request& req,
                              httplib::Response& res) {
  std::optional<json> body = BodyOrAnswer(req, res);
  if (!body) return;
  Reply(res, Evict(t.type, t.ns, t.name));
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

void ApiServer::Watch(const ResourceType& type, const std::string& ns, const std::string& name,
                      const Selector& labels, const Selector& fields, const httplib::Request& req,
                      httplib::Response& res) {
  int64_t timeout_seconds;
  if (!absl::SimpleAtoi(req.get_param_value("timeoutSeconds"), &timeout_seconds))
    timeout_seconds = 1800;
  bool bookmarks = req.get_param_value("allowWatchBookmarks") == "true";
  // kubectl get -w asks for Tables, as for its first list: then each event's object is a Table of
  // one row, the column definitions in the first event only (the client keeps them).
  bool table = absl::StrContains(req.get_header_value("Accept"), "as=Table");
  std::string rv = req.get_param_value("resourceVersion");
  struct State {
    int64_t after = 0;
    bool started = false;
    bool columns_sent = false;
    absl::Time deadline;
    absl::Time last_sent;
  };
  auto state = std::make_shared<State>();
  state->deadline = clock_->Now() + absl::Seconds(timeout_seconds);
  state->last_sent = clock_->Now();
  auto event = [this, type, table, state](const std::string& event_type,
                                          const json& object) -> json {
    if (!table) return {{"type", event_type}, {"object", object}};
    json rows =
        ToTable(type, {object}, clock_->Now(), object["metadata"].value("resourceVersion", ""));
    if (state->columns_sent) rows["columnDefinitions"] = json::array();
    state->columns_sent = true;
    return {{"type", event_type}, {"object", rows}};
  };
  std::vector<std::string> initial;
  // A watch-list (client-go's reflectors and Helm's --wait send sendInitialEvents=true): the
  // current state as ADDED events, then a BOOKMARK annotated k8s.io/initial-events-end, then the
  // changes after it.
  const bool initial_events = req.get_param_value("sendInitialEvents") == "true";
  if (rv.empty() || rv == "0" || initial_events) {
    // From now, starting with the current state as ADDED events.
    json list = store_.List(type, ns, labels, fields);
    for (const json& o : list["items"]) {
      if (name.empty() || o["metadata"].value("name", "") == name)
        initial.push_back(event("ADDED", o).dump() + "\n");
    }
    const std::string listed = list["metadata"]["resourceVersion"].get<std::string>();
    state->after = std::stoll(listed);
    if (initial_events) {
      json marker = {{"kind", type.kind},
                     {"apiVersion", type.GroupVersion()},
                     {"metadata",
                      {{"resourceVersion", listed},
                       {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
      initial.push_back(json{{"type", "BOOKMARK"}, {"object", marker}}.dump() + "\n");
    }
  } else if (!absl::SimpleAtoi(rv, &state->after)) {
    Reply(res, absl::FailedPreconditionError(
                   absl::StrCat("resourceVersion '", rv, "' is not a number")));
    return;
  }
  // Not plain "application/json": httplib would gzip the stream for clients that accept it (Go's
  // do), and the compressor holds events back until the stream ends.
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [this, type, ns, name, labels, fields, bookmarks, table, state, event,
       initial = std::move(initial)](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& event) {
          std::string line = event.dump() + "\n";
          state->last_sent = clock_->Now();
          return sink.write(line.data(), line.size());
        };
        if (!state->started) {
          state->started = true;
          for (const std::string& line : initial) {
            if (!sink.write(line.data(), line.size())) return false;
          }
        }
        if (stopping_ || clock_->Now() >= state->deadline) {
          sink.done();
          return true;
        }
        absl::StatusOr<std::vector<ObjectStore::WatchEvent>> events = store_.WaitForEvents(
            type, ns, &state->after, std::min(state->deadline - clock_->Now(), absl::Seconds(1)));
        if (!events.ok()) {
          send({{"type", "ERROR"}, {"object", StatusObject(events.status())}});
          sink.done();
          return true;
        }
        for (const ObjectStore::WatchEvent& e : *events) {
          if (!name.empty() && (*e.object)["metadata"].value("name", "") != name) continue;
          if (!labels.Matches(*e.object) || !fields.Matches(*e.object)) continue;
          if (!send(event(e.type, *e.object))) return false;
        }
        if (bookmarks && clock_->Now() - state->last_sent > absl::Seconds(5)) {
          json marker = {{"kind", type.kind},
                         {"apiVersion", type.GroupVersion()},
                         {"metadata", {{"resourceVersion", absl::StrCat(state->after)}}}};
          if (table) {
            marker = {{"kind", "Table"},
                      {"apiVersion", "meta.k8s.io/v1"},
                      {"metadata", marker["metadata"]},
                      {"columnDefinitions", json::array()},
                      {"rows", json::array()}};
          }
          json bookmark = {{"type", "BOOKMARK"}, {"object", marker}};
          if (!send(bookmark)) return false;
        }
        return sink.is_writable();
      });
}

}  // namespace cohort::local
