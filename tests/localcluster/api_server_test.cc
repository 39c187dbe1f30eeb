// The local API server through the real HTTP client, over real sockets: every call the operator
// and the kubelet rely on, and the error each misuse gets.
#include "localcluster/apiserver/api_server.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "kube/http_kube_client.h"
#include "operator/api/distributed_job.h"
#include "tests/localcluster/crd_fixture.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using kube::kPods;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ApiServerOptions{}); }

  void Start(ApiServerOptions options) {
    client_.reset();
    server_.reset();
    if (options.token.empty()) options.token = "secret-token";
    absl::StatusOr<std::unique_ptr<ApiServer>> s = ApiServer::Start(options, Clock::Real());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    kube::KubeConfig config;
    config.server = server_->url();
    config.ca_pem = server_->ca_pem();
    config.token = options.token;
    kube::HttpKubeClientOptions client_options;
    client_options.max_retries = 1;
    client_options.initial_backoff = absl::Milliseconds(10);
    absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> c =
        kube::HttpKubeClient::Create(config, client_options, Clock::Real());
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  static json Pod(const std::string& name, json labels = json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"labels", labels}}},
            {"spec", {{"containers", {{{"name", "c"}, {"image", "x"}}}}}}};
  }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<kube::HttpKubeClient> client_;
};

TEST_F(ApiServerTest, CreateGetListDeleteOverHttps) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a", {{"app", "x"}})).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("b", {{"app", "y"}})).ok());
  absl::StatusOr<json> a = client_->Get(kPods, "default", "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)["metadata"]["namespace"], "default");
  EXPECT_FALSE((*a)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ((*a)["status"]["phase"], "Pending");

  absl::StatusOr<json> list = client_->List(kPods, "default", "app=x");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["metadata"]["name"], "a");
  EXPECT_EQ((*client_->List(kPods, "default", "app in (x,y)"))["items"].size(), 2u);
  EXPECT_EQ((*client_->List(kPods, "other", ""))["items"].size(), 0u);

  EXPECT_TRUE(client_->Delete(kPods, "default", "a").ok());  // Unbound: removed at once.
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "a").status()));
  EXPECT_TRUE(absl::IsNotFound(client_->Delete(kPods, "default", "a")));
}

// The operator lists a job's pods without their specs (a 1,000-pod list would cost megabytes),
// but with spec.nodeName: a lost node's pod is named with its node.
TEST_F(ApiServerTest, ListWithoutSpec_KeepsOnlyTheNodeName) {
  json bound = Pod("bound", {{"app", "z"}});
  bound["spec"]["nodeName"] = "node-b";
  ASSERT_TRUE(client_->Create(kPods, "default", bound).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("unbound", {{"app", "z"}})).ok());
  absl::StatusOr<json> list =
      client_->List(kPods, "default", "app=z", kube::KubeClient::ListFields::kWithoutSpec);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ((*list)["items"].size(), 2u);
  for (const json& item : (*list)["items"]) {
    EXPECT_TRUE(item.contains("metadata") && item.contains("status")) << item.dump();
    if (item["metadata"]["name"] == "bound") {
      EXPECT_EQ(item["spec"], json({{"nodeName", "node-b"}})) << item.dump();
    } else {
      EXPECT_TRUE(!item.contains("spec") || item["spec"] == json::object()) << item.dump();
    }
  }
}

TEST_F(ApiServerTest, ErrorsMapToOneMeaningEach) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  absl::StatusOr<json> again = client_->Create(kPods, "default", Pod("a"));
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("already exists"));

  json stale = *client_->Get(kPods, "default", "a");
  ASSERT_TRUE(
      client_->MergePatch(kPods, "default", "a", {{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  stale["metadata"]["labels"] = {{"k", "stale"}};
  absl::StatusOr<json> conflict = client_->Update(kPods, "default", stale);
  EXPECT_TRUE(absl::IsAborted(conflict.status()))
      << conflict.status();  // 409: re-read, never overwrite.
  EXPECT_EQ((*client_->Get(kPods, "default", "a"))["metadata"]["labels"]["k"], "v");

  EXPECT_TRUE(absl::IsNotFound(client_->Get(op::kDistributedJobs, "default", "x").status()));
  json nameless = Pod("");
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Create(kPods, "default", nameless).status()));
}

TEST_F(ApiServerTest, WrongTokenIsUnauthenticatedAndChangesNothing) {
  kube::KubeConfig config;
  config.server = server_->url();
  config.ca_pem = server_->ca_pem();
  config.token = "wrong";
  auto intruder = kube::HttpKubeClient::Create(config, {}, Clock::Real());
  ASSERT_TRUE(intruder.ok());
  EXPECT_TRUE(absl::IsUnauthenticated((*intruder)->Create(kPods, "default", Pod("a")).status()));
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "a").status()));
}

TEST_F(ApiServerTest, UntrustedCertificateIsRefused) {
  kube::KubeConfig config;
  config.server = server_->url();
  config.token = "secret-token";  // No CA: the self-signed certificate cannot be verified.
  auto client = kube::HttpKubeClient::Create(config, {.max_retries = 0}, Clock::Real());
  ASSERT_TRUE(client.ok());
  absl::StatusOr<json> r = (*client)->Get(kPods, "default", "a");
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("SSL"));
}

TEST_F(ApiServerTest, StatusSubresourceAndGeneration) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  json pod = *client_->Get(kPods, "default", "a");
  pod["status"] = {{"phase", "Running"}};
  pod["spec"]["containers"][0]["image"] = "ignored-on-status-write";
  absl::StatusOr<json> written = client_->UpdateStatus(kPods, "default", pod);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)["status"]["phase"], "Running");
  EXPECT_EQ((*written)["spec"]["containers"][0]["image"], "x");
  EXPECT_EQ((*written)["metadata"]["generation"], 1);

  // A spec change bumps the generation and keeps the status.
  absl::StatusOr<json> patched = client_->MergePatch(
      kPods, "default", "a", {{"spec", {{"hostname", "h"}}}, {"status", {{"phase", "x"}}}});
  ASSERT_TRUE(patched.ok());
  EXPECT_EQ((*patched)["metadata"]["generation"], 2);
  EXPECT_EQ((*patched)["status"]["phase"], "Running");
}

TEST_F(ApiServerTest, WatchDeliversChangesAfterAVersionInOrder) {
  std::string from = (*client_->List(kPods, "default", ""))["metadata"]["resourceVersion"];
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  ASSERT_TRUE(
      client_->MergePatch(kPods, "default", "a", {{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "a").ok());
  std::vector<std::string> types;
  kube::WatchOptions options;
  options.resource_version = from;
  options.timeout = absl::Seconds(1);
  absl::Status s = client_->Watch(kPods, "default", options, [&](const json& e) {
    types.push_back(e["type"]);
    return e["type"] != "DELETED";
  });
  EXPECT_TRUE(absl::IsCancelled(s)) << s;  // The handler stopped it.
  EXPECT_THAT(types, ::testing::ElementsAre("ADDED", "MODIFIED", "DELETED"));
}

TEST_F(ApiServerTest, WatchSeesAChangeMadeWhileItWaits) {
  std::string from = (*client_->List(kPods, "default", ""))["metadata"]["resourceVersion"];
  absl::Notification seen;
  std::thread watcher([&] {
    kube::WatchOptions options;
    options.resource_version = from;
    options.timeout = absl::Seconds(20);
    client_
        ->Watch(kPods, "default", options,
                [&](const json& e) {
                  if (e["type"] == "ADDED") seen.Notify();
                  return e["type"] != "ADDED";
                })
        .IgnoreError();
  });
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("late")).ok());
  EXPECT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(10)));
  watcher.join();
}

TEST_F(ApiServerTest, WatchFromAForgottenVersionIsGone) {
  ApiServerOptions server_options;
  server_options.watch_history = 2;
  Start(server_options);
  for (const char* name : {"a", "b", "c", "d"})
    ASSERT_TRUE(client_->Create(kPods, "default", Pod(name)).ok());
  kube::WatchOptions options;
  options.resource_version = "1";
  options.timeout = absl::Seconds(1);
  absl::Status s = client_->Watch(kPods, "default", options, [](const json&) { return true; });
  EXPECT_TRUE(kube::IsGone(s)) << s;
}

TEST_F(ApiServerTest, BoundPodDeletionIsGracefulUntilDeletedWithZeroGrace) {
  json pod = Pod("a");
  pod["spec"]["nodeName"] = "local";
  ASSERT_TRUE(client_->Create(kPods, "default", pod).ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "a").ok());
  absl::StatusOr<json> terminating = client_->Get(kPods, "default", "a");
  ASSERT_TRUE(terminating.ok());
  EXPECT_TRUE((*terminating)["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ((*terminating)["metadata"]["deletionGracePeriodSeconds"], 30);
  ASSERT_TRUE(client_->Delete(kPods, "default", "a", 0).ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "a").status()));
}

TEST_F(ApiServerTest, EvictionMarksDisruptionTargetThenDeletes) {
  json pod = Pod("a");
  pod["spec"]["nodeName"] = "local";
  ASSERT_TRUE(client_->Create(kPods, "default", pod).ok());
  json eviction = {
      {"apiVersion", "policy/v1"}, {"kind", "Eviction"}, {"metadata", {{"name", "a"}}}};
  ASSERT_TRUE(client_->Call("POST", "/api/v1/namespaces/default/pods/a/eviction", &eviction).ok());
  json evicted = *client_->Get(kPods, "default", "a");
  EXPECT_TRUE(evicted["metadata"].contains("deletionTimestamp"));
  ASSERT_EQ(evicted["status"]["conditions"].size(), 1u);
  EXPECT_EQ(evicted["status"]["conditions"][0]["type"], "DisruptionTarget");
  EXPECT_EQ(evicted["status"]["conditions"][0]["reason"], "EvictionByEvictionAPI");
}

TEST_F(ApiServerTest, DeletingAnOwnerCollectsItsDependents) {
  absl::StatusOr<json> owner =
      client_->Create(kube::kSecrets, "default", {{"metadata", {{"name", "owner"}}}});
  ASSERT_TRUE(owner.ok());
  json child = Pod("child");
  child["metadata"]["ownerReferences"] = {{{"apiVersion", "v1"},
                                           {"kind", "Secret"},
                                           {"name", "owner"},
                                           {"uid", (*owner)["metadata"]["uid"]}}};
  ASSERT_TRUE(client_->Create(kPods, "default", child).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("unrelated")).ok());
  ASSERT_TRUE(client_->Delete(kube::kSecrets, "default", "owner").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "child").status()));
  EXPECT_TRUE(client_->Get(kPods, "default", "unrelated").ok());
}

// What Kubernetes' garbage collector does for an object made after its owner went (a controller
// acting on a stale view): it is deleted. The create succeeds, then the object is gone; one with
// a live owner among its owners stays.
TEST_F(ApiServerTest, CreatedAfterEveryOwnerIsGone_CollectedAtOnce) {
  absl::StatusOr<json> gone =
      client_->Create(kube::kSecrets, "default", {{"metadata", {{"name", "gone"}}}});
  absl::StatusOr<json> live =
      client_->Create(kube::kSecrets, "default", {{"metadata", {{"name", "live"}}}});
  ASSERT_TRUE(gone.ok() && live.ok());
  ASSERT_TRUE(client_->Delete(kube::kSecrets, "default", "gone").ok());
  auto owner = [](const json& o) {
    return json{{"apiVersion", "v1"},
                {"kind", "Secret"},
                {"name", o["metadata"]["name"]},
                {"uid", o["metadata"]["uid"]}};
  };
  json orphan = Pod("orphan");
  orphan["metadata"]["ownerReferences"] = {owner(*gone)};
  EXPECT_TRUE(client_->Create(kPods, "default", orphan).ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "orphan").status()));
  json kept = Pod("kept");
  kept["metadata"]["ownerReferences"] = {owner(*gone), owner(*live)};
  ASSERT_TRUE(client_->Create(kPods, "default", kept).ok());
  EXPECT_TRUE(client_->Get(kPods, "default", "kept").ok());
  json unchecked = Pod("unchecked");  // An owner without a uid cannot be looked up: kept.
  unchecked["metadata"]["ownerReferences"] = {
      {{"apiVersion", "v1"}, {"kind", "Secret"}, {"name", "gone"}}};
  ASSERT_TRUE(client_->Create(kPods, "default", unchecked).ok());
  EXPECT_TRUE(client_->Get(kPods, "default", "unchecked").ok());
}

TEST_F(ApiServerTest, CustomResourceDefinitionRegistersItsKind) {
  json crd = {{"apiVersion", "apiextensions.k8s.io/v1"},
              {"kind", "CustomResourceDefinition"},
              {"metadata", {{"name", "widgets.example.com"}}},
              {"spec",
               {{"group", "example.com"},
                {"scope", "Namespaced"},
                {"names", {{"plural", "widgets"}, {"singular", "widget"}, {"kind", "Widget"}}},
                {"versions",
                 {{{"name", "v1"},
                   {"served", true},
                   {"storage", true},
                   {"subresources", {{"status", json::object()}}},
                   {"additionalPrinterColumns",
                    {{{"name", "Size"}, {"type", "integer"}, {"jsonPath", ".spec.size"}}}}}}}}}};
  const kube::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions"};
  const kube::Resource widgets{"example.com", "v1", "widgets"};
  EXPECT_TRUE(absl::IsNotFound(
      client_->Create(widgets, "default", {{"metadata", {{"name", "w"}}}}).status()));
  absl::StatusOr<json> created = client_->Create(crds, "", crd);
  ASSERT_TRUE(created.ok()) << created.status();
  json established = *client_->Get(crds, "", "widgets.example.com");
  EXPECT_EQ(established["status"]["conditions"][1]["type"], "Established");
  ASSERT_TRUE(
      client_->Create(widgets, "default", {{"metadata", {{"name", "w"}}}, {"spec", {{"size", 3}}}})
          .ok());

  // kubectl get asks for a Table with the printer columns.
  absl::StatusOr<json> discovery = client_->Call("GET", "/apis/example.com/v1");
  ASSERT_TRUE(discovery.ok());
  EXPECT_EQ((*discovery)["resources"][0]["name"], "widgets");

  ASSERT_TRUE(client_->Delete(crds, "", "widgets.example.com").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(widgets, "default", "w").status()));
}

TEST_F(ApiServerTest, PodLogsFromTheKubeletDefaultContainerAndTail) {
  std::string asked;
  ApiServerOptions options;
  options.pod_logs = [&asked](const std::string& ns, const std::string& pod,
                              const std::string& container) -> absl::StatusOr<std::string> {
    asked = absl::StrCat(ns, "/", pod, "/", container);
    return std::string("one\ntwo\nthree\n");
  };
  Start(options);
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  httplib::Client http(server_->url());
  http.enable_server_certificate_verification(false);
  http.set_bearer_token_auth("secret-token");

  auto all = http.Get("/api/v1/namespaces/default/pods/a/log");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->status, 200);
  EXPECT_EQ(all->body, "one\ntwo\nthree\n");
  EXPECT_EQ(asked, "default/a/c") << "without ?container=, the pod's first container";

  auto tail = http.Get("/api/v1/namespaces/default/pods/a/log?container=side&tailLines=2");
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->body, "two\nthree\n");
  EXPECT_EQ(asked, "default/a/side");

  auto missing = http.Get("/api/v1/namespaces/default/pods/nope/log");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

// --- Custom resources against their CRD's schema, as a real API server treats them ---

class CustomResourceTest : public ApiServerTest {
 protected:
  void SetUp() override {
    ApiServerTest::SetUp();
    absl::StatusOr<json> crd = client_->Create(kCrds, "", testing::DistributedJobCrd());
    ASSERT_TRUE(crd.ok()) << crd.status();
    http_ = std::make_unique<httplib::Client>(server_->url());
    http_->enable_server_certificate_verification(false);
    http_->set_bearer_token_auth("secret-token");
  }

  struct Response {
    int status = 0;
    json body;
    std::vector<std::string> warnings;  // Warning headers.
  };
  Response Send(const std::string& method, const std::string& path, const json& body,
                const std::string& content_type = "application/json") {
    httplib::Result r = method == "POST"    ? http_->Post(path, body.dump(), content_type)
                        : method == "PUT"   ? http_->Put(path, body.dump(), content_type)
                        : method == "PATCH" ? http_->Patch(path, body.dump(), content_type)
                                            : http_->Get(path);
    Response out;
    if (!r) {
      ADD_FAILURE() << method << " " << path << ": " << httplib::to_string(r.error());
      return out;
    }
    out.status = r->status;
    out.body = json::parse(r->body, nullptr, false);
    for (size_t i = 0; i < r->get_header_value_count("Warning"); ++i) {
      out.warnings.push_back(r->get_header_value("Warning", i));
    }
    return out;
  }
  json Stored(const std::string& name) {
    absl::StatusOr<json> job = client_->Get(op::kDistributedJobs, "default", name);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : json();
  }

  static constexpr char kJobs[] = "/apis/cohort.dev/v1alpha1/namespaces/default/distributedjobs";
  const kube::Resource kCrds{"apiextensions.k8s.io", "v1", "customresourcedefinitions"};
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(CustomResourceTest, CreateWrongType_422WithTheRealServersStatusAndNothingStored) {
  json job = testing::Job("four");
  job["spec"]["replicas"] = "four";
  Response r = Send("POST", kJobs, job);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["kind"], "Status");
  EXPECT_EQ(r.body["status"], "Failure");
  EXPECT_EQ(r.body["reason"], "Invalid");
  EXPECT_EQ(r.body["code"], 422);
  EXPECT_EQ(r.body["message"],
            "DistributedJob.cohort.dev \"four\" is invalid: spec.replicas: Invalid value: "
            "\"string\": spec.replicas "
            "in body must be of type integer: \"string\"");
  EXPECT_EQ(r.body["details"],
            json::parse(R"({"name":"four","group":"cohort.dev","kind":"DistributedJob",
      "causes":[{"reason":"FieldValueTypeInvalid","field":"spec.replicas",
                 "message":"Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""}]})"));
  EXPECT_TRUE(absl::IsNotFound(client_->Get(op::kDistributedJobs, "default", "four").status()));
}

TEST_F(CustomResourceTest, CreateUnknownField_StrictRejectsWarnAndIgnorePrune) {
  json job = testing::Job("a");
  job["spec"]["replicaz"] = 3;
  Response strict = Send("POST", absl::StrCat(kJobs, "?fieldValidation=Strict"), job);
  EXPECT_EQ(strict.status, 400);
  EXPECT_EQ(strict.body["reason"], "BadRequest");
  EXPECT_EQ(strict.body["message"],
            "DistributedJob in version \"v1alpha1\" cannot be handled as a DistributedJob: strict "
            "decoding error: "
            "unknown field \"spec.replicaz\"");
  EXPECT_TRUE(absl::IsNotFound(client_->Get(op::kDistributedJobs, "default", "a").status()));

  Response warned = Send("POST", kJobs, job);  // No fieldValidation: Warn, the default.
  EXPECT_EQ(warned.status, 201) << warned.body;
  EXPECT_THAT(warned.warnings, ElementsAre("299 - \"unknown field \\\"spec.replicaz\\\"\""));
  EXPECT_FALSE(Stored("a")["spec"].contains("replicaz"));

  job["metadata"]["name"] = "b";
  Response ignored = Send("POST", absl::StrCat(kJobs, "?fieldValidation=Ignore"), job);
  EXPECT_EQ(ignored.status, 201) << ignored.body;
  EXPECT_THAT(ignored.warnings, IsEmpty());
  EXPECT_FALSE(Stored("b")["spec"].contains("replicaz"));

  job["metadata"]["name"] = "c";
  Response bogus = Send("POST", absl::StrCat(kJobs, "?fieldValidation=Yes"), job);
  EXPECT_EQ(bogus.status, 422);
  EXPECT_EQ(bogus.body["message"],
            "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: "
            "\"Yes\": supported "
            "values: \"\", \"Ignore\", \"Strict\", \"Warn\"");
}

TEST_F(CustomResourceTest, Create_SchemaDefaultsApplied) {
  json job = testing::Job("d");
  job["spec"].erase("replicas");
  ASSERT_EQ(Send("POST", kJobs, job).status, 201);
  json spec = Stored("d")["spec"];
  EXPECT_EQ(spec["replicas"], 1);
  EXPECT_EQ(spec["maxRestarts"], 3);
  EXPECT_EQ(spec["restartBackoff"], "10s");
  EXPECT_EQ(spec["sidecar"]["image"], "ghcr.io/cohort-dev/cohort-sidecar:0.1.0");
}

TEST_F(CustomResourceTest, UpdatesAndPatches_ResultValidatedAndRefusedWritesChangeNothing) {
  ASSERT_EQ(Send("POST", kJobs, testing::Job("u")).status, 201);
  json before = Stored("u");
  std::string item = absl::StrCat(kJobs, "/u");

  json put = before;
  put["spec"]["replicas"] = 0;
  Response r = Send("PUT", item, put);
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["message"],
            "DistributedJob.cohort.dev \"u\" is invalid: spec.replicas: Invalid value: 0: "
            "spec.replicas in body should be greater than or equal to 1");

  r = Send("PATCH", item, {{"spec", {{"replicas", "x"}}}}, "application/merge-patch+json");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "spec.replicas");

  r = Send(
      "PATCH", item,
      json::parse(R"([{"op":"replace","path":"/spec/sidecar/imagePullPolicy","value":"Often"}])"),
      "application/json-patch+json");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["reason"], "FieldValueNotSupported");

  r = Send("PATCH", absl::StrCat(item, "?fieldValidation=Strict"), {{"spec", {{"replicaz", 3}}}},
           "application/merge-patch+json");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.body["details"]["causes"][0]["field"], "patch");
  EXPECT_THAT(r.body["message"].get<std::string>(),
              HasSubstr("strict decoding error: unknown field \"spec.replicaz\""));

  EXPECT_EQ(Stored("u"), before) << "no refused write changed the object or its resourceVersion";

  // A patch that removes a defaulted field gets the default back: the spec is unchanged.
  r = Send("PATCH", item, {{"spec", {{"maxRestarts", nullptr}}}}, "application/merge-patch+json");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Stored("u")["spec"]["maxRestarts"], 3);
  EXPECT_EQ(Stored("u")["metadata"]["generation"], 1);
}

TEST_F(CustomResourceTest, StatusWrites_CheckedAgainstTheStatusSchema) {
  ASSERT_EQ(Send("POST", kJobs, testing::Job("s")).status, 201);
  json job = Stored("s");
  job["status"] = {{"phase", "Bogus"}, {"ready", 1}};
  absl::StatusOr<json> written = client_->UpdateStatus(op::kDistributedJobs, "default", job);
  EXPECT_TRUE(absl::IsInvalidArgument(written.status())) << written.status();
  EXPECT_THAT(written.status().message(), HasSubstr("DistributedJob.cohort.dev \"s\" is invalid: "
                                                    "status.phase: Unsupported value: \"Bogus\""));
  job["status"]["phase"] = "Running";
  written = client_->UpdateStatus(op::kDistributedJobs, "default", job);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)["status"]["phase"], "Running");
}

TEST_F(CustomResourceTest, OpenApiV3_TheCrdSchemaForExplainAndFieldValidationForApply) {
  Response index = Send("GET", "/openapi/v3", json());
  ASSERT_EQ(index.status, 200);
  EXPECT_EQ(index.body["paths"]["apis/cohort.dev/v1alpha1"]["serverRelativeURL"],
            "/openapi/v3/apis/cohort.dev/v1alpha1");

  Response doc = Send("GET", "/openapi/v3/apis/cohort.dev/v1alpha1", json());
  ASSERT_EQ(doc.status, 200);
  const json& schema = doc.body["components"]["schemas"]["dev.cohort.v1alpha1.DistributedJob"];
  EXPECT_EQ(
      schema["x-kubernetes-group-version-kind"],
      json::parse(R"([{"group":"cohort.dev","version":"v1alpha1","kind":"DistributedJob"}])"));
  EXPECT_EQ(schema["properties"]["spec"]["properties"]["replicas"]["type"], "integer");
  EXPECT_EQ(schema["properties"]["spec"]["required"], json::array({"template"}));
  EXPECT_EQ(schema["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
  EXPECT_TRUE(doc.body["components"]["schemas"].contains(
      "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
  const json& patch =
      doc.body["paths"]["/apis/cohort.dev/v1alpha1/namespaces/{namespace}/distributedjobs/{name}"]
              ["patch"];
  EXPECT_EQ(patch["x-kubernetes-group-version-kind"]["kind"], "DistributedJob");
  std::vector<std::string> parameters;
  for (const json& p : patch["parameters"]) parameters.push_back(p["name"]);
  EXPECT_THAT(parameters, Contains("fieldValidation"));

  EXPECT_EQ(Send("GET", "/openapi/v3/apis/nothing.example/v1", json()).status, 404);
}

// The scale subresource the CRD declares (subresources.scale), as `kubectl scale` and the
// HorizontalPodAutoscaler use it: an autoscaling/v1 Scale over spec.replicas and status.replicas.
TEST_F(CustomResourceTest, ScaleSubresource_ReadAndWrittenThroughTheCrdsPaths) {
  ASSERT_EQ(Send("POST", kJobs, testing::Job("s")).status, 201);
  ASSERT_TRUE(client_
                  ->MergePatch(op::kDistributedJobs, "default", "s",
                               {{"status", {{"replicas", 2}, {"selector", "a=b"}}}},
                               /*status=*/true)
                  .ok());
  const std::string scale = absl::StrCat(kJobs, "/s/scale");
  Response got = Send("GET", scale, json());
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.body["kind"], "Scale");
  EXPECT_EQ(got.body["apiVersion"], "autoscaling/v1");
  EXPECT_EQ(got.body["metadata"]["name"], "s");
  EXPECT_EQ(got.body["metadata"]["resourceVersion"], Stored("s")["metadata"]["resourceVersion"]);
  EXPECT_EQ(got.body["spec"], json({{"replicas", 2}}));
  EXPECT_EQ(got.body["status"], json({{"replicas", 2}, {"selector", "a=b"}}));

  // What kubectl scale sends: a merge patch of the Scale. The job's spec.replicas changes, and
  // only it (a spec write: the generation moves).
  const json before = Stored("s");
  Response patched =
      Send("PATCH", scale, {{"spec", {{"replicas", 4}}}}, "application/merge-patch+json");
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.body["kind"], "Scale");
  EXPECT_EQ(patched.body["spec"]["replicas"], 4);
  EXPECT_EQ(patched.body["status"]["replicas"], 2) << "the status is the operator's to write";
  json after = Stored("s");
  EXPECT_EQ(after["spec"]["replicas"], 4);
  EXPECT_EQ(after["metadata"]["generation"], before["metadata"]["generation"].get<int>() + 1);
  after["spec"]["replicas"] = 2;
  EXPECT_EQ(after["spec"], before["spec"]);

  // A PUT with the resourceVersion it read: a stale one conflicts and changes nothing.
  json put = patched.body;
  put["spec"]["replicas"] = 3;
  put["metadata"]["resourceVersion"] = got.body["metadata"]["resourceVersion"];
  Response stale = Send("PUT", scale, put);
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_EQ(Stored("s")["spec"]["replicas"], 4);
  put["metadata"]["resourceVersion"] = Stored("s")["metadata"]["resourceVersion"];
  Response fresh = Send("PUT", scale, put);
  EXPECT_EQ(fresh.status, 200) << fresh.body;
  EXPECT_EQ(Stored("s")["spec"]["replicas"], 3);

  // The CRD's schema still holds (replicas at least 1), and a Scale without a number is refused.
  Response zero =
      Send("PATCH", scale, {{"spec", {{"replicas", 0}}}}, "application/merge-patch+json");
  EXPECT_EQ(zero.status, 422) << zero.body;
  EXPECT_THAT(zero.body.value("message", ""), HasSubstr("spec.replicas"));
  Response word =
      Send("PATCH", scale, {{"spec", {{"replicas", "four"}}}}, "application/merge-patch+json");
  EXPECT_EQ(word.status, 422) << word.body;
  EXPECT_THAT(word.body.value("message", ""),
              HasSubstr("Scale.spec.replicas: must be a non-negative integer (got \"four\")"));
  EXPECT_EQ(Stored("s")["spec"]["replicas"], 3);

  // Discovery says where it is and what it is, as kubectl's scale client looks it up.
  Response group = Send("GET", "/apis/cohort.dev/v1alpha1", json());
  json listed;
  for (const json& r : group.body["resources"]) {
    if (r["name"] == "distributedjobs/scale") listed = r;
  }
  EXPECT_EQ(listed.value("group", ""), "autoscaling") << group.body;
  EXPECT_EQ(listed.value("version", ""), "v1");
  EXPECT_EQ(listed.value("kind", ""), "Scale");
  EXPECT_EQ(Send("GET", absl::StrCat(kJobs, "/missing/scale"), json()).status, 404);
}

TEST_F(CustomResourceTest, Discovery_ShortNamesAndCategories) {
  Response group = Send("GET", "/apis/cohort.dev/v1alpha1", json());
  ASSERT_EQ(group.status, 200);
  EXPECT_EQ(group.body["resources"][0]["shortNames"], json::array({"djob"}));
  EXPECT_EQ(group.body["resources"][0]["categories"], json::array({"all"}));
  Response core = Send("GET", "/api/v1", json());
  for (const json& r : core.body["resources"]) {
    if (r["name"] == "pods") {
      EXPECT_EQ(r["categories"], json::array({"all"}));
    }
  }
}

TEST_F(CustomResourceTest, WatchAsTable_EventsAreTablesWithThePrinterColumns) {
  ASSERT_EQ(Send("POST", kJobs, testing::Job("w1")).status, 201);
  ASSERT_EQ(Send("POST", kJobs, testing::Job("w2")).status, 201);
  std::vector<json> events;
  std::string buffer;
  httplib::Headers accept = {
      {"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}};
  http_->Get(
      absl::StrCat(kJobs, "?watch=true&resourceVersion=0&timeoutSeconds=20"), accept,
      [&](const char* data, size_t length) {
        buffer.append(data, length);
        for (size_t nl; (nl = buffer.find('\n')) != std::string::npos; buffer.erase(0, nl + 1)) {
          events.push_back(json::parse(buffer.substr(0, nl)));
          if (events.size() == 2) {  // Both ADDED: now a change, as the operator makes one.
            EXPECT_TRUE(client_
                            ->MergePatch(op::kDistributedJobs, "default", "w1",
                                         {{"status", {{"phase", "Running"}, {"readyText", "2/2"}}}},
                                         /*status=*/true)
                            .ok());
          }
        }
        return events.size() < 3;
      });
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["type"], "ADDED");
  const json& first = events[0]["object"];
  EXPECT_EQ(first["kind"], "Table");
  std::vector<std::string> columns;
  for (const json& c : first["columnDefinitions"]) columns.push_back(c["name"]);
  EXPECT_THAT(columns, ElementsAre("Name", "Phase", "Ready", "Processes/Pod", "Restarts", "Spares",
                                   "Groups", "Preemptions", "Coordinator", "Age"));
  EXPECT_EQ(first["rows"][0]["cells"][0], "w1");
  EXPECT_EQ(first["rows"][0]["object"]["kind"], "PartialObjectMetadata");
  EXPECT_TRUE(events[1]["object"]["columnDefinitions"].empty()) << "sent with the first event only";
  EXPECT_EQ(events[1]["object"]["rows"][0]["cells"][0], "w2");
  EXPECT_EQ(events[2]["type"], "MODIFIED");
  json cells = events[2]["object"]["rows"][0]["cells"];
  EXPECT_EQ(cells[0], "w1");
  EXPECT_EQ(cells[1], "Running");
  EXPECT_EQ(cells[2], "2/2");
}

TEST_F(CustomResourceTest, BuiltInKindsAreStoredAsSent) {
  json pod = Pod("p");
  pod["spec"]["madeUp"] = true;
  Response r = Send("POST", "/api/v1/namespaces/default/pods?fieldValidation=Strict", pod);
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_TRUE((*client_->Get(kPods, "default", "p"))["spec"]["madeUp"]);
}

}  // namespace
}  // namespace cohort::local
