#include "kube/kube_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

using ::testing::HasSubstr;

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / "kubeconfig-test";
    std::filesystem::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(KubeConfigTest, CurrentContext_InlineDataDecoded) {
  std::string path = Write("config", R"(
apiVersion: v1
kind: Config
current-context: local
clusters:
- name: other
  cluster: {server: "https://wrong:1"}
- name: cohort
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: )" + absl::Base64Escape("CA PEM") +
                                         R"(
contexts:
- name: local
  context: {cluster: cohort, user: admin, namespace: ml}
users:
- name: admin
  user:
    token: abc
    client-certificate-data: )" + absl::Base64Escape("CERT") +
                                         R"(
    client-key-data: )" + absl::Base64Escape("KEY") +
                                         "\n");
  absl::StatusOr<KubeConfig> cfg = LoadKubeConfig(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->server, "https://127.0.0.1:6443");
  EXPECT_EQ(cfg->ca_pem, "CA PEM");
  EXPECT_EQ(cfg->token, "abc");
  EXPECT_EQ(cfg->client_cert_pem, "CERT");
  EXPECT_EQ(cfg->client_key_pem, "KEY");
  EXPECT_EQ(cfg->namespace_, "ml");
}

TEST_F(KubeConfigTest, NamedContext_FilesRelativeToKubeconfig) {
  Write("ca.pem", "FILE CA");
  std::string path = Write("config2", R"(
current-context: a
clusters:
- {name: c, cluster: {server: "http://127.0.0.1:8080", certificate-authority: ca.pem}}
contexts:
- {name: a, context: {cluster: missing, user: u}}
- {name: b, context: {cluster: c, user: u}}
users:
- {name: u, user: {}}
)");
  absl::StatusOr<KubeConfig> cfg = LoadKubeConfig(path, "b");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->ca_pem, "FILE CA");
  EXPECT_EQ(cfg->namespace_, "default");
  absl::StatusOr<KubeConfig> broken = LoadKubeConfig(path);  // Context 'a': no such cluster.
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("cluster 'missing'"));
}

TEST_F(KubeConfigTest, Errors_NameTheProblem) {
  absl::StatusOr<KubeConfig> missing = LoadKubeConfig((dir_ / "nope").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("KUBECONFIG"));
  std::string path = Write("config3", "current-context: x\ncontexts: []\n");
  absl::StatusOr<KubeConfig> no_context = LoadKubeConfig(path);
  EXPECT_EQ(no_context.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_context.status().message(), HasSubstr("no context 'x'"));
  std::string bad = Write("config4", "clusters: [unclosed\n");
  EXPECT_EQ(LoadKubeConfig(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KubeConfigTest, InCluster_FromServiceAccountFiles) {
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(LoadInClusterConfig(dir_.string()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  Write("token", "sa-token\n");
  Write("ca.crt", "SA CA");
  Write("namespace", "training\n");
  absl::StatusOr<KubeConfig> cfg = LoadInClusterConfig(dir_.string());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->server, "https://10.96.0.1:443");
  EXPECT_EQ(cfg->token, "sa-token");
  EXPECT_EQ(cfg->ca_pem, "SA CA");
  EXPECT_EQ(cfg->namespace_, "training");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
}

}  // namespace
}  // namespace cohort::kube
