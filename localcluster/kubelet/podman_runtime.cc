#include "localcluster/kubelet/podman_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "localcluster/kubelet/volumes.h"

namespace cohort::local {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string NodeLabelValue(const KubeletOptions& o) {
  return absl::StrCat(o.podman_network, "_", o.node_name);
}

PodmanRuntime::PodmanRuntime(const KubeletOptions& options, RuntimePod pod)
    : options_(options), pod_(std::move(pod)) {}

absl::Status PodmanRuntime::CreateSandbox() {
  const KubeletOptions& o = options_;
  sandbox_ = absl::StrCat(o.podman_network, "_", pod_.ns, "_", pod_.name, "_",
                          pod_.object["metadata"].value("uid", "").substr(0, 8));
  WriteHostsFile();
  return CreatePodSandbox(PodSandboxSpec{.name = sandbox_,
                                         .network = o.podman_network,
                                         .address = pod_.address,
                                         .hostname = PodHostname(pod_.object),
                                         .labels = {{kClusterLabel, o.podman_network},
                                                    {kNodeLabel, NodeLabelValue(o)},
                                                    {"io.kubernetes.pod.namespace", pod_.ns},
                                                    {"io.kubernetes.pod.name", pod_.name}}});
}

void PodmanRuntime::RemoveSandbox() {
  if (!sandbox_.empty()) RemovePodSandbox(std::exchange(sandbox_, ""));
}

void PodmanRuntime::WriteHostsFile() {
  struct stat cluster_file {};
  const std::string cluster = (fs::path(options_.root_dir) / "hosts").string();
  const bool exists = stat(cluster.c_str(), &cluster_file) == 0;
  const std::tuple<ino_t, off_t, int64_t> version = {
      exists ? cluster_file.st_ino : 0, exists ? cluster_file.st_size : -1,
      exists ? int64_t{cluster_file.st_mtim.tv_sec} * 1000000000 + cluster_file.st_mtim.tv_nsec
             : 0};
  if (!hosts_path_.empty() && version == hosts_version_) return;
  std::string own = PodHostname(pod_.object);
  const std::string subdomain = pod_.object["spec"].value("subdomain", "");
  if (!subdomain.empty())
    own = absl::StrCat(own, ".", subdomain, ".", pod_.ns, ".svc.cluster.local ", own);
  std::string text =
      absl::StrCat("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                   pod_.address, "\t", own, "\n");
  std::ifstream in(cluster);
  std::stringstream names;
  names << in.rdbuf();
  text += names.str();
  hosts_path_ = (fs::path(pod_.dir) / "etc-hosts").string();
  if (text != hosts_text_) {
    const int fd = open(hosts_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;  // Tried again on the next call.
    const bool written =
        pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
        ftruncate(fd, static_cast<off_t>(text.size())) == 0;
    close(fd);
    if (!written) return;
    hosts_text_ = text;
  }
  hosts_version_ = version;
}

absl::Status PodmanRuntime::ApplySecurityContext(const json& container, ContainerSpec& spec) const {
  json context = pod_.object["spec"].value("securityContext", json::object());
  const json own =
      container.value("securityContext", json::object());  // items() must not outlive it.
  for (const auto& [key, value] : own.items()) context[key] = value;
  std::string user;  // Who it runs as: runAsUser, else the image's USER.
  if (context.contains("runAsUser") && context["runAsUser"].is_number_integer()) {
    user = absl::StrCat(context["runAsUser"].get<int64_t>());
  } else if (context.contains("runAsGroup") || context.value("runAsNonRoot", false)) {
    absl::StatusOr<std::string> image_user = ImageUser(spec.image);
    if (!image_user.ok()) return image_user.status();
    user = image_user->substr(0, image_user->find(':'));
    if (user.empty()) user = "0";
  }
  if (context.contains("runAsGroup") && context["runAsGroup"].is_number_integer()) {
    spec.user = absl::StrCat(user, ":", context["runAsGroup"].get<int64_t>());
  } else if (context.contains("runAsUser")) {
    spec.user = user;
  }
  if (context.value("runAsNonRoot", false)) {
    int64_t uid = 0;
    if (!absl::SimpleAtoi(user, &uid)) {  // Kubernetes' own refusal.
      return absl::FailedPreconditionError(
          absl::StrCat("container has runAsNonRoot and image has non-numeric user (", user,
                       "), cannot verify user is non-root (image \"", spec.image, "\")"));
    }
    if (uid == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "container has runAsNonRoot and image will run as root (image \"", spec.image,
          "\"; set securityContext.runAsUser, or use an image whose USER is not root)"));
    }
  }
  spec.read_only_root = context.value("readOnlyRootFilesystem", false);
  spec.no_new_privileges = !context.value("allowPrivilegeEscalation", true);
  const json capabilities = context.value("capabilities", json::object());
  for (const json& cap : capabilities.value("drop", json::array()))
    spec.cap_drop.push_back(cap.get<std::string>());
  for (const json& cap : capabilities.value("add", json::array()))
    spec.cap_add.push_back(cap.get<std::string>());
  return absl::OkStatus();
}

absl::Status PodmanRuntime::StartContainer(const json& container,
                                           std::map<std::string, std::string> env,
                                           const std::string& log_path, RuntimeContainer& c) {
  c.pid = 0;
  c.next_kill = absl::InfinitePast();
  const PodVolumes& volumes = *pod_.volumes;
  ContainerSpec spec;
  spec.name = absl::StrCat(sandbox_, "_", container.value("name", ""));
  spec.pod = sandbox_;
  spec.image = container.value("image", "");
  for (const json& a : container.value("command", json::array()))
    spec.command.push_back(ExpandReferences(a, env));
  for (const json& a : container.value("args", json::array()))
    spec.args.push_back(ExpandReferences(a, env));
  spec.env = env;
  spec.working_dir = container.value("workingDir", "");
  spec.labels = {{kClusterLabel, options_.podman_network},
                 {"io.kubernetes.pod.namespace", pod_.ns},
                 {"io.kubernetes.pod.name", pod_.name},
                 {"io.kubernetes.container.name", container.value("name", "")}};
  for (const json& m : container.value("volumeMounts", json::array())) {
    auto volume = volumes.directories().find(m.value("name", ""));
    if (volume == volumes.directories().end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("volumeMount \"", m.value("name", ""), "\" names no volume of the pod"));
    }
    std::string source = volume->second;
    if (!m.value("subPath", "").empty())
      source = (fs::path(source) / m.value("subPath", "")).string();
    spec.mounts.push_back(
        {.source = source,
         .target = m.value("mountPath", ""),
         .read_only = m.value("readOnly", false) || volumes.read_only(volume->first)});
  }
  const bool own_mount =
      std::any_of(spec.mounts.begin(), spec.mounts.end(),
                  [](const ContainerMount& m) { return m.target == kServiceAccountMountPath; });
  if (!volumes.service_account_dir().empty() &&
      !own_mount) {  // A volume mounted there takes its place.
    spec.mounts.push_back({.source = volumes.service_account_dir(),
                           .target = kServiceAccountMountPath,
                           .read_only = true});
  }
  spec.mounts.push_back({.source = hosts_path_, .target = "/etc/hosts", .read_only = true});
  if (absl::Status s = ApplySecurityContext(container, spec); !s.ok()) return s;
  absl::StatusOr<std::string> id = CreateContainer(spec);
  if (!id.ok()) return id.status();
  c.name = spec.name;
  c.id = *id;
  Subprocess::Options options;
  options.argv = StartAttachedCommand(spec.name);
  options.output_path = log_path;
  // The attached client dies with a killed kubelet; the node's PodReaper removes the container.
  options.die_with_parent = true;
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) return p.status();
  c.process = std::move(*p);
  return absl::OkStatus();
}

std::string PodmanRuntime::StartErrorReason(const absl::Status& error) const {
  // Kubernetes' reason for an image missing from the local store, which is never pulled.
  return absl::IsNotFound(error) ? "ErrImageNeverPull" : PodRuntime::StartErrorReason(error);
}

void PodmanRuntime::Signal(RuntimeContainer& c, int sig) {
  if (sig == SIGKILL) {
    if (absl::Now() < c.next_kill) return;
    c.next_kill = absl::Now() + absl::Milliseconds(500);
    // A container not started yet (its attached client is starting it) cannot be signalled:
    // removing it ends the client too.
    if (!KillContainer(c.name, SIGKILL).ok()) RemoveContainer(c.name);
    return;
  }
  // A SIGTERM lost the same way is made up for by the SIGKILL at the grace period's end.
  KillContainer(c.name, sig).IgnoreError();
}

std::optional<ContainerExit> PodmanRuntime::Reap(RuntimeContainer& c) {
  if (!c.process.running()) return std::nullopt;
  std::optional<int> status = c.process.Poll();
  if (!status) return std::nullopt;
  ContainerExit exit{.exit_code = Subprocess::ExitCodeOf(*status)};
  // The container's own account; the attached client's code is the same but for kills.
  absl::StatusOr<ContainerState> state = InspectContainer(c.name);
  if (state.ok() && state->status != "running") {
    exit.exit_code = state->exit_code;
    exit.oom_killed = state->oom_killed;
  }
  return exit;
}

pid_t PodmanRuntime::RootPid(RuntimeContainer& c) {
  if (c.pid == 0) {
    absl::StatusOr<ContainerState> state = InspectContainer(c.name);
    if (state.ok() && state->status == "running") c.pid = state->pid;
  }
  return c.pid;
}

std::string PodmanRuntime::ContainerId(const RuntimeContainer& c) const {
  return c.id.empty() ? "" : absl::StrCat("podman://", c.id);
}

}  // namespace cohort::local
