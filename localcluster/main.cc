// cohort-local-cluster: a one-machine Kubernetes for tests and demos. It serves the API subset
// that cohort-operator and kubectl use, writes a kubeconfig for it, and runs a kubelet that
// starts each pod's containers as local processes on their own loopback address. Runs until
// SIGTERM or SIGINT.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/token.h"
#include "localcluster/apiserver/api_server.h"

namespace cohort::local {
namespace {

int Run(int argc, char** argv) {
  InitLogging("cohort-local-cluster");
  std::string dir;
  int port = 0;
  bool http = false;
  CLI::App app{"cohort-local-cluster: a local Kubernetes API server and kubelet for Cohort's tests and demo"};
  app.add_option("--dir", dir, "State directory: the kubeconfig and each pod's files go here")->required();
  app.add_option("--port", port, "API server port on 127.0.0.1; 0 picks a free one")->capture_default_str();
  app.add_flag("--http", http, "Serve plain HTTP instead of HTTPS with a self-signed certificate");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "cohort-local-cluster: cannot create --dir " << dir << ": " << ec.message() << "\n";
    return 2;
  }
  ApiServerOptions options;
  options.port = port;
  options.tls = !http;
  options.token = GenerateToken();
  absl::StatusOr<std::unique_ptr<ApiServer>> server = ApiServer::Start(options, Clock::Real());
  if (!server.ok()) {
    std::cerr << "cohort-local-cluster: " << server.status().message() << "\n";
    return 1;
  }
  std::string kubeconfig = (std::filesystem::path(dir) / "kubeconfig").string();
  {
    std::ofstream out(kubeconfig + ".tmp");
    out << (*server)->Kubeconfig();
  }
  std::filesystem::rename(kubeconfig + ".tmp", kubeconfig, ec);
  std::cout << "cohort-local-cluster: API server at " << (*server)->url() << "; kubeconfig " << kubeconfig
            << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  LogInfo("signal ", sig, ": stopping");
  return 0;
}

}  // namespace
}  // namespace cohort::local

int main(int argc, char** argv) { return cohort::local::Run(argc, argv); }
