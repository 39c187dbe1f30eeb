#include "localcluster/kubelet/process_runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "localcluster/podnet/pod_network_env.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ".../cohort-sidecar:0.1.0" or "...@sha256:..." -> "cohort-sidecar".
std::string ProgramOfImage(const std::string& image) {
  std::string name = image.substr(image.rfind('/') == std::string::npos ? 0 : image.rfind('/') + 1);
  name = name.substr(0, name.find('@'));
  return name.substr(0, name.find(':'));
}

std::optional<std::string> FindProgram(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), X_OK) == 0 ? std::optional(program) : std::nullopt;
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace

ProcessRuntime::ProcessRuntime(const KubeletOptions& options, RuntimePod pod)
    : options_(options), pod_(std::move(pod)) {}

std::map<std::string, std::string> ProcessRuntime::BaseEnvironment() const {
  // What a container's image and podman would give it.
  std::map<std::string, std::string> env;
  const char* host_path = getenv("PATH");
  env["PATH"] =
      absl::StrCat(absl::StrJoin(options_.bin_dirs, ":"), options_.bin_dirs.empty() ? "" : ":",
                   host_path ? host_path : "/usr/bin:/bin");
  env["HOME"] = pod_.dir;
  env["HOSTNAME"] = PodHostname(pod_.object);
  return env;
}

void ProcessRuntime::CompleteEnvironment(const json& container,
                                         std::map<std::string, std::string>& env) const {
  for (auto& [name, value] : env) value = Remap(container, value);
  const std::string& service_account_dir = pod_.volumes->service_account_dir();
  if (!service_account_dir.empty()) {
    // Where the service account's mount path lies, for the pod-network library (kubelet.h).
    // Volumes are not listed: their paths are rewritten in the arguments and environment, and
    // a program creating files under them must see one file system, which only open() cannot
    // give. Containers have the real mount.
    env[kMountsVariable] = absl::StrCat(kServiceAccountMountPath, "=", service_account_dir);
  }
  env[kPodIpVariable] = pod_.address;
  env[kHostsFileVariable] = (fs::path(options_.root_dir) / "hosts").string();
  env["GRPC_DNS_RESOLVER"] = "native";  // getaddrinfo, which the pod-network library answers.
  if (!options_.pod_network_library.empty()) env["LD_PRELOAD"] = options_.pod_network_library;
}

std::string ProcessRuntime::Remap(const json& container, const std::string& value) const {
  const std::map<std::string, std::string>& volumes = pod_.volumes->directories();
  for (const json& m : container.value("volumeMounts", json::array())) {
    std::string mount = m.value("mountPath", "");
    auto volume = volumes.find(m.value("name", ""));
    if (mount.empty() || volume == volumes.end()) continue;
    for (size_t at = 0; (at = value.find(mount, at)) != std::string::npos; ++at) {
      bool starts = at == 0 || value[at - 1] == '=' || value[at - 1] == ':';
      size_t end = at + mount.size();
      bool ends = end == value.size() || value[end] == '/' || value[end] == ':';
      if (starts && ends)
        return value.substr(0, at) + volume->second + Remap(container, value.substr(end));
    }
  }
  return value;
}

absl::Status ProcessRuntime::StartContainer(const json& container,
                                            std::map<std::string, std::string> env,
                                            const std::string& log_path, RuntimeContainer& c) {
  std::vector<std::string> argv;
  for (const json& a : container.value("command", json::array())) {
    argv.push_back(Remap(container, ExpandReferences(a, env)));
  }
  if (argv.empty()) argv.push_back(ProgramOfImage(container.value("image", "")));
  for (const json& a : container.value("args", json::array())) {
    argv.push_back(Remap(container, ExpandReferences(a, env)));
  }
  std::optional<std::string> program = FindProgram(argv[0], env["PATH"]);
  if (!program) {
    return absl::NotFoundError(absl::StrCat(
        "executable '", argv[0], "' not found in the container's PATH (", env["PATH"], ")"));
  }
  argv[0] = *program;
  Subprocess::Options options;
  options.argv = argv;
  options.env_set = env;
  options.inherit_env = false;
  options.output_path = log_path;
  options.working_dir = pod_.dir;
  options.die_with_parent = true;  // A killed kubelet is a lost machine: its pods go with it.
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) return p.status();
  c.process = std::move(*p);
  return absl::OkStatus();
}

void ProcessRuntime::Signal(RuntimeContainer& c, int sig) { c.process.Signal(sig); }

std::optional<ContainerExit> ProcessRuntime::Reap(RuntimeContainer& c) {
  if (!c.process.running()) return std::nullopt;
  std::optional<int> status = c.process.Poll();
  if (!status) return std::nullopt;
  return ContainerExit{.exit_code = Subprocess::ExitCodeOf(*status)};
}

std::string ProcessRuntime::ContainerId(const RuntimeContainer& c) const {
  return c.process.pid() > 0 ? absl::StrCat("local://", c.process.pid()) : "";
}

}  // namespace cohort::local
