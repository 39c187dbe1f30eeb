// The local API server through the real HTTP client, over real sockets: every call the operator
// and the kubelet rely on, and the error each misuse gets.
#include "localcluster/apiserver/api_server.h"

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/synchronization/notification.h"
#include "operator/client/http_kube_client.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using op::kPods;
using ::testing::HasSubstr;

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
    op::KubeConfig config;
    config.server = server_->url();
    config.ca_pem = server_->ca_pem();
    config.token = options.token;
    op::HttpKubeClientOptions client_options;
    client_options.max_retries = 1;
    client_options.initial_backoff = absl::Milliseconds(10);
    absl::StatusOr<std::unique_ptr<op::HttpKubeClient>> c =
        op::HttpKubeClient::Create(config, client_options, Clock::Real());
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
  std::unique_ptr<op::HttpKubeClient> client_;
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

TEST_F(ApiServerTest, ErrorsMapToOneMeaningEach) {
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  absl::StatusOr<json> again = client_->Create(kPods, "default", Pod("a"));
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("already exists"));

  json stale = *client_->Get(kPods, "default", "a");
  ASSERT_TRUE(client_->MergePatch(kPods, "default", "a", {{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  stale["metadata"]["labels"] = {{"k", "stale"}};
  absl::StatusOr<json> conflict = client_->Update(kPods, "default", stale);
  EXPECT_TRUE(absl::IsAborted(conflict.status())) << conflict.status();  // 409: re-read, never overwrite.
  EXPECT_EQ((*client_->Get(kPods, "default", "a"))["metadata"]["labels"]["k"], "v");

  EXPECT_TRUE(absl::IsNotFound(client_->Get(op::kDistributedJobs, "default", "x").status()));
  json nameless = Pod("");
  EXPECT_TRUE(absl::IsInvalidArgument(client_->Create(kPods, "default", nameless).status()));
}

TEST_F(ApiServerTest, WrongTokenIsUnauthenticatedAndChangesNothing) {
  op::KubeConfig config;
  config.server = server_->url();
  config.ca_pem = server_->ca_pem();
  config.token = "wrong";
  auto intruder = op::HttpKubeClient::Create(config, {}, Clock::Real());
  ASSERT_TRUE(intruder.ok());
  EXPECT_TRUE(absl::IsUnauthenticated((*intruder)->Create(kPods, "default", Pod("a")).status()));
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "a").status()));
}

TEST_F(ApiServerTest, UntrustedCertificateIsRefused) {
  op::KubeConfig config;
  config.server = server_->url();
  config.token = "secret-token";  // No CA: the self-signed certificate cannot be verified.
  auto client = op::HttpKubeClient::Create(config, {.max_retries = 0}, Clock::Real());
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
  absl::StatusOr<json> patched =
      client_->MergePatch(kPods, "default", "a", {{"spec", {{"hostname", "h"}}}, {"status", {{"phase", "x"}}}});
  ASSERT_TRUE(patched.ok());
  EXPECT_EQ((*patched)["metadata"]["generation"], 2);
  EXPECT_EQ((*patched)["status"]["phase"], "Running");
}

TEST_F(ApiServerTest, WatchDeliversChangesAfterAVersionInOrder) {
  std::string from = (*client_->List(kPods, "default", ""))["metadata"]["resourceVersion"];
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("a")).ok());
  ASSERT_TRUE(client_->MergePatch(kPods, "default", "a", {{"metadata", {{"labels", {{"k", "v"}}}}}}).ok());
  ASSERT_TRUE(client_->Delete(kPods, "default", "a").ok());
  std::vector<std::string> types;
  op::WatchOptions options;
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
    op::WatchOptions options;
    options.resource_version = from;
    options.timeout = absl::Seconds(20);
    client_->Watch(kPods, "default", options, [&](const json& e) {
      if (e["type"] == "ADDED") seen.Notify();
      return e["type"] != "ADDED";
    }).IgnoreError();
  });
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("late")).ok());
  EXPECT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(10)));
  watcher.join();
}

TEST_F(ApiServerTest, WatchFromAForgottenVersionIsGone) {
  ApiServerOptions server_options;
  server_options.watch_history = 2;
  Start(server_options);
  for (const char* name : {"a", "b", "c", "d"}) ASSERT_TRUE(client_->Create(kPods, "default", Pod(name)).ok());
  op::WatchOptions options;
  options.resource_version = "1";
  options.timeout = absl::Seconds(1);
  absl::Status s = client_->Watch(kPods, "default", options, [](const json&) { return true; });
  EXPECT_TRUE(op::IsGone(s)) << s;
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
  json eviction = {{"apiVersion", "policy/v1"}, {"kind", "Eviction"}, {"metadata", {{"name", "a"}}}};
  ASSERT_TRUE(client_->Call("POST", "/api/v1/namespaces/default/pods/a/eviction", &eviction).ok());
  json evicted = *client_->Get(kPods, "default", "a");
  EXPECT_TRUE(evicted["metadata"].contains("deletionTimestamp"));
  ASSERT_EQ(evicted["status"]["conditions"].size(), 1u);
  EXPECT_EQ(evicted["status"]["conditions"][0]["type"], "DisruptionTarget");
  EXPECT_EQ(evicted["status"]["conditions"][0]["reason"], "EvictionByEvictionAPI");
}

TEST_F(ApiServerTest, DeletingAnOwnerCollectsItsDependents) {
  absl::StatusOr<json> owner = client_->Create(op::kSecrets, "default", {{"metadata", {{"name", "owner"}}}});
  ASSERT_TRUE(owner.ok());
  json child = Pod("child");
  child["metadata"]["ownerReferences"] = {{{"apiVersion", "v1"}, {"kind", "Secret"}, {"name", "owner"},
                                           {"uid", (*owner)["metadata"]["uid"]}}};
  ASSERT_TRUE(client_->Create(kPods, "default", child).ok());
  ASSERT_TRUE(client_->Create(kPods, "default", Pod("unrelated")).ok());
  ASSERT_TRUE(client_->Delete(op::kSecrets, "default", "owner").ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Get(kPods, "default", "child").status()));
  EXPECT_TRUE(client_->Get(kPods, "default", "unrelated").ok());
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
                 {{{"name", "v1"}, {"served", true}, {"storage", true},
                   {"subresources", {{"status", json::object()}}},
                   {"additionalPrinterColumns", {{{"name", "Size"}, {"type", "integer"}, {"jsonPath", ".spec.size"}}}}}}}}}};
  const op::Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions"};
  const op::Resource widgets{"example.com", "v1", "widgets"};
  EXPECT_TRUE(absl::IsNotFound(client_->Create(widgets, "default", {{"metadata", {{"name", "w"}}}}).status()));
  absl::StatusOr<json> created = client_->Create(crds, "", crd);
  ASSERT_TRUE(created.ok()) << created.status();
  json established = *client_->Get(crds, "", "widgets.example.com");
  EXPECT_EQ(established["status"]["conditions"][1]["type"], "Established");
  ASSERT_TRUE(client_->Create(widgets, "default", {{"metadata", {{"name", "w"}}}, {"spec", {{"size", 3}}}}).ok());

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

}  // namespace
}  // namespace cohort::local
