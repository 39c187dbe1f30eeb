#include "localcluster/kubelet/pod_worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/backoff.h"
#include "common/log.h"
#include "kube/json_fields.h"
#include "kube/quantity.h"
#include "localcluster/kubelet/probes.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

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

// The resident memory of `root` and every process descended from it.
int64_t TreeResidentBytes(pid_t root) {
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

// Kubernetes' restart back-off for a main container that has just exited under restartPolicy
// Always or OnFailure: it starts again at once the first time, then after 10 s, 20 s, 40 s ... up
// to 5 minutes (CrashLoopBackOff while it waits).
void ScheduleRestart(Container& c) {
  // As Kubernetes does, a container that ran 10 minutes starts its back-off over.
  if (c.started && c.finished && *c.finished - *c.started > absl::Minutes(10)) c.crash_streak = 0;
  // The kubelet's crash-loop back-off: 10 s doubling to 5 min.
  const absl::Duration back_off =
      c.crash_streak == 0 ? absl::ZeroDuration()
                          : DoublingDelay(absl::Seconds(10), absl::Minutes(5), c.crash_streak);
  ++c.crash_streak;
  c.restart_at = absl::Now() + back_off;
}

}  // namespace

PodWorker::PodWorker(kube::KubeClient* client, const KubeletOptions& options, const json& pod,
                     std::string address)
    : client_(client),
      options_(options),
      pod_(pod),
      address_(std::move(address)),
      ns_(pod["metadata"].value("namespace", "")),
      name_(pod["metadata"].value("name", "")),
      dir_(Kubelet::PodDir(options.root_dir, ns_, name_)),
      volumes_(client, pod, dir_, options.api_ca_pem,
               [this](absl::Duration d) {
                 if (Terminating()) return false;
                 state_.reason = "ContainerCreating";
                 Pause(d);
                 return true;
               }),
      runtime_(NewPodRuntime(options, RuntimePod{.object = pod,
                                                 .ns = ns_,
                                                 .name = name_,
                                                 .address = address_,
                                                 .dir = dir_,
                                                 .volumes = &volumes_})) {
  thread_ = std::thread([this] { Run(); });
}

PodWorker::~PodWorker() {
  {
    absl::MutexLock lock(&mu_);
    stop_retrying_ = true;  // The pod is gone or the kubelet stops: nothing left to confirm.
  }
  Terminate(absl::ZeroDuration(), /*remove=*/false);
  if (thread_.joinable()) thread_.join();
  if (deleter_.joinable()) deleter_.join();
}

void PodWorker::Update(const json& pod) {
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

void PodWorker::Deleted() { Terminate(absl::ZeroDuration(), /*remove=*/false); }

bool PodWorker::Terminate(absl::Duration grace, bool remove) {
  absl::MutexLock lock(&mu_);
  if (done_) return true;
  absl::Time deadline = absl::Now() + grace;
  if (!terminate_ || deadline < kill_deadline_) kill_deadline_ = deadline;
  terminate_ = true;
  remove_ |= remove;
  return false;
}

bool PodWorker::Terminating() {
  absl::MutexLock lock(&mu_);
  return terminate_;
}

void PodWorker::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&terminate_), d);
}

void PodWorker::Run() {
  absl::Status s = Prepare();
  if (s.ok()) {
    Execute();
  } else {
    LogWarning("pod ", ns_, "/", name_, ": ", s.message());
    state_.phase = "Failed";
    state_.reason = "ContainerCreating";
    state_.message = std::string(s.message());
    WriteStatus();
  }
  runtime_->RemoveSandbox();
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

absl::Status PodWorker::Prepare() {
  state_.start_time = absl::Now();
  // A pod of the same name ran here before (a gang restart reuses names): its logs and
  // volumes are not this pod's. Its worker has usually finished before the API server let the
  // name be reused; one that has not (its pod was removed at once) no longer writes the pod
  // object (IsOurs).
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_);
  WriteStatus();
  if (absl::Status s = volumes_.Prepare(); !s.ok()) return s;
  return runtime_->CreateSandbox();
}

std::map<std::string, std::string> PodWorker::Environment(const json& c) {
  std::map<std::string, std::string> env = runtime_->BaseEnvironment();
  for (const json& e : c.value("env", json::array())) {
    std::string name = e.value("name", "");
    if (e.contains("value")) {
      env[name] = ExpandReferences(e["value"].get<std::string>(), env);
    } else if (e.contains("valueFrom")) {
      const json& from = e["valueFrom"];
      if (from.contains("fieldRef")) {
        std::string field = from["fieldRef"].value("fieldPath", "");
        if (field == "status.podIP") env[name] = address_;
        if (field == "status.hostIP") env[name] = options_.node_address;
        if (field == "metadata.name") env[name] = name_;
        if (field == "metadata.namespace") env[name] = ns_;
        if (field == "spec.nodeName") env[name] = options_.node_name;
        if (field == "metadata.uid") env[name] = pod_["metadata"].value("uid", "");
      } else if (from.contains("secretKeyRef") || from.contains("configMapKeyRef")) {
        bool secret = from.contains("secretKeyRef");
        const json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
        absl::StatusOr<json> source =
            client_->Get(secret ? kube::kSecrets : kube::kConfigMaps, ns_, ref.value("name", ""));
        if (source.ok()) {
          std::string value = (*source)["data"].value(ref.value("key", ""), "");
          if (secret) absl::Base64Unescape(std::string(value), &value);
          env[name] = value;
        }
      }
    }
  }
  // The runtime's own (processes: paths under mount paths rewritten, the pod's network);
  // untouched by it, the API server's address below.
  runtime_->CompleteEnvironment(c, env);
  if (!volumes_.service_account_dir().empty()) {
    // In-cluster config: the API server's address, as a Service named kubernetes would give it.
    const std::string& server = options_.api_server;
    const size_t host_at = server.find("://") == std::string::npos ? 0 : server.find("://") + 3;
    const size_t port_at = server.rfind(':');
    if (port_at != std::string::npos && port_at > host_at) {
      env["KUBERNETES_SERVICE_HOST"] = server.substr(host_at, port_at - host_at);
      env["KUBERNETES_SERVICE_PORT"] = server.substr(port_at + 1);
    }
  }
  return env;
}

void PodWorker::StartContainer(Container& c) {
  c.started = absl::Now();
  c.restart_at.reset();
  c.exit_code.reset();
  c.finished.reset();
  c.ready = false;
  c.next_probe = absl::Now();
  absl::Status started = runtime_->StartContainer(c.spec, Environment(c.spec), c.log_path, c.run);
  if (started.ok()) return;
  c.start_error = std::string(started.message());
  c.start_failed = true;
  c.exit_code = 128;
  c.reason = runtime_->StartErrorReason(started);
  c.message = c.start_error;
  c.finished = absl::Now();
  std::ofstream(c.log_path, std::ios::app) << "local kubelet: " << c.start_error << "\n";
}

void PodWorker::SignalContainer(Container& c, int sig) {
  if (c.run.running()) runtime_->Signal(c.run, sig);
}

bool PodWorker::Reap(Container& c) {
  std::optional<ContainerExit> exit = runtime_->Reap(c.run);
  if (!exit) return false;
  c.exit_code = exit->exit_code;
  c.oom_killed |= exit->oom_killed;
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
// killed whole, and reported OOMKilled. Checked every 50 ms, so a fast allocator can overshoot a
// little. Containers too: some kernels (gVisor's) kill a container over its cgroup limit without
// podman learning that it was an OOM kill.
void PodWorker::EnforceMemoryLimit(Container& c) {
  if (c.memory_limit <= 0 || !c.run.running() || c.oom_killed) return;
  const pid_t pid = runtime_->RootPid(c.run);
  if (pid == 0) return;
  const int64_t bytes = TreeResidentBytes(pid);
  if (bytes <= c.memory_limit) return;
  c.oom_killed = true;
  SignalContainer(c, SIGKILL);
  std::ofstream(c.log_path, std::ios::app)
      << "local kubelet: OOMKilled: resident memory " << bytes
      << " bytes is over the container's limit of " << c.memory_limit << " bytes\n";
}

void PodWorker::Execute() {
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
    c.log_path = Kubelet::LogPath(options_.root_dir, ns_, name_, c.spec.value("name", ""));
    const json& memory = kube::Member(c.spec, "resources", "limits", "memory");
    if (memory.is_number_integer()) c.memory_limit = memory.get<int64_t>();
    if (!memory.is_string()) continue;
    const std::string limit = memory.get<std::string>();
    if (std::optional<int64_t> bytes = kube::ParseQuantity(limit)) {
      c.memory_limit = *bytes;
    } else {
      std::ofstream(c.log_path, std::ios::app) << "local kubelet: resources.limits.memory \""
                                               << limit << "\" is not a quantity: not enforced\n";
    }
  }

  // Init containers in order: sidecars start and keep running; others must succeed.
  for (Container& c : containers_) {
    if (!c.init) continue;
    if (Terminating()) break;
    StartContainer(c);
    if (c.sidecar) continue;
    while (c.run.running() && !Terminating()) {
      EnforceMemoryLimit(c);
      Reap(c);
      runtime_->UpdateSandbox();
      Pause(absl::Milliseconds(50));
    }
    Reap(c);
    if (c.exit_code.value_or(1) != 0) {
      state_.phase = "Failed";
      state_.reason = "Init:Error";
      StopAll(absl::ZeroDuration());
      runtime_->RemoveSandbox();
      WriteStatus();
      return;
    }
  }
  state_.initialized = true;
  if (!Terminating()) {
    for (Container& c : containers_) {
      if (!c.init) StartContainer(c);
    }
    state_.phase = "Running";
  }
  WriteStatus();

  // Kubernetes' default, Always: a main container that exits starts again (ScheduleRestart).
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
          ScheduleRestart(c);
        }
      }
      if (!c.init && (c.run.running() || c.restart_at)) main_running = true;
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
      if (c.sidecar && !c.run.running() && c.finished &&
          absl::Now() - *c.finished > absl::Seconds(1)) {
        ++c.restarts;
        StartContainer(c);
        changed = true;
      }
      bool was_ready = c.ready;
      Probe(c, address_);
      changed |= was_ready != c.ready;
    }
    if (changed) WriteStatus();
    runtime_->UpdateSandbox();  // When the cluster's names changed.
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
  state_.phase = all_zero ? "Succeeded" : "Failed";
  runtime_->RemoveSandbox();
  WriteStatus();
}

void PodWorker::StopAll(absl::Duration grace) {
  absl::Time deadline = absl::Now() + grace;
  for (bool sidecars : {false, true}) {
    for (Container& c : containers_) {
      if (c.sidecar == sidecars && c.run.running()) SignalContainer(c, SIGTERM);
    }
    while (true) {
      bool running = false;
      for (Container& c : containers_) {
        Reap(c);
        running |= c.sidecar == sidecars && c.run.running();
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

void PodWorker::WriteStatus() {
  WritePodStatus(client_, pod_, address_, options_.node_address, state_, containers_, *runtime_);
}

bool PodWorker::IsOurs(const json& pod) const {
  return pod["metadata"].value("uid", "") == pod_["metadata"].value("uid", "");
}

absl::Status PodWorker::DeleteOurPod() {
  absl::StatusOr<json> current = client_->Get(kube::kPods, ns_, name_);
  if (absl::IsNotFound(current.status())) return absl::OkStatus();
  if (!current.ok()) return current.status();
  if (!IsOurs(*current)) return absl::OkStatus();
  absl::Status deleted = client_->Delete(kube::kPods, ns_, name_, 0);
  return absl::IsNotFound(deleted) ? absl::OkStatus() : deleted;
}

void PodWorker::DeleteOurPodRetrying() {
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

}  // namespace cohort::local
