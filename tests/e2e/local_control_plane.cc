#include "tests/e2e/local_control_plane.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kube/kube_config.h"
#include "localcluster/lose_node.h"
#include "operator/api/distributed_job.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string BinPath(const std::string& name) { return absl::StrCat(COHORT_BIN_DIR, "/", name); }

int SecondsLeft(absl::Time deadline) {
  return std::max<int>(1, static_cast<int>(absl::ToInt64Seconds(deadline - absl::Now()) + 1));
}

// Starts `argv` with its output echoed under `label`; fails the current test if it cannot.
std::unique_ptr<WatchedProcess> StartWatched(const std::string& label,
                                             std::vector<std::string> argv) {
  absl::StatusOr<std::unique_ptr<WatchedProcess>> p =
      WatchedProcess::Start(std::move(argv), {}, label);
  EXPECT_TRUE(p.ok()) << label << ": " << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

}  // namespace

LocalControlPlane::LocalControlPlane(std::vector<std::string> flags) {
  // TLS writes to a connection the server closed raise SIGPIPE; the client reports the error.
  signal(SIGPIPE, SIG_IGN);
  char pattern[] = "/tmp/cohort-e2e-XXXXXX";  // Short: agent socket paths live below it.
  const char* made = mkdtemp(pattern);
  EXPECT_NE(made, nullptr) << "mkdtemp";
  if (made == nullptr) return;
  dir_ = made;
  std::vector<std::string> argv = {BinPath("cohort-local-cluster"), "--dir", dir_};
  argv.insert(argv.end(), flags.begin(), flags.end());
  cluster_ = StartWatched("cluster", argv);
  if (!cluster_) return;
  std::string line = cluster_->WaitForLine("kubeconfig ", absl::Seconds(30));
  EXPECT_FALSE(line.empty()) << "cohort-local-cluster did not start";
  if (line.empty()) return;
  kubeconfig_ = line.substr(line.rfind(' ') + 1);
  EXPECT_FALSE(cluster_->WaitForLine("cohort-local-cluster: ready", absl::Seconds(30)).empty());
  absl::StatusOr<kube::KubeConfig> config = kube::LoadKubeConfig(kubeconfig_);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return;
  absl::StatusOr<std::unique_ptr<kube::HttpKubeClient>> client =
      kube::HttpKubeClient::Create(*config, kube::HttpKubeClientOptions{.qps = 0}, Clock::Real());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return;
  client_ = std::move(*client);
  Result crd = Kubectl({"apply", "-f", absl::StrCat(COHORT_SOURCE_DIR, "/manifests/crd")});
  EXPECT_EQ(crd.exit_code, 0) << crd.output;
}

LocalControlPlane::~LocalControlPlane() {
  if (cluster_) {
    // SIGTERM: the kubelet stops every pod's processes before the cluster exits.
    cluster_->Signal(SIGTERM);
    EXPECT_TRUE(cluster_->WaitForExit(absl::Seconds(30)).has_value())
        << "cohort-local-cluster did not stop";
    cluster_.reset();
  }
  if (!dir_.empty() && !::testing::Test::HasFailure()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  } else if (!dir_.empty()) {
    std::fprintf(stderr, "kept %s (pod logs under pods/) for the failure above\n", dir_.c_str());
  }
}

absl::Status LocalControlPlane::LoseNode(const std::string& node) {
  return local::LoseLocalNode(dir_, node);
}

LocalControlPlane::Result LocalControlPlane::Kubectl(std::vector<std::string> args,
                                                     const std::string& stdin_text) {
  static int files = 0;
  if (!stdin_text.empty()) {
    std::string path = absl::StrCat(dir_, "/manifest-", ++files, ".yaml");
    std::ofstream(path) << stdin_text;
    args.push_back("-f");
    args.push_back(path);
  }
  args.insert(args.begin(), "kubectl");
  return Command(args);
}

LocalControlPlane::Result LocalControlPlane::Run(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  Result result;
  absl::StatusOr<Subprocess> p = Subprocess::Start(Subprocess::Options{args, env});
  if (!p.ok()) {
    result.output = std::string(p.status().message());
    return result;
  }
  LineReader reader(p->output_fd());
  std::vector<std::string> lines;
  while (reader.Read(&lines)) {
  }
  for (const std::string& line : lines) absl::StrAppend(&result.output, line, "\n");
  result.exit_code = Subprocess::ExitCodeOf(p->Wait());
  return result;
}

LocalControlPlane::Result LocalControlPlane::Command(const std::vector<std::string>& args) {
  Result result = Run(args, {{"KUBECONFIG", kubeconfig_}});
  std::fprintf(stderr, "[kubectl %s] exit %d\n%s",
               absl::StrJoin(args.begin() + 1, args.end(), " ").c_str(), result.exit_code,
               result.output.c_str());
  return result;
}

std::unique_ptr<WatchedProcess> LocalControlPlane::StartOperator(
    const std::string& label, std::vector<std::string> extra_flags) {
  std::vector<std::string> argv = {BinPath("cohort-operator"),
                                   "--kubeconfig",
                                   kubeconfig_,
                                   "--metrics-address",
                                   "127.0.0.1",
                                   "--metrics-port",
                                   "0"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  return StartWatched(label, argv);
}

json LocalControlPlane::WaitForJob(const std::string& ns, const std::string& name,
                                   const std::function<bool(const json&)>& done,
                                   absl::Duration timeout) {
  return WaitForObject(op::kDistributedJobs, ns, name, done, timeout);
}

json LocalControlPlane::WaitForObject(const kube::Resource& r, const std::string& ns,
                                      const std::string& name,
                                      const std::function<bool(const json&)>& done,
                                      absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  json last;
  while (absl::Now() < deadline) {
    absl::StatusOr<json> object = client_->Get(r, ns, name);
    if (object.ok()) {
      last = *object;
      if (done(last)) return last;
    }
    kube::WatchOptions options;
    options.resource_version =
        object.ok() ? (*object)["metadata"].value("resourceVersion", "") : "";
    options.timeout = absl::Seconds(SecondsLeft(deadline));
    bool matched = false;
    client_
        ->Watch(r, ns, options,
                [&](const json& event) {
                  const json& object = event["object"];
                  if (event.value("type", "") == "BOOKMARK" ||
                      object["metadata"].value("name", "") != name)
                    return true;
                  last = object;
                  matched = done(object);
                  return !matched;
                })
        .IgnoreError();
    if (matched) return last;
  }
  std::fprintf(stderr, "%s %s/%s, last seen: %s\n", r.plural.c_str(), ns.c_str(), name.c_str(),
               last.dump(2).c_str());
  return json();
}

bool LocalControlPlane::WaitForPods(const std::string& ns, const std::string& selector,
                                    const std::function<bool(const std::vector<json>&)>& done,
                                    absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    absl::StatusOr<json> list = client_->List(kube::kPods, ns, selector);
    if (!list.ok()) continue;
    std::map<std::string, json> pods;
    for (const json& p : (*list)["items"]) pods[p["metadata"].value("name", "")] = p;
    auto holds = [&] {
      std::vector<json> current;
      for (const auto& [name, pod] : pods) current.push_back(pod);
      return done(current);
    };
    if (holds()) return true;
    kube::WatchOptions options;
    options.label_selector = selector;
    options.resource_version = (*list)["metadata"].value("resourceVersion", "");
    options.timeout = absl::Seconds(SecondsLeft(deadline));
    bool matched = false;
    client_
        ->Watch(kube::kPods, ns, options,
                [&](const json& event) {
                  std::string type = event.value("type", "");
                  if (type == "BOOKMARK") return true;
                  std::string name = event["object"]["metadata"].value("name", "");
                  if (type == "DELETED") {
                    pods.erase(name);
                  } else {
                    pods[name] = event["object"];
                  }
                  matched = holds();
                  return !matched;
                })
        .IgnoreError();
    if (matched) return true;
  }
  return false;
}

pid_t LocalControlPlane::FindProcess(const std::string& program,
                                     const std::vector<std::string>& env) {
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc")) {
    std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile(entry.path() / "cmdline");
    if (!absl::StrContains(cmdline, program)) continue;
    // cohort-launch names the program it starts in its own arguments: the program is its child.
    const std::string argv0 = cmdline.substr(0, cmdline.find('\0'));
    if (program != "cohort-launch" && fs::path(argv0).filename() == "cohort-launch") continue;
    std::vector<std::string> vars = absl::StrSplit(ReadFile(entry.path() / "environ"), '\0');
    bool all = true;
    for (const std::string& want : env) {
      all = all && std::find(vars.begin(), vars.end(), want) != vars.end();
    }
    if (all) return std::stoi(pid);
  }
  return -1;
}

pid_t LocalControlPlane::WaitForProcess(const std::string& program,
                                        const std::vector<std::string>& env,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  pid_t pid = FindProcess(program, env);
  while (pid < 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // /proc, changed by other processes: polled.
    pid = FindProcess(program, env);
  }
  return pid;
}

LocalControlPlane::Result LocalControlPlane::CreateConfigMap(
    const std::string& name, const std::vector<std::string>& from_files) {
  std::vector<std::string> create = {"create", "configmap", name};
  for (const std::string& f : from_files) create.push_back(absl::StrCat("--from-file=", f));
  create.insert(create.end(), {"--dry-run=client", "-o", "yaml"});
  Result made = Kubectl(create);
  if (made.exit_code != 0) return made;
  return Kubectl({"apply"}, made.output);
}

LocalControlPlane::Result LocalControlPlane::Evict(const std::string& ns, const std::string& pod) {
  return Kubectl(
      {"create", "--raw", absl::StrCat("/api/v1/namespaces/", ns, "/pods/", pod, "/eviction")},
      json{{"apiVersion", "policy/v1"},
           {"kind", "Eviction"},
           {"metadata", {{"name", pod}, {"namespace", ns}}}}
          .dump());
}

int MetricsPort(const json& pod) {
  for (const char* kind : {"initContainers", "containers"}) {
    for (const json& c : pod["spec"].value(kind, json::array())) {
      for (const json& p : c.value("ports", json::array())) {
        if (p.value("name", "") == "metrics") return p.value("containerPort", 0);
      }
    }
  }
  return 0;
}

int64_t StatusInt(const json& job, const char* field) {
  if (!job.is_object() || !job.contains("status")) return 0;
  return job["status"].value(field, int64_t{0});
}

std::string Phase(const json& job) {
  if (!job.is_object() || !job.contains("status")) return "";
  return job["status"].value("phase", "");
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string LocalControlPlane::ReadPodFile(const std::string& pod, const std::string& path) const {
  std::ifstream in(absl::StrCat(dir_, "/pods/default_", pod, "/", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace cohort::testing
