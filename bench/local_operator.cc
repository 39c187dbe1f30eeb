#include "bench/local_operator.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "kube/kube_config.h"

namespace cohort::bench {
namespace {

std::string BinPath(const std::string& name) { return absl::StrCat(COHORT_BIN_DIR, "/", name); }

}  // namespace

LocalOperator::~LocalOperator() {
  client.reset();
  op.reset();
  cluster.reset();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

absl::StatusOr<std::unique_ptr<LocalOperator>> StartLocalOperator(
    const std::string& tool, const std::vector<std::string>& cluster_flags,
    const std::vector<std::string>& operator_flags) {
  auto setup = std::make_unique<LocalOperator>();
  std::string pattern = absl::StrCat("/tmp/cohort-", tool, "-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  setup->dir = pattern;
  std::fprintf(stderr, "%s: local control plane in %s\n", tool.c_str(), setup->dir.c_str());
  std::vector<std::string> argv = {BinPath("cohort-local-cluster"), "--dir", setup->dir};
  argv.insert(argv.end(), cluster_flags.begin(), cluster_flags.end());
  absl::StatusOr<std::unique_ptr<WatchedProcess>> cluster = WatchedProcess::Start(argv);
  if (!cluster.ok()) return cluster.status();
  setup->cluster = *std::move(cluster);
  const std::string line = setup->cluster->WaitForLine("kubeconfig ", absl::Seconds(60));
  if (line.empty())
    return absl::UnavailableError("cohort-local-cluster did not start:\n" +
                                  setup->cluster->Output());
  const std::string kubeconfig = line.substr(line.rfind(' ') + 1);
  if (setup->cluster->WaitForLine("cohort-local-cluster: ready", absl::Seconds(60)).empty()) {
    return absl::UnavailableError("cohort-local-cluster is not ready:\n" +
                                  setup->cluster->Output());
  }
  // kubectl's words go to a file, not into a benchmark's JSON on stdout.
  Subprocess::Options apply(
      {"kubectl", "apply", "-f", absl::StrCat(COHORT_SOURCE_DIR, "/manifests/crd")},
      {{"KUBECONFIG", kubeconfig}}, /*capture_output=*/false);
  apply.output_path = absl::StrCat(setup->dir, "/kubectl-apply.log");
  absl::StatusOr<Subprocess> kubectl = Subprocess::Start(apply);
  if (!kubectl.ok() || Subprocess::ExitCodeOf(kubectl->Wait()) != 0) {
    std::ifstream in(apply.output_path);
    return absl::UnavailableError(absl::StrCat(
        "kubectl apply of the CRD failed: ", std::string(std::istreambuf_iterator<char>(in), {})));
  }
  std::vector<std::string> op_argv = {
      BinPath("cohort-operator"), "--kubeconfig", kubeconfig, "--metrics-port", "0",
      "--leader-elect=false"};
  op_argv.insert(op_argv.end(), operator_flags.begin(), operator_flags.end());
  absl::StatusOr<std::unique_ptr<WatchedProcess>> op = WatchedProcess::Start(op_argv);
  if (!op.ok()) return op.status();
  setup->op = *std::move(op);
  if (setup->op->WaitForLine("informers synced", absl::Seconds(30)).empty()) {
    return absl::UnavailableError("cohort-operator did not start:\n" + setup->op->Output());
  }
  absl::StatusOr<kube::KubeConfig> config = kube::LoadKubeConfig(kubeconfig);
  if (!config.ok()) return config.status();
  absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> client = kube::HttpKubeClient::Create(
      *config, kube::HttpKubeClientOptions{.qps = 0, .user_agent = tool}, Clock::Real());
  if (!client.ok()) return client.status();
  setup->client = *std::move(client);
  return setup;
}

}  // namespace cohort::bench
