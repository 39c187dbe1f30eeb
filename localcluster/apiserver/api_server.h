#pragma once

#include <functional>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "localcluster/apiserver/object_store.h"
#include "localcluster/apiserver/rbac.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace cohort::local {

// Where a request under /api or /apis points: /api/v1/... or /apis/<group>/<version>/...
struct ResourceTarget {
  ResourceType type;
  std::string ns;
  std::string name;         // Empty: the collection.
  std::string subresource;  // "status", "scale", "eviction", "log", "token" (service accounts)
                            // or empty.
};

struct ApiServerOptions {
  std::string host = "127.0.0.1";  // The address it listens on ("0.0.0.0": every interface).
  // Further IP addresses the certificate is valid for (besides 127.0.0.1 and localhost), e.g. the
  // gateway of the podman network through which containers reach the server.
  std::vector<std::string> certificate_addresses;
  int port = 0;       // 0: any free port.
  bool tls = true;    // HTTPS with a self-signed certificate made at start; false: plain HTTP.
  std::string token;  // Required as "Authorization: Bearer <token>"; empty: no authentication.
  size_t watch_history = 50000;  // Changes kept for watches; older resourceVersions get 410.
  // The output of a pod's container so far, for GET .../pods/<name>/log (kubectl logs); unset:
  // logs are not served.
  std::function<absl::StatusOr<std::string>(const std::string& ns, const std::string& pod,
                                            const std::string& container)>
      pod_logs;
};

// The subset of the Kubernetes API that cohort-operator, the local kubelet, kubectl and Helm use:
// discovery (/api, /apis, /version), built-in kinds (namespaces, nodes, pods, services, secrets,
// configmaps, events, serviceaccounts, leases, customresourcedefinitions, deployments and
// replicasets, RBAC's roles and bindings, access reviews) and every kind a
// CustomResourceDefinition registers; get/list/create/update/merge, strategic-merge and JSON
// patch, server-side apply with managedFields (server_side_apply.h), delete; service account
// tokens (TokenRequest) authorized by RBAC (rbac.h); the protobuf bodies of the kinds typed
// clients write (kube_protobuf.h); the status subresource, a CRD's scale subresource (scale.h:
// `kubectl scale`), list and watch with resourceVersion,
// bookmarks, label and field selectors, Table output for kubectl get and get -w (a CRD's printer
// columns), the pod eviction endpoint (DisruptionTarget, then graceful deletion), pod logs (without
// --follow) and ownerReference garbage collection. A custom resource is pruned, defaulted and
// validated against its CRD's schema on every write, as a real server does (schema_validation.h);
// the OpenAPI v3 documents carry the CRDs' schemas (openapi.h) for kubectl explain and field
// validation.
// Not served: admission webhooks, finalizers, the OpenAPI v2 document.
class ApiServer {
 public:
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options,
                                                          Clock* clock);
  ~ApiServer();

  std::string url()
      const;  // "https://127.0.0.1:<port>" (the host, unless it listens on every interface).
  int port() const { return port_; }
  const std::string& ca_pem() const { return ca_pem_; }  // The certificate to trust (TLS only).
  ObjectStore& store() { return store_; }

  // A kubeconfig (YAML) whose current context reaches this server.
  std::string Kubeconfig(const std::string& default_namespace = "default") const;

 private:
  ApiServer(const ApiServerOptions& options, Clock* clock);
  void Route();
  // Probes, /version, OpenAPI and the discovery documents.
  void RouteDiscovery();

  // The requests for resources: one handler per verb, after the special requests (kSpecials).
  using ResourceHandler = void (ApiServer::*)(const ResourceTarget& t, const httplib::Request& req,
                                              httplib::Response& res);
  std::function<void(const httplib::Request&, httplib::Response&)> ForResource(
      const char* method, ResourceHandler serve);
  // A subresource with a verb of its own (subresource set), or a kind that is a question rather
  // than an object (kind set).
  struct Special {
    const char* method;
    const char* subresource;
    const char* kind;
    ResourceHandler serve;
  };
  static const Special kSpecials[];
  void ServeGet(const ResourceTarget& t, const httplib::Request& req,
                httplib::Response& res);  // get, list, watch
  void ServeCreate(const ResourceTarget& t, const httplib::Request& req,
                   httplib::Response& res);  // POST
  void ServeUpdate(const ResourceTarget& t, const httplib::Request& req,
                   httplib::Response& res);  // PUT
  void ServePatch(const ResourceTarget& t, const httplib::Request& req,
                  httplib::Response& res);  // merge, JSON, apply
  void ServeDelete(const ResourceTarget& t, const httplib::Request& req, httplib::Response& res);
  // POST serviceaccounts/<name>/token: a TokenRequest.
  void ServeToken(const ResourceTarget& t, const httplib::Request& req, httplib::Response& res);
  // GET, PUT and PATCH <resource>/<name>/scale of a custom resource whose CRD declares the scale
  // subresource (scale.h).
  void ServeScale(const ResourceTarget& t, const httplib::Request& req, httplib::Response& res);
  // POST pods/<name>/eviction (Evict).
  void ServeEviction(const ResourceTarget& t, const httplib::Request& req, httplib::Response& res);
  // POST of a SelfSubjectAccessReview or SubjectAccessReview (AccessReview).
  void ServeAccessReview(const ResourceTarget& t, const httplib::Request& req,
                         httplib::Response& res);
  // GET pods/<name>/log: the container's output as text (?container=, default the first
  // container; ?tailLines=N: the last N lines).
  void ServeLog(const ResourceTarget& t, const httplib::Request& req, httplib::Response& res);

  // What every write (create, update, patch) brings: its body, what admits it (schema or pod
  // validation) and records its field manager, and the warnings to answer with.
  struct WriteRequest {
    nlohmann::json body;
    std::string manager;
    std::vector<std::string> warnings;
    ObjectStore::Admission admit;   // Validation only (server-side apply records its own fields).
    ObjectStore::Admission record;  // Validation, then managedFields.
  };
  // Fills `write` (which must outlive its admissions: they point into it) for a write to `t`.
  absl::Status PrepareWrite(const ResourceTarget& t, const httplib::Request& req,
                            WriteRequest& write);
  static void FinishWrite(const WriteRequest& write, const absl::StatusOr<nlohmann::json>& result,
                          httplib::Response& res, int ok_code = 200);

  // The one place CustomResourceDefinitions are special: a CRD must define a kind this server can
  // serve before it is created; once written its kind is served and it is Established; once
  // deleted its kind is no longer served. No-ops for every other kind.
  absl::Status BeforeCreate(const ResourceType& type, const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> AfterWrite(const ResourceType& type,
                                            absl::StatusOr<nlohmann::json> written,
                                            bool status_only);
  void AfterDelete(const ResourceType& type, const absl::StatusOr<nlohmann::json>& deleted);

  // A server-side apply by `manager` (server_side_apply.h): creates the object or merges into it.
  absl::StatusOr<nlohmann::json> Apply(const ResourceType& type, const std::string& ns,
                                       const std::string& name, const nlohmann::json& applied,
                                       const std::string& manager, bool force,
                                       const ObjectStore::Admission& admit);
  // Registers the kind a CustomResourceDefinition defines and marks it Established.
  absl::StatusOr<nlohmann::json> Establish(const nlohmann::json& crd);
  // The eviction subresource: the DisruptionTarget condition, then graceful deletion.
  absl::StatusOr<nlohmann::json> Evict(const ResourceType& pods, const std::string& ns,
                                       const std::string& name);
  // Streams watch events as newline-delimited JSON until timeoutSeconds or shutdown.
  void Watch(const ResourceType& type, const std::string& ns, const std::string& name,
             const Selector& labels, const Selector& fields, const httplib::Request& req,
             httplib::Response& res);

  // Authentication: the administrator's token (options_.token, group system:masters) or a
  // service account's token that this server issued (IssueServiceAccountToken); an administrator
  // may act as another user (Impersonate-User/Impersonate-Group, as `kubectl --as` sends).
  // Unauthenticated without a known token.
  absl::StatusOr<UserInfo> Authenticate(const httplib::Request& req) const;
  // Authorization: the administrator may do anything; anyone else what RBAC allows (rbac.h).
  // PermissionDenied (403) naming the user and what it may not do.
  absl::Status Authorize(const UserInfo& user, const httplib::Request& req);
  RbacObjects RbacSnapshot();
  // "sa:<namespace>:<name>:<HMAC-SHA256 of both under this server's key>".
  std::string IssueServiceAccountToken(const std::string& ns, const std::string& name) const;
  std::optional<UserInfo> VerifyServiceAccountToken(const std::string& token) const;
  absl::StatusOr<nlohmann::json> AccessReview(const UserInfo& user, const nlohmann::json& review);

  const ApiServerOptions options_;
  Clock* const clock_;
  const std::string service_account_key_;
  ObjectStore store_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::string ca_pem_;
  std::atomic<bool> stopping_{false};
};

}  // namespace cohort::local
