#include "localcluster/kubelet/kubelet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <httplib.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/backoff.h"
#include "common/log.h"
#include "common/process/subprocess.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "kube/json_fields.h"
#include "kube/quantity.h"
#include "kube/retry.h"
#include "localcluster/controllers/node_lifecycle.h"
#include "localcluster/controllers/scheduler.h"
#include "localcluster/podnet/pod_network_env.h"

namespace cohort::local {
namespace {

// Where Kubernetes mounts a pod's service account.
constexpr char kServiceAccountMountPath[] = "/var/run/secrets/kubernetes.io/serviceaccount";

using json = nlohmann::json;
namespace fs = std::filesystem;

// kPodman: the label value that marks a node's podman pods.
std::string NodeLabelValue(const KubeletOptions& o) { return absl::StrCat(o.podman_network, "_", o.node_name); }

std::string PodKey(const json& pod) {
  return absl::StrCat(pod["metadata"].value("namespace", ""), "/", pod["metadata"].value("name", ""));
}

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

// $(NAME) references in commands and arguments, from the container's environment.
std::string Expand(const std::string& text, const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "$(") == 0) {
      size_t close = text.find(')', i);
      if (close != std::string::npos) {
        auto it = env.find(text.substr(i + 2, close - i - 2));
        if (it != env.end()) {
          out += it->second;
          i = close;
          continue;
        }
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

std::string Tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  std::streamoff size = in.tellg();
  std::streamoff from = std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes));
  in.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (from > 0 && text.find('\n') != std::string::npos) text = text.substr(text.find('\n') + 1);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// The node's Ready condition while its kubelet runs.
json KubeletReady() {
  return kube::Condition("Ready", "True", "KubeletReady", "cohort local kubelet is ready");
}

}  // namespace

// One pod's life on this node, on its own thread.
class Kubelet::PodWorker {
 public:
  PodWorker(Kubelet* kubelet, const json& pod, std::string address)
      : kubelet_(kubelet), client_(kubelet->client_), pod_(pod), address_(std::move(address)),
        ns_(pod["metadata"].value("namespace", "")), name_(pod["metadata"].value("name", "")) {
    dir_ = PodDir(kubelet->options_.root_dir, ns_, name_);
    thread_ = std::thread([this] { Run(); });
  }
  ~PodWorker() {
    {
      absl::MutexLock lock(&mu_);
      stop_retrying_ = true;  // The pod is gone or the kubelet stops: nothing left to confirm.
    }
    Terminate(absl::ZeroDuration(), /*remove=*/false);
    if (thread_.joinable()) thread_.join();
    if (deleter_.joinable()) deleter_.join();
  }

  // Called with every new version of the pod object.
  void Update(const json& pod) {
    if (!pod["metadata"].contains("deletionTimestamp")) return;
    int64_t grace = pod["metadata"].value("deletionGracePeriodSeconds", int64_t{30});
    if (Terminate(absl::Seconds(grace), /*remove=*/true)) {
      // Nothing runs any more: confirm the deletion, on a thread of its own (this runs on the
      // informer's thread, under the kubelet's lock).
      absl::MutexLock lock(&mu_);
      if (!deleting_) {
        deleting_ = true;
        deleter_ = std::thread([this] { DeleteOurPodRetrying(); });
      }
    }
  }
  // The pod object is gone: stop at once.
  void Deleted() { Terminate(absl::ZeroDuration(), /*remove=*/false); }
  const std::string& address() const { return address_; }

 private:
  struct Container {
    json spec;
    bool sidecar = false;
    bool init = false;
    std::string log_path;
    Subprocess process;
    std::optional<absl::Time> started;
    std::optional<int> exit_code;
    std::string reason;
    std::string message;
    std::optional<absl::Time> finished;
    int restarts = 0;
    bool ready = false;
    absl::Time next_probe;
    std::string start_error;
    int64_t memory_limit = 0;  // resources.limits.memory in bytes; 0: none.
    bool oom_killed = false;
    // A main container that exited under restartPolicy Always/OnFailure: when it starts again.
    std::optional<absl::Time> restart_at;
    // Exits in a row without a 10-minute run between them: the next restart's back-off.
    int crash_streak = 0;
    bool start_failed = false;  // StartContainer could not start it (counts as an exit).
    // kPodman: the podman container's name and ID, its first process (0: not looked up yet), and
    // when SIGKILL may be sent again (`podman kill` is a command, not a syscall: not every 20 ms).
    std::string container_name;
    std::string container_id;
    pid_t container_pid = 0;
    absl::Time next_kill = absl::InfinitePast();
  };

  bool InContainers() const { return kubelet_->options_.runtime == ContainerRuntime::kPodman; }

  // Sends `sig` to the container's processes.
  void SignalContainer(Container& c, int sig) {
    if (!c.process.running()) return;
    if (!InContainers()) {
      c.process.Signal(sig);
      return;
    }
    if (sig == SIGKILL) {
      if (absl::Now() < c.next_kill) return;
      c.next_kill = absl::Now() + absl::Milliseconds(500);
      // A container not started yet (its attached client is starting it) cannot be signalled:
      // removing it ends the client too.
      if (!KillContainer(c.container_name, SIGKILL).ok()) RemoveContainer(c.container_name);
      return;
    }
    // A SIGTERM lost the same way is made up for by the SIGKILL at the grace period's end.
    KillContainer(c.container_name, sig).IgnoreError();
  }

  // Asks the pod to stop; true if it already has (the worker is done).
  bool Terminate(absl::Duration grace, bool remove) {
    absl::MutexLock lock(&mu_);
    if (done_) return true;
    absl::Time deadline = absl::Now() + grace;
    if (!terminate_ || deadline < kill_deadline_) kill_deadline_ = deadline;
    terminate_ = true;
    remove_ |= remove;
    return false;
  }

  bool Terminating() {
    absl::MutexLock lock(&mu_);
    return terminate_;
  }

  // Waits up to `d`, returning early when termination is requested.
  void Pause(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&terminate_), d);
  }

  void Run() {
    absl::Status s = Prepare();
    if (s.ok()) {
      Execute();
    } else {
      LogWarning("pod ", ns_, "/", name_, ": ", s.message());
      phase_ = "Failed";
      pod_reason_ = "ContainerCreating";
      pod_message_ = std::string(s.message());
      WriteStatus();
    }
    RemoveSandbox();
    bool remove;
    {
      absl::MutexLock lock(&mu_);
      remove = remove_;
      done_ = true;  // From now on Update() removes a deleted pod itself.
    }
    if (remove) {
      bool first;
      {
        absl::MutexLock lock(&mu_);
        first = !deleting_;
        deleting_ = true;
      }
      if (first) DeleteOurPodRetrying();
    }
  }

  absl::Status Prepare() {
    start_time_ = absl::Now();
    // A pod of the same name ran here before (a gang restart reuses names): its logs and
    // volumes are not this pod's. Its worker has usually finished before the API server let the
    // name be reused; one that has not (its pod was removed at once) no longer writes the pod
    // object (IsOurs).
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::create_directories(dir_);
    WriteStatus();
    // Volumes.
    const json spec = pod_.value("spec", json::object());
    for (const json& v : spec.value("volumes", json::array())) {
      std::string name = v.value("name", "");
      std::string path = (fs::path(dir_) / "volumes" / name).string();
      if (v.contains("hostPath")) {
        volumes_[name] = v["hostPath"].value("path", "");
        continue;
      }
      fs::create_directories(path);
      // As Kubernetes makes an emptyDir: writable by whatever user the containers run as.
      fs::permissions(path, fs::perms::all, ec);
      volumes_[name] = path;
      // Volumes of API data are mounted read-only, as Kubernetes mounts them; emptyDir and others
      // are an empty directory.
      std::vector<json> sources;
      if (v.contains("secret") || v.contains("configMap") || v.contains("downwardAPI")) {
        sources.push_back(v);
      } else if (v.contains("projected")) {
        for (const json& source : kube::Member(v, "projected").value("sources", json::array())) sources.push_back(source);
      } else {
        continue;
      }
      read_only_volumes_.insert(name);
      for (const json& source : sources) {
        if (absl::Status s = WriteVolumeSource(source, path); !s.ok()) {
          return absl::Status(s.code(), absl::StrCat("volume \"", name, "\": ", s.message()));
        }
      }
    }
    if (absl::Status s = MountServiceAccount(spec); !s.ok()) return s;
    if (!InContainers()) return absl::OkStatus();
    const KubeletOptions& o = kubelet_->options_;
    sandbox_ = absl::StrCat(o.podman_network, "_", ns_, "_", name_, "_",
                            pod_["metadata"].value("uid", "").substr(0, 8));
    WriteHostsFile();
    return CreatePodSandbox(PodSandboxSpec{
        .name = sandbox_,
        .network = o.podman_network,
        .address = address_,
        .hostname = Hostname(),
        .labels = {{kClusterLabel, o.podman_network}, {kNodeLabel, NodeLabelValue(o)},
                   {"io.kubernetes.pod.namespace", ns_}, {"io.kubernetes.pod.name", name_}}});
  }

  // kPodman: the podman pod goes once every container has stopped, before the pod's final status
  // says so.
  void RemoveSandbox() {
    if (!sandbox_.empty()) RemovePodSandbox(std::exchange(sandbox_, ""));
  }

  // spec.hostname, else the pod's name cut to 63 characters, as Kubernetes does.
  std::string Hostname() const { return pod_["spec"].value("hostname", name_.substr(0, 63)); }

  // kPodman: the pod's /etc/hosts, as a kubelet writes it: localhost, the pod's own names, then
  // the cluster's hosts file (standing in for cluster DNS). Rewritten in place (the containers
  // bind-mount this very file) whenever the text changes: the new text over the old, then cut to
  // its length, so that a reader meanwhile never sees an empty file. The cluster's file is read
  // only when it was replaced (the scheduler renames a new file over it: a new inode), not on
  // every call of the pod's 50 ms loop.
  void WriteHostsFile() {
    struct stat cluster_file {};
    const std::string cluster = (fs::path(kubelet_->options_.root_dir) / "hosts").string();
    const bool exists = stat(cluster.c_str(), &cluster_file) == 0;
    const std::tuple<ino_t, off_t, int64_t> version = {
        exists ? cluster_file.st_ino : 0, exists ? cluster_file.st_size : -1,
        exists ? int64_t{cluster_file.st_mtim.tv_sec} * 1000000000 + cluster_file.st_mtim.tv_nsec : 0};
    if (!hosts_path_.empty() && version == hosts_version_) return;
    std::string own = Hostname();
    const std::string subdomain = pod_["spec"].value("subdomain", "");
    if (!subdomain.empty()) own = absl::StrCat(own, ".", subdomain, ".", ns_, ".svc.cluster.local ", own);
    std::string text = absl::StrCat("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
                                    address_, "\t", own, "\n");
    std::ifstream in(cluster);
    std::stringstream names;
    names << in.rdbuf();
    text += names.str();
    hosts_path_ = (fs::path(dir_) / "etc-hosts").string();
    if (text != hosts_text_) {
      const int fd = open(hosts_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) return;  // Tried again on the next call.
      const bool written = pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()) &&
                           ftruncate(fd, static_cast<off_t>(text.size())) == 0;
      close(fd);
      if (!written) return;
      hosts_text_ = text;
    }
    hosts_version_ = version;
  }

  // One source of a volume of API data (a secret, configMap or downwardAPI volume, or a source of
  // a projected one: those and serviceAccountToken), written into `dir`: every key, or the
  // `items` named, at their paths.
  absl::Status WriteVolumeSource(const json& source, const std::string& dir) {
    auto write = [&](const std::string& path, const std::string& content) -> absl::Status {
      const fs::path file = fs::path(dir) / path;
      bool up = false;
      for (const fs::path& part : fs::path(path)) up |= part == "..";
      if (path.empty() || up || path[0] == '/') {
        return absl::InvalidArgumentError(absl::StrCat("path \"", path, "\" must be relative, without \"..\" elements"));
      }
      fs::create_directories(file.parent_path());
      std::ofstream(file, std::ios::binary) << content;
      return absl::OkStatus();
    };
    if (source.contains("serviceAccountToken")) {
      absl::StatusOr<std::string> token = IssueToken(ServiceAccount());
      if (!token.ok()) return token.status();
      return write(kube::Member(source, "serviceAccountToken").value("path", "token"), *token);
    }
    if (source.contains("downwardAPI")) {
      for (const json& item : kube::Member(source, "downwardAPI").value("items", json::array())) {
        const std::string field = kube::StringMember(kube::Member(item, "fieldRef"), "fieldPath");
        const json& meta = kube::Member(pod_, "metadata");
        std::string value;
        if (field == "metadata.name") value = name_;
        else if (field == "metadata.namespace") value = ns_;
        else if (field == "metadata.uid") value = meta.value("uid", "");
        else if (field == "metadata.labels" || field == "metadata.annotations") {
          // key="value" lines, sorted by key (json objects are).
          const json map = meta.value(field.substr(9), json::object());
          for (const auto& [key, v] : map.items()) absl::StrAppend(&value, key, "=", json(v).dump(), "\n");
        } else {
          return absl::InvalidArgumentError(absl::StrCat(
              "downwardAPI item \"", item.value("path", ""), "\": only fieldRef of metadata.name, namespace, uid, ",
              "labels and annotations is supported here", field.empty() ? "" : absl::StrCat(" (not ", field, ")")));
        }
        if (absl::Status s = write(item.value("path", ""), value); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    const bool secret = source.contains("secret");
    if (!secret && !source.contains("configMap")) {
      return absl::InvalidArgumentError(
          "only secret, configMap, downwardAPI and serviceAccountToken sources are supported here");
    }
    const json& ref = kube::Member(source, secret ? "secret" : "configMap");
    // A secret volume names it secretName; a projected source, name.
    const std::string object_name = ref.value("secretName", ref.value("name", ""));
    absl::StatusOr<json> object = ref.value("optional", false) ? client_->Get(secret ? kube::kSecrets : kube::kConfigMaps,
                                                                             ns_, object_name)
                                                               : WaitFor(secret ? kube::kSecrets : kube::kConfigMaps,
                                                                         object_name);
    if (!object.ok()) return absl::IsNotFound(object.status()) && ref.value("optional", false) ? absl::OkStatus()
                                                                                              : object.status();
    const json data = object->value("data", json::object());  // items() must not outlive it.
    auto content = [&](const std::string& key) {
      std::string text = data.value(key, "");
      if (secret) absl::Base64Unescape(data.value(key, ""), &text);
      return text;
    };
    if (ref.contains("items")) {
      for (const json& item : ref["items"]) {
        const std::string key = item.value("key", "");
        if (!data.contains(key)) {
          return absl::NotFoundError(absl::StrCat(secret ? "secret " : "config map ", object_name, " has no key \"",
                                                  key, "\""));
        }
        if (absl::Status s = write(item.value("path", key), content(key)); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    for (const auto& [key, value] : data.items()) {
      if (absl::Status s = write(key, content(key)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  std::string ServiceAccount() const {
    const json& spec = kube::Member(pod_, "spec");
    std::string account = spec.value("serviceAccountName", spec.value("serviceAccount", ""));
    return account.empty() ? "default" : account;
  }

  // A token for the pod's service account, from the API server (TokenRequest).
  absl::StatusOr<std::string> IssueToken(const std::string& account) {
    const kube::Resource token_request{"", "v1", absl::StrCat("serviceaccounts/", account, "/token")};
    absl::StatusOr<json> issued = client_->Create(
        token_request, ns_, {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", json::object()}});
    if (!issued.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("no token for service account ", ns_, "/", account, ": ",
                                                        issued.status().message()));
    }
    return kube::StringMember(kube::Member(*issued, "status"), "token");
  }

  // The pod's service account, as the kubelet projects it (kubelet.h).
  absl::Status MountServiceAccount(const json& spec) {
    if (!spec.value("automountServiceAccountToken", true)) return absl::OkStatus();
    absl::StatusOr<std::string> token = IssueToken(ServiceAccount());
    if (!token.ok()) return token.status();
    const fs::path dir = fs::path(dir_) / "serviceaccount";
    fs::create_directories(dir);
    std::ofstream(dir / "token") << *token;
    std::ofstream(dir / "ca.crt") << kubelet_->options_.api_ca_pem;
    std::ofstream(dir / "namespace") << ns_;
    service_account_dir_ = dir.string();
    return absl::OkStatus();
  }

  absl::StatusOr<json> WaitFor(const kube::Resource& kind, const std::string& name) {
    absl::Time deadline = absl::Now() + absl::Minutes(2);
    while (true) {
      absl::StatusOr<json> object = client_->Get(kind, ns_, name);
      if (object.ok() || !absl::IsNotFound(object.status())) return object;
      if (Terminating() || absl::Now() > deadline) {
        return absl::NotFoundError(absl::StrCat("volume source ", kind.plural, "/", name, " does not exist"));
      }
      pod_reason_ = "ContainerCreating";
      Pause(absl::Milliseconds(200));
    }
  }

  std::map<std::string, std::string> Environment(const json& c) {
    const KubeletOptions& o = kubelet_->options_;
    std::map<std::string, std::string> env;
    if (!InContainers()) {  // A container's image and podman give it these.
      const char* host_path = getenv("PATH");
      env["PATH"] = absl::StrCat(absl::StrJoin(o.bin_dirs, ":"), o.bin_dirs.empty() ? "" : ":",
                                 host_path ? host_path : "/usr/bin:/bin");
      env["HOME"] = dir_;
      env["HOSTNAME"] = Hostname();
    }
    for (const json& e : c.value("env", json::array())) {
      std::string name = e.value("name", "");
      if (e.contains("value")) {
        env[name] = Expand(e["value"].get<std::string>(), env);
      } else if (e.contains("valueFrom")) {
        const json& from = e["valueFrom"];
        if (from.contains("fieldRef")) {
          std::string field = from["fieldRef"].value("fieldPath", "");
          if (field == "status.podIP") env[name] = address_;
          if (field == "status.hostIP") env[name] = kubelet_->options_.node_address;
          if (field == "metadata.name") env[name] = name_;
          if (field == "metadata.namespace") env[name] = ns_;
          if (field == "spec.nodeName") env[name] = kubelet_->options_.node_name;
          if (field == "metadata.uid") env[name] = pod_["metadata"].value("uid", "");
        } else if (from.contains("secretKeyRef") || from.contains("configMapKeyRef")) {
          bool secret = from.contains("secretKeyRef");
          const json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
          absl::StatusOr<json> source = client_->Get(secret ? kube::kSecrets : kube::kConfigMaps, ns_, ref.value("name", ""));
          if (source.ok()) {
            std::string value = (*source)["data"].value(ref.value("key", ""), "");
            if (secret) absl::Base64Unescape(std::string(value), &value);
            env[name] = value;
          }
        }
      }
    }
    if (!InContainers()) {
      for (auto& [name, value] : env) value = Remap(c, value);
    }
    if (!service_account_dir_.empty()) {
      // Where the service account's mount path lies, for the pod-network library (kubelet.h).
      // Volumes are not listed: their paths are rewritten in the arguments and environment, and
      // a program creating files under them must see one file system, which only open() cannot
      // give. Containers have the real mount.
      if (!InContainers()) env[kMountsVariable] = absl::StrCat(kServiceAccountMountPath, "=", service_account_dir_);
      // In-cluster config: the API server's address, as a Service named kubernetes would give it.
      const std::string& server = o.api_server;
      const size_t host_at = server.find("://") == std::string::npos ? 0 : server.find("://") + 3;
      const size_t port_at = server.rfind(':');
      if (port_at != std::string::npos && port_at > host_at) {
        env["KUBERNETES_SERVICE_HOST"] = server.substr(host_at, port_at - host_at);
        env["KUBERNETES_SERVICE_PORT"] = server.substr(port_at + 1);
      }
    }
    if (InContainers()) return env;
    env[kPodIpVariable] = address_;
    env[kHostsFileVariable] = (fs::path(o.root_dir) / "hosts").string();
    env["GRPC_DNS_RESOLVER"] = "native";  // getaddrinfo, which the pod-network library answers.
    if (!o.pod_network_library.empty()) env["LD_PRELOAD"] = o.pod_network_library;
    return env;
  }

  // A path under one of the container's mount paths, moved under the pod's directory.
  std::string Remap(const json& c, const std::string& value) {
    for (const json& m : c.value("volumeMounts", json::array())) {
      std::string mount = m.value("mountPath", "");
      auto volume = volumes_.find(m.value("name", ""));
      if (mount.empty() || volume == volumes_.end()) continue;
      for (size_t at = 0; (at = value.find(mount, at)) != std::string::npos; ++at) {
        bool starts = at == 0 || value[at - 1] == '=' || value[at - 1] == ':';
        size_t end = at + mount.size();
        bool ends = end == value.size() || value[end] == '/' || value[end] == ':';
        if (starts && ends) return value.substr(0, at) + volume->second + Remap(c, value.substr(end));
      }
    }
    return value;
  }

  void StartContainer(Container& c) {
    c.started = absl::Now();
    c.restart_at.reset();
    c.exit_code.reset();
    c.finished.reset();
    c.ready = false;
    c.next_probe = absl::Now();
    c.container_pid = 0;
    c.next_kill = absl::InfinitePast();
    absl::Status started = InContainers() ? StartPodmanContainer(c) : StartProcess(c);
    if (started.ok()) return;
    c.start_error = std::string(started.message());
    c.start_failed = true;
    c.exit_code = 128;
    // Kubernetes' reasons: the image is missing and never pulled; the spec cannot be honoured.
    c.reason = absl::IsNotFound(started) && InContainers() ? "ErrImageNeverPull"
               : absl::IsFailedPrecondition(started)    ? "CreateContainerConfigError"
                                                        : "StartError";
    c.message = c.start_error;
    c.finished = absl::Now();
    std::ofstream(c.log_path, std::ios::app) << "local kubelet: " << c.start_error << "\n";
  }

  absl::Status StartProcess(Container& c) {
    std::map<std::string, std::string> env = Environment(c.spec);
    std::vector<std::string> argv;
    for (const json& a : c.spec.value("command", json::array())) argv.push_back(Remap(c.spec, Expand(a, env)));
    if (argv.empty()) argv.push_back(ProgramOfImage(c.spec.value("image", "")));
    for (const json& a : c.spec.value("args", json::array())) argv.push_back(Remap(c.spec, Expand(a, env)));
    std::optional<std::string> program = FindProgram(argv[0], env["PATH"]);
    if (!program) {
      return absl::NotFoundError(
          absl::StrCat("executable '", argv[0], "' not found in the container's PATH (", env["PATH"], ")"));
    }
    argv[0] = *program;
    Subprocess::Options options;
    options.argv = argv;
    options.env_set = env;
    options.inherit_env = false;
    options.output_path = c.log_path;
    options.working_dir = dir_;
    options.die_with_parent = true;  // A killed kubelet is a lost machine: its pods go with it.
    absl::StatusOr<Subprocess> p = Subprocess::Start(options);
    if (!p.ok()) return p.status();
    c.process = std::move(*p);
    return absl::OkStatus();
  }

  // The container's security context over the pod's (container fields win), as podman options.
  // FailedPrecondition where Kubernetes refuses to start it (runAsNonRoot and a root user).
  absl::Status ApplySecurityContext(const Container& c, ContainerSpec& spec) {
    json context = pod_["spec"].value("securityContext", json::object());
    const json own = c.spec.value("securityContext", json::object());  // items() must not outlive it.
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
        return absl::FailedPreconditionError(absl::StrCat(
            "container has runAsNonRoot and image has non-numeric user (", user,
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
    for (const json& cap : capabilities.value("drop", json::array())) spec.cap_drop.push_back(cap.get<std::string>());
    for (const json& cap : capabilities.value("add", json::array())) spec.cap_add.push_back(cap.get<std::string>());
    return absl::OkStatus();
  }

  absl::Status StartPodmanContainer(Container& c) {
    std::map<std::string, std::string> env = Environment(c.spec);
    ContainerSpec spec;
    spec.name = absl::StrCat(sandbox_, "_", c.spec.value("name", ""));
    spec.pod = sandbox_;
    spec.image = c.spec.value("image", "");
    for (const json& a : c.spec.value("command", json::array())) spec.command.push_back(Expand(a, env));
    for (const json& a : c.spec.value("args", json::array())) spec.args.push_back(Expand(a, env));
    spec.env = env;
    spec.working_dir = c.spec.value("workingDir", "");
    spec.labels = {{kClusterLabel, kubelet_->options_.podman_network},
                   {"io.kubernetes.pod.namespace", ns_},
                   {"io.kubernetes.pod.name", name_},
                   {"io.kubernetes.container.name", c.spec.value("name", "")}};
    for (const json& m : c.spec.value("volumeMounts", json::array())) {
      auto volume = volumes_.find(m.value("name", ""));
      if (volume == volumes_.end()) {
        return absl::FailedPreconditionError(absl::StrCat("volumeMount \"", m.value("name", ""),
                                                          "\" names no volume of the pod"));
      }
      std::string source = volume->second;
      if (!m.value("subPath", "").empty()) source = (fs::path(source) / m.value("subPath", "")).string();
      spec.mounts.push_back({.source = source,
                             .target = m.value("mountPath", ""),
                             .read_only = m.value("readOnly", false) || read_only_volumes_.contains(volume->first)});
    }
    const bool own_mount = std::any_of(spec.mounts.begin(), spec.mounts.end(),
                                       [](const ContainerMount& m) { return m.target == kServiceAccountMountPath; });
    if (!service_account_dir_.empty() && !own_mount) {  // A volume mounted there takes its place.
      spec.mounts.push_back({.source = service_account_dir_, .target = kServiceAccountMountPath, .read_only = true});
    }
    spec.mounts.push_back({.source = hosts_path_, .target = "/etc/hosts", .read_only = true});
    if (absl::Status s = ApplySecurityContext(c, spec); !s.ok()) return s;
    absl::StatusOr<std::string> id = CreateContainer(spec);
    if (!id.ok()) return id.status();
    c.container_name = spec.name;
    c.container_id = *id;
    Subprocess::Options options;
    options.argv = StartAttachedCommand(spec.name);
    options.output_path = c.log_path;
    // The attached client dies with a killed kubelet; the node's PodReaper removes the container.
    options.die_with_parent = true;
    absl::StatusOr<Subprocess> p = Subprocess::Start(options);
    if (!p.ok()) return p.status();
    c.process = std::move(*p);
    return absl::OkStatus();
  }

  // Records an exit; true if the container has just terminated.
  bool Reap(Container& c) {
    if (!c.process.running()) return false;
    std::optional<int> status = c.process.Poll();
    if (!status) return false;
    c.exit_code = Subprocess::ExitCodeOf(*status);
    if (InContainers()) {  // The container's own account; the attached client's code is the same but for kills.
      absl::StatusOr<ContainerState> state = InspectContainer(c.container_name);
      if (state.ok() && state->status != "running") {
        c.exit_code = state->exit_code;
        c.oom_killed |= state->oom_killed;
      }
    }
    c.finished = absl::Now();
    c.ready = false;
    c.reason = c.oom_killed ? "OOMKilled" : *c.exit_code == 0 ? "Completed" : "Error";
    c.message = *c.exit_code == 0 || c.oom_killed ? "" : Tail(c.log_path, 2048);
    c.oom_killed = false;
    return true;
  }

  // resources.limits.memory, as the kernel's cgroup OOM killer applies it with memory.oom.group
  // (Kubernetes' default on cgroup v2): a container whose processes' resident memory together
  // (its first process and every descendant: a launcher's children count) is over its limit is
  // killed whole, and reported OOMKilled. Checked every
  // 50 ms, so a fast allocator can overshoot a little. Containers too: some kernels (gVisor's)
  // kill a container over its cgroup limit without podman learning that it was an OOM kill.
  // The resident memory of `root` and every process descended from it.
  static int64_t TreeResidentBytes(pid_t root) {
    std::map<pid_t, std::vector<pid_t>> children;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // "pid (comm) state ppid ...": comm may hold spaces and parentheses; ppid follows the last ')'.
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 1));
      std::string state;
      pid_t ppid = 0;
      if (rest >> state >> ppid) children[ppid].push_back(pid);
    }
    int64_t pages = 0;
    std::vector<pid_t> todo = {root};
    while (!todo.empty()) {
      const pid_t pid = todo.back();
      todo.pop_back();
      std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
      int64_t size = 0, resident = 0;
      if (statm >> size >> resident) pages += resident;
      for (pid_t child : children[pid]) todo.push_back(child);
    }
    return pages * sysconf(_SC_PAGESIZE);
  }

  void EnforceMemoryLimit(Container& c) {
    if (c.memory_limit <= 0 || !c.process.running() || c.oom_killed) return;
    pid_t pid = c.process.pid();
    if (InContainers()) {
      if (c.container_pid == 0) {
        absl::StatusOr<ContainerState> state = InspectContainer(c.container_name);
        if (state.ok() && state->status == "running") c.container_pid = state->pid;
      }
      if (c.container_pid == 0) return;
      pid = c.container_pid;
    }
    const int64_t bytes = TreeResidentBytes(pid);
    if (bytes <= c.memory_limit) return;
    c.oom_killed = true;
    SignalContainer(c, SIGKILL);
    std::ofstream(c.log_path, std::ios::app) << "local kubelet: OOMKilled: resident memory " << bytes
                                             << " bytes is over the container's limit of " << c.memory_limit
                                             << " bytes\n";
  }

  void Probe(Container& c) {
    if (!c.process.running() || absl::Now() < c.next_probe) return;
    const json probe = c.spec.value("readinessProbe", json());
    if (!probe.is_object() || !probe.contains("httpGet")) {
      c.ready = true;
      return;
    }
    const json& get = probe["httpGet"];
    int port = 0;
    if (get["port"].is_number()) {
      port = get["port"].get<int>();
    } else {
      for (const json& p : c.spec.value("ports", json::array())) {
        if (p.value("name", "") == get["port"]) port = p.value("containerPort", 0);
      }
    }
    httplib::Client http(address_, port);
    http.set_connection_timeout(std::chrono::seconds(1));
    http.set_read_timeout(std::chrono::seconds(1));
    httplib::Result r = http.Get(get.value("path", "/"));
    c.ready = r && r->status >= 200 && r->status < 400;
    int period = std::clamp(probe.value("periodSeconds", 10), 1, 10);
    c.next_probe = absl::Now() + absl::Seconds(c.ready ? period : 0) + absl::Milliseconds(200);
  }

  void Execute() {
    const json spec = pod_.value("spec", json::object());
    for (const json& c : spec.value("initContainers", json::array())) {
      Container k;
      k.spec = c;
      k.init = true;
      k.sidecar = c.value("restartPolicy", "") == "Always";
      containers_.push_back(std::move(k));
    }
    for (const json& c : spec.value("containers", json::array())) {
      Container k;
      k.spec = c;
      containers_.push_back(std::move(k));
    }
    for (Container& c : containers_) {
      c.log_path = LogPath(kubelet_->options_.root_dir, ns_, name_, c.spec.value("name", ""));
      const json& memory = kube::Member(c.spec, "resources", "limits", "memory");
      if (memory.is_number_integer()) c.memory_limit = memory.get<int64_t>();
      if (!memory.is_string()) continue;
      const std::string limit = memory.get<std::string>();
      if (std::optional<int64_t> bytes = kube::ParseQuantity(limit)) {
        c.memory_limit = *bytes;
      } else {
        std::ofstream(c.log_path, std::ios::app)
            << "local kubelet: resources.limits.memory \"" << limit << "\" is not a quantity: not enforced\n";
      }
    }

    // Init containers in order: sidecars start and keep running; others must succeed.
    for (Container& c : containers_) {
      if (!c.init) continue;
      if (Terminating()) break;
      StartContainer(c);
      if (c.sidecar) continue;
      while (c.process.running() && !Terminating()) {
        EnforceMemoryLimit(c);
        Reap(c);
        if (InContainers()) WriteHostsFile();
        Pause(absl::Milliseconds(50));
      }
      Reap(c);
      if (c.exit_code.value_or(1) != 0) {
        phase_ = "Failed";
        pod_reason_ = "Init:Error";
        StopAll(absl::ZeroDuration());
        RemoveSandbox();
        WriteStatus();
        return;
      }
    }
    initialized_ = true;
    if (!Terminating()) {
      for (Container& c : containers_) {
        if (!c.init) StartContainer(c);
      }
      phase_ = "Running";
    }
    WriteStatus();

    // Kubernetes' default, Always: a main container that exits starts again, at once the first
    // time, then after 10 s, 20 s, 40 s ... up to 5 minutes (CrashLoopBackOff while it waits).
    const std::string restart_policy = spec.value("restartPolicy", "Always");
    while (true) {
      bool changed = false;
      bool main_running = false;
      for (Container& c : containers_) {
        EnforceMemoryLimit(c);
        if (Reap(c) || std::exchange(c.start_failed, false)) {
          changed = true;
          if (!c.init && !Terminating() &&
              (restart_policy == "Always" || (restart_policy == "OnFailure" && c.exit_code != 0))) {
            // As Kubernetes does, a container that ran 10 minutes starts its back-off over.
            if (c.started && c.finished && *c.finished - *c.started > absl::Minutes(10)) c.crash_streak = 0;
            // The kubelet's crash-loop back-off: 10 s doubling to 5 min.
            const absl::Duration back_off = c.crash_streak == 0
                                                ? absl::ZeroDuration()
                                                : DoublingDelay(absl::Seconds(10), absl::Minutes(5), c.crash_streak);
            ++c.crash_streak;
            c.restart_at = absl::Now() + back_off;
          }
        }
        if (!c.init && (c.process.running() || c.restart_at)) main_running = true;
      }
      bool terminating;
      absl::Time deadline;
      {
        absl::MutexLock lock(&mu_);
        terminating = terminate_;
        deadline = kill_deadline_;
      }
      if (!main_running || terminating) break;
      for (Container& c : containers_) {
        if (c.restart_at && absl::Now() >= *c.restart_at) {
          ++c.restarts;
          StartContainer(c);
          changed = true;
        }
        // A native sidecar that exits while the pod runs is restarted.
        if (c.sidecar && !c.process.running() && c.finished && absl::Now() - *c.finished > absl::Seconds(1)) {
          ++c.restarts;
          StartContainer(c);
          changed = true;
        }
        bool was_ready = c.ready;
        Probe(c);
        changed |= was_ready != c.ready;
      }
      if (changed) WriteStatus();
      if (InContainers()) WriteHostsFile();  // When the cluster's names changed.
      Pause(absl::Milliseconds(50));
    }
    absl::Duration grace = absl::Seconds(spec.value("terminationGracePeriodSeconds", 30));
    {
      absl::MutexLock lock(&mu_);
      if (terminate_) grace = std::max(absl::ZeroDuration(), kill_deadline_ - absl::Now());
    }
    StopAll(grace);
    bool all_zero = true;
    for (const Container& c : containers_) {
      if (!c.init) all_zero &= c.exit_code.value_or(1) == 0;
    }
    phase_ = all_zero ? "Succeeded" : "Failed";
    RemoveSandbox();
    WriteStatus();
  }

  // SIGTERM to the containers, then the sidecars once the containers are gone (the order of
  // native sidecars), SIGKILL to whatever is left at the deadline.
  void StopAll(absl::Duration grace) {
    absl::Time deadline = absl::Now() + grace;
    for (bool sidecars : {false, true}) {
      for (Container& c : containers_) {
        if (c.sidecar == sidecars && c.process.running()) SignalContainer(c, SIGTERM);
      }
      while (true) {
        bool running = false;
        for (Container& c : containers_) {
          Reap(c);
          running |= c.sidecar == sidecars && c.process.running();
        }
        if (!running) break;
        {
          absl::MutexLock lock(&mu_);
          if (terminate_) deadline = std::min(deadline, kill_deadline_);
        }
        if (absl::Now() >= deadline) {
          for (Container& c : containers_) SignalContainer(c, SIGKILL);
        }
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
  }

  json ContainerStatus(const Container& c) {
    json state;
    if (c.exit_code && c.restart_at) {
      state["waiting"] = {{"reason", "CrashLoopBackOff"},
                          {"message", absl::StrCat("back-off restarting the failed container (exit code ",
                                                   *c.exit_code, ")")}};
    } else if (c.exit_code) {
      state["terminated"] = {{"exitCode", *c.exit_code}, {"reason", c.reason},
                             {"startedAt", FormatRfc3339(c.started.value_or(absl::Now()))},
                             {"finishedAt", FormatRfc3339(c.finished.value_or(absl::Now()))}};
      if (!c.message.empty()) state["terminated"]["message"] = c.message;
    } else if (c.started) {
      state["running"] = {{"startedAt", FormatRfc3339(*c.started)}};
    } else {
      state["waiting"] = {{"reason", pod_reason_.empty() ? "PodInitializing" : pod_reason_}};
    }
    return {{"name", c.spec.value("name", "")}, {"image", c.spec.value("image", "")},
            {"imageID", ""},
            {"containerID", !c.container_id.empty()  ? absl::StrCat("podman://", c.container_id)
                            : c.process.pid() > 0 ? absl::StrCat("local://", c.process.pid())
                                                  : ""},
            {"ready", c.ready}, {"started", c.started.has_value() && !c.exit_code},
            {"restartCount", c.restarts}, {"state", state}};
  }

  void WriteStatus() {
    json init_statuses = json::array(), statuses = json::array();
    bool all_ready = !containers_.empty();
    for (const Container& c : containers_) {
      (c.init ? init_statuses : statuses).push_back(ContainerStatus(c));
      if (!c.init || c.sidecar) all_ready &= c.ready;
    }
    if (containers_.empty()) all_ready = false;
    const bool running = phase_ == "Running";
    const std::pair<const char*, bool> ours[] = {{"PodScheduled", true},
                                                 {"Initialized", initialized_},
                                                 {"ContainersReady", running && all_ready},
                                                 {"Ready", running && all_ready}};
    // Re-read, keep the conditions others own (DisruptionTarget), write with the version read
    // (again when someone else wrote the pod meanwhile: an eviction).
    kube::UpdateStatusWith(client_, kube::kPods, ns_, name_, [&](json& current) {
      // A gang restart reuses pod names: once this worker's pod is gone, the name may already
      // belong to its successor, whose status is not this worker's to write.
      if (!IsOurs(current)) return false;
      json status = current.value("status", json::object());
      const absl::Time now = absl::Now();
      for (const auto& [type, value] : ours) {
        kube::SetCondition(status["conditions"], kube::Condition(type, kube::TrueOrFalse(value), "", ""), now);
      }
      status["phase"] = phase_;
      status["podIP"] = address_;
      status["podIPs"] = json::array({{{"ip", address_}}});
      status["hostIP"] = kubelet_->options_.node_address;
      status["startTime"] = FormatRfc3339(start_time_);
      status["initContainerStatuses"] = init_statuses;
      status["containerStatuses"] = statuses;
      if (!pod_reason_.empty() && phase_ == "Failed") {
        status["reason"] = pod_reason_;
        status["message"] = pod_message_;
      }
      if (current.contains("status") && current["status"] == status) return false;
      current["status"] = status;
      return true;
    }).IgnoreError();  // The pod is gone, or the API server unreachable: the next write says it.
  }

  bool IsOurs(const json& pod) const {
    return pod["metadata"].value("uid", "") == pod_["metadata"].value("uid", "");
  }
  // Removes this worker's pod object, and never a successor that took its name. OK when it is
  // gone (or is a successor); the API's error otherwise.
  absl::Status DeleteOurPod() {
    absl::StatusOr<json> current = client_->Get(kube::kPods, ns_, name_);
    if (absl::IsNotFound(current.status())) return absl::OkStatus();
    if (!current.ok()) return current.status();
    if (!IsOurs(*current)) return absl::OkStatus();
    absl::Status deleted = client_->Delete(kube::kPods, ns_, name_, 0);
    return absl::IsNotFound(deleted) ? absl::OkStatus() : deleted;
  }
  // The final delete of a pod whose containers all stopped: only this kubelet confirms it, and no
  // later event of the pod would ask again, so an API error (an API server busy with many
  // teardowns at once) must not leave the pod terminating for good. Tries with backoff for up to
  // kFinalDeleteFor, or until the worker is destroyed.
  void DeleteOurPodRetrying() {
    static constexpr absl::Duration kFinalDeleteFor = absl::Minutes(5);
    const absl::Time give_up = absl::Now() + kFinalDeleteFor;
    for (int attempt = 1;; ++attempt) {
      const absl::Duration wait = DoublingDelay(absl::Milliseconds(100), absl::Seconds(5), attempt);
      absl::Status s = DeleteOurPod();
      if (s.ok()) return;
      if (absl::Now() + wait > give_up) {
        LogWarning("pod ", ns_, "/", name_, ": gave up confirming its deletion after ", attempt,
                   " attempts: ", s.message());
        return;
      }
      LogWarning("pod ", ns_, "/", name_, ": confirming its deletion failed (attempt ", attempt,
                 "; trying again in ", absl::FormatDuration(wait), "): ", s.message());
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_retrying_), wait)) return;
      }
    }
  }

  Kubelet* const kubelet_;
  kube::KubeClient* const client_;
  const json pod_;
  const std::string address_;
  const std::string ns_;
  const std::string name_;
  std::string dir_;
  std::map<std::string, std::string> volumes_;  // Volume name -> directory.
  std::string service_account_dir_;             // Empty: no service account mounted.
  std::set<std::string> read_only_volumes_;     // Secrets and config maps.
  // kPodman: the podman pod, and the pod's hosts file.
  std::string sandbox_;
  std::string hosts_path_;
  std::string hosts_text_;  // What it holds.
  std::tuple<ino_t, off_t, int64_t> hosts_version_;  // The cluster file it copied: inode, size, mtime.
  std::vector<Container> containers_;
  std::string phase_ = "Pending";
  std::string pod_reason_;
  std::string pod_message_;
  bool initialized_ = false;
  absl::Time start_time_;

  absl::Mutex mu_;
  bool terminate_ ABSL_GUARDED_BY(mu_) = false;
  bool remove_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time kill_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool deleting_ ABSL_GUARDED_BY(mu_) = false;       // The final delete is being confirmed.
  bool stop_retrying_ ABSL_GUARDED_BY(mu_) = false;  // Set by the destructor.
  std::thread thread_;
  std::thread deleter_;  // Confirms the final delete when Update() found the worker done.
};

Kubelet::Kubelet(kube::KubeClient* client, KubeletOptions options)
    : client_(client), options_(std::move(options)) {}

Kubelet::~Kubelet() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_heartbeat_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (informer_) informer_->Stop();
  std::map<std::string, std::unique_ptr<PodWorker>> workers;
  {
    absl::MutexLock lock(&mu_);
    workers.swap(workers_);
  }
  workers.clear();  // Each worker kills its processes.
}

std::string Kubelet::PodDir(const std::string& root_dir, const std::string& ns, const std::string& pod) {
  return (fs::path(root_dir) / absl::StrCat(ns, "_", pod)).string();
}

std::string Kubelet::LogPath(const std::string& root_dir, const std::string& ns, const std::string& pod,
                             const std::string& container) {
  return (fs::path(PodDir(root_dir, ns, pod)) / absl::StrCat(container, ".log")).string();
}

absl::Status Kubelet::Start() {
  fs::create_directories(options_.root_dir);
  if (options_.runtime == ContainerRuntime::kPodman) {
    if (absl::Status s = CheckPodman(); !s.ok()) return s;
    if (options_.podman_network.empty()) return absl::InvalidArgumentError("the podman runtime needs a podman network");
    // Pods a killed kubelet of this node left behind (its PodReaper was killed too).
    RemovePodSandboxes(kNodeLabel, NodeLabelValue(options_));
    absl::StatusOr<PodReaper> reaper = PodReaper::Start(kNodeLabel, NodeLabelValue(options_));
    if (!reaper.ok()) return reaper.status();
    reaper_ = *std::move(reaper);
  }
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", options_.node_name}, {"labels", {{"kubernetes.io/hostname", options_.node_name}}}}},
               {"status",
                {{"conditions", json::array()},
                 {"addresses", {{{"type", "InternalIP"}, {"address", options_.node_address}},
                                {{"type", "Hostname"}, {"address", options_.node_name}}}}}}};
  kube::SetCondition(node["status"]["conditions"], KubeletReady(), absl::Now());
  if (options_.max_pods > 0) {
    node["status"]["capacity"] = {{"pods", absl::StrCat(options_.max_pods)}};
    node["status"]["allocatable"] = {{"pods", absl::StrCat(options_.max_pods)}};
  }
  absl::StatusOr<json> created = client_->Create(kube::kNodes, "", node);
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  Heartbeat();  // The Lease exists before the node counts as Ready anywhere.
  if (absl::IsAlreadyExists(created.status())) {
    LogInfo("node ", options_.node_name, " existed: reporting it Ready");
  }
  heartbeat_ = std::thread([this] {
    while (!stop_heartbeat_.WaitForNotificationWithTimeout(options_.lease_duration / 4)) Heartbeat();
  });
  informer_ = std::make_unique<kube::Informer>(
      client_, kube::kPods, "", "", [this](const std::string& type, const json& pod) { OnPod(type, pod); });
  informer_->Start();
  return absl::OkStatus();
}

void Kubelet::Heartbeat() {
  const std::string& node = options_.node_name;
  json renew = {{"spec", {{"renewTime", FormatRfc3339Micro(absl::Now())}}}};
  absl::StatusOr<json> lease = client_->MergePatch(kube::kLeases, kNodeLeaseNamespace, node, renew);
  if (absl::IsNotFound(lease.status())) {
    json create = {{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata", {{"name", node}, {"namespace", kNodeLeaseNamespace}}},
                   {"spec",
                    {{"holderIdentity", node},
                     {"leaseDurationSeconds", std::max<int64_t>(1, absl::ToInt64Seconds(options_.lease_duration))},
                     {"renewTime", renew["spec"]["renewTime"]}}}};
    lease = client_->Create(kube::kLeases, kNodeLeaseNamespace, create);
  }
  if (!lease.ok()) LogWarning("node ", node, ": cannot renew its lease: ", lease.status().ToString());
  // Marked lost while this kubelet was stopped or starved: report Ready again.
  absl::StatusOr<json> current = client_->Get(kube::kNodes, "", node);
  if (!current.ok() || kube::ConditionStatus(*current, "Ready") == "True") return;
  json write = *current;
  kube::SetCondition(write["status"]["conditions"], KubeletReady(), absl::Now());
  absl::StatusOr<json> written = client_->UpdateStatus(kube::kNodes, "", write);
  if (written.ok()) LogInfo("node ", node, ": Ready again");
}

void Kubelet::OnPod(const std::string& type, const json& pod) {
  std::string uid = pod["metadata"].value("uid", "");
  std::string key = absl::StrCat(PodKey(pod), "#", uid);
  std::unique_ptr<PodWorker> finished;
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  if (type == "DELETED") {
    for (auto w = workers_.begin(); w != workers_.end(); ++w) {
      // A DELETED from a relist carries only the name.
      if (w->first == key || (uid.empty() && absl::StartsWith(w->first, key))) {
        w->second->Deleted();
        finished = std::move(w->second);
        workers_.erase(w);
        break;
      }
    }
    mu_.Unlock();
    finished.reset();  // Joins the worker outside the lock.
    mu_.Lock();
    return;
  }
  auto existing = workers_.find(key);
  if (existing != workers_.end()) {
    existing->second->Update(pod);
    return;
  }
  if (pod.value("spec", json::object()).value("nodeName", "") != options_.node_name) return;
  if (pod.value("status", json::object()).value("phase", "") == "Succeeded" ||
      pod.value("status", json::object()).value("phase", "") == "Failed") {
    return;  // Finished before this kubelet started.
  }
  // The scheduler binds a pod and gives it its address in one write; a pod bound by its author
  // gets its address in a later one.
  std::string address =
      pod["metadata"].value("annotations", json::object()).value(Scheduler::kPodAddressAnnotation, "");
  if (address.empty()) return;
  auto worker = std::make_unique<PodWorker>(this, pod, address);
  worker->Update(pod);
  workers_[key] = std::move(worker);
}

}  // namespace cohort::local
