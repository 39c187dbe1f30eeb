// cohort-launch: starts the processes of one pod, as torchrun does on a node. The operator runs a
// trainer container's command through it when spec.processesPerPod is more than 1:
//
//   cohort-launch -- python train.py --lr 0.1
//
// It starts COHORT_PROCESSES_PER_POD copies of the command, local process l with its own rank's
// environment (COHORT_PROCESS_ID = the pod's first rank + l, COHORT_LOCAL_PROCESS_ID, RANK,
// LOCAL_RANK, JAX_PROCESS_ID, JAX_LOCAL_DEVICE_IDS when the pod has GPUs, and its own
// COHORT_AGENT_SOCKET: the pod's one sidecar serves every process on a socket of its own).
// Every output line is prefixed with the rank, so `kubectl logs` tells processes apart. SIGTERM
// and SIGINT are forwarded to every process (a preemption notice reaches all of them). When one
// process exits non-zero or is killed, the others get the fate-sharing window to exit by
// themselves (libdist tells them within a second) and are then killed; cohort-launch exits with
// the status of the process that caused it (128 + signal for a killed one; which one is
// common/exit_codes.h's RootCause), and with 0 only when every process exited 0. Local process l
// runs on the l-th share of the pod's CPUs (COHORT_CPU_BIND=none turns that off;
// launcher/cpu_binding.h). docs/operator.md has the rules.
//
// Restarting in place (spec.restartStrategy: InPlace; COHORT_LAUNCH_SOCKET set), a failed
// attempt does not end cohort-launch: once every process of it is gone it empties COHORT_SHM_DIR
// of the attempt's files, tells the pod's sidecar how the attempt ended
// (launcher/launch_protocol.h) and waits for the sidecar to say which attempt to run next, whose
// processes get COHORT_RESTART_ATTEMPT = that attempt. It still exits 0 when every process exited
// 0, and with the attempt's status after SIGTERM or SIGINT or when the sidecar is gone.
//
// With --one-process it runs the command once with the pod's environment as it is (torchrun, which
// starts the pod's processes itself, under spec.restartStrategy: InPlace).
//
//   cohort-launch --install /run/cohort/bin/cohort-launch
//
// copies cohort-launch itself there (the init container cohort-launch-install does this from the
// sidecar image, so the trainer's image needs nothing from Cohort), and beside it, in python/,
// the Python start-up hook of hang detection (launcher/python_probe; docs/faults.md, "Hung
// ranks"): each process then gets that directory first on its PYTHONPATH and a probe directory
// of its own (COHORT_PROBE_DIR), unless COHORT_PYTHON_PROBE=0 or COHORT_HANG_TIMEOUT=0. It is
// linked statically.

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "common/exit_codes.h"
#include "common/process/process_group.h"
#include "common/shared_dir.h"
#include "launcher/cpu_binding.h"
#include "launcher/launch_protocol.h"
#include "launcher/python_probe_files.h"

namespace cohort {
namespace {

constexpr char kName[] = "cohort-launch";
constexpr int kExitUsage = 2;
// How long the other processes get to exit by themselves after one failed.
constexpr absl::Duration kDefaultFateSharingWindow = absl::Seconds(5);
// Lines of a process's output kept as the termination message of an attempt it ended.
constexpr size_t kTailLines = 8;

int Usage(const std::string& problem) {
  std::cerr << kName << ": " << problem << "\n"
            << "usage: " << kName << " [--grace-period 5s] [--one-process] -- PROGRAM [ARGS...]\n"
            << "       " << kName << " --install DESTINATION\n";
  return kExitUsage;
}

// The directory of the Python start-up hook beside cohort-launch (Install writes it).
std::filesystem::path ProbeSourceDir(const std::filesystem::path& launcher) {
  return launcher.parent_path() / "python";
}

// Copies this executable to `destination` (atomically, mode 0755), and the Python start-up hook
// into python/ beside it.
int Install(const std::string& destination) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dest(destination);
  if (dest.has_parent_path()) fs::create_directories(dest.parent_path(), ec);
  fs::path tmp = dest;
  tmp += ".tmp";
  fs::copy_file("/proc/self/exe", tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::permissions(tmp, fs::perms(0755), ec);
  if (!ec) fs::rename(tmp, dest, ec);
  const fs::path probe = ProbeSourceDir(fs::absolute(dest));
  if (!ec) fs::create_directories(probe, ec);
  // Writable by the trainer's uid too, whatever it is: the first rank keeps the hook's compiled
  // .pyc there for the others (docs/python-probe.md, "What it costs").
  if (!ec) fs::permissions(probe, fs::perms::all, ec);
  for (const EmbeddedFile& file : kEmbeddedFiles) {
    if (ec) break;
    const fs::path path = probe / file.name;
    fs::path part = path;
    part += ".tmp";
    std::ofstream(part, std::ios::trunc) << file.contents;
    fs::permissions(part, fs::perms(0644), ec);
    if (!ec) fs::rename(part, path, ec);
  }
  if (ec) {
    std::cerr << kName << ": cannot install into " << destination << ": " << ec.message()
              << "; the directory must be writable (the operator mounts an emptyDir there)\n";
    return 1;
  }
  std::cout << kName << ": installed " << destination << "\n";
  return 0;
}

// How one attempt's processes ended.
struct AttemptOutcome {
  int exit_code = 0;
  bool signalled = false;  // SIGTERM or SIGINT reached cohort-launch: the pod is going.
  std::string reason = "Error";
  std::string message;  // The root-cause process's last output lines.
  std::string cause;    // "rank 3's status (killed by signal 9 (Killed))"; empty on success.
  std::optional<int32_t>
      superseded;  // A later attempt was ordered while this one ran: it was stopped.
};

// The OOM killer's count in this container's cgroup (cgroup v2); -1 when it cannot be read.
int64_t OomKills() {
  std::ifstream in("/sys/fs/cgroup/memory.events");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return -1;
}

// Hang detection's start-up hook for the process of rank `rank`: the variables that put it on
// the process's path and give it a probe directory of its own (emptied of what an earlier process
// of the rank left); none when it is turned off, the pod has no agent socket (no sidecar to read
// it) or the hook was not installed beside cohort-launch.
std::map<std::string, std::string> ProbeVariables(const std::string& agent_socket, int rank) {
  namespace fs = std::filesystem;
  if (agent_socket.empty() || env::Get(env::kPythonProbe).value_or("1") == "0" ||
      env::Get(env::kHangTimeout).value_or("auto") == "0") {
    return {};
  }
  std::error_code ec;
  const fs::path hook = ProbeSourceDir(fs::read_symlink("/proc/self/exe", ec));
  if (ec || !fs::exists(hook / "sitecustomize.py", ec)) return {};
  const std::string dir = env::ProbeDir(agent_socket, rank);
  // The trainer's uid may differ from the sidecar's, which reads it.
  MakeSharedDirectories(dir, fs::path(dir).parent_path().string());
  for (const char* leftover : {"status.json", "dump-request", "dumped", "faulthandler.txt"}) {
    fs::remove(fs::path(dir) / leftover, ec);
  }
  std::string path = hook.string();
  if (std::optional<std::string> inherited = env::Get("PYTHONPATH"))
    absl::StrAppend(&path, ":", *inherited);
  return {
      {"PYTHONPATH", path}, {env::kProbeDir, dir}, {env::kProbeParentPid, absl::StrCat(getpid())}};
}

// Starts the pod's processes as restart attempt `attempt` and watches them until every one is
// gone: a failure gives the others `window` to exit by themselves, then kills them. `ordered`
// (restarting in place) says whether the sidecar ordered a later attempt meanwhile: the job went
// on without these processes (the operator waited for them to end, and they did not), so they are
// killed at once.
AttemptOutcome RunAttempt(ProcessGroup& group, const std::vector<std::string>& command,
                          const env::ProcessPlacement& pod, std::optional<int32_t> attempt,
                          absl::Duration window, bool one_process,
                          const std::function<std::optional<int32_t>()>& ordered = nullptr) {
  const std::string socket_base = env::Get(env::kAgentSocket).value_or("");
  const bool gpus = env::Get(env::kJaxLocalDeviceIds).has_value();
  const CpuBind bind = CpuBindFromEnvironment(kDefaultCpuBind).value_or(CpuBind::kNone);
  const std::vector<int> cpus = AllowedCpus();
  const int64_t oom_before = OomKills();
  group.ClearKillDeadline();
  AttemptOutcome out;

  std::vector<ProcessGroup::Child*> mine;
  bool started = true;
  const int processes = one_process ? 1 : pod.processes_per_pod;
  for (int local = 0; local < processes && started; ++local) {
    env::ProcessPlacement p = pod;
    p.local_index = local;
    std::map<std::string, std::string> vars;
    // --one-process: the command (torchrun) starts the pod's processes and gives them their ranks;
    // a pod that holds another pod's slot (a spare) tells it which node it now is.
    if (one_process &&
        env::Get(env::kProcessId) != absl::StrCat(pod.pod_index * pod.processes_per_pod)) {
      vars[env::kTorchrunNodeRank] = absl::StrCat(pod.pod_index);
    }
    if (!one_process) {
      for (auto& [name, value] : env::ProcessVariables(p, gpus)) vars[name] = value;
      if (!socket_base.empty()) {
        vars[env::kAgentSocket] = env::AgentSocketPath(socket_base, local, p.processes_per_pod);
      }
      for (auto& [name, value] : ProbeVariables(socket_base, p.rank())) vars[name] = value;
    }
    if (attempt) vars[env::kRestartAttempt] = absl::StrCat(*attempt);
    ProcessGroup::Child child;
    child.label = absl::StrCat("rank ", p.rank());
    child.rank = p.rank();
    child.pod = p.pod_index;
    Subprocess::Options options{command, vars};
    // The pod's CPUs (its cpuset), shared out among its processes.
    if (bind == CpuBind::kCores && !one_process)
      options.cpus = CpuShare(cpus, local, p.processes_per_pod);
    ProcessGroup::Child* c = group.Start(std::move(child), options);
    started = c != nullptr;
    if (c != nullptr) mine.push_back(c);
  }
  if (!started) group.KillAllAt(absl::Now());

  std::vector<const ProcessGroup::Child*> finished;
  // The last lines of each process: the root cause's are its termination message.
  std::map<const ProcessGroup::Child*, std::deque<std::string>> tails;
  ProcessGroup::Hooks hooks;
  hooks.on_line = [&](ProcessGroup::Child& c, std::string line) {
    std::deque<std::string>& tail = tails[&c];
    tail.push_back(line);
    if (tail.size() > kTailLines) tail.pop_front();
    ProcessGroup::Print(absl::StrCat("[", c.label, "] ", line));
  };
  hooks.on_exits = [&](std::vector<ProcessGroup::Child*>& exited) {
    for (ProcessGroup::Child* c : exited) {
      finished.push_back(c);
      if (ClassifyExit(c->Exit()) == ExitKind::kSucceeded) continue;
      ProcessGroup::Print(
          absl::StrCat(kName, ": ", c->label, " ", Subprocess::DescribeStatus(*c->process.status()),
                       c->EndedByTheNotice() ? ": the preemption notice ended it before its "
                                               "program could take it; a preemption (exit code 76)"
                                             : ""));
      // The others are told by the job (libdist's fate sharing) and exit by themselves; any
      // still running after the window are killed.
      group.KillAllAt(absl::Now() + window);
    }
  };
  if (ordered) {
    hooks.on_tick = [&] {
      if (out.superseded) return;
      out.superseded = ordered();
      if (!out.superseded) return;
      ProcessGroup::Print(absl::StrCat(kName, ": restart attempt ", *out.superseded,
                                       " was ordered while attempt ", attempt.value_or(0),
                                       " still runs here: stopping its processes"));
      group.KillAllAt(absl::Now());
    };
  }
  hooks.on_signal = [&](int signo) {
    // Kubernetes sends SIGTERM to the container's first process only: every process must see
    // it (each reports the preemption notice), as under torchrun.
    out.signalled = true;
    for (ProcessGroup::Child* c : mine) {
      if (!c->process.running()) continue;
      c->noticed |= signo == SIGTERM;
      c->process.Signal(signo);
    }
  };
  group.Run(hooks);

  const ProcessGroup::Child* cause = RootCauseChild(finished);
  if (!started) {
    std::cerr << kName << ": could not start every process; stopped the others\n";
    out.exit_code = cause != nullptr ? Subprocess::ExitCodeOf(cause->Status()) : 1;
    return out;
  }
  if (cause == nullptr) {
    out.reason = "Completed";
    return out;
  }
  out.exit_code = Subprocess::ExitCodeOf(cause->Status());
  const int64_t oom_after = OomKills();
  if (out.exit_code == 128 + SIGKILL && oom_before >= 0 && oom_after > oom_before)
    out.reason = "OOMKilled";
  out.message = absl::StrJoin(tails[cause], "\n");
  out.cause =
      absl::StrCat(cause->label, "'s status (", Subprocess::DescribeStatus(cause->Status()), ")");
  return out;
}

// The pod's sidecar's launch socket (restarting in place), connected; -1 when none is set or
// it cannot be reached within `patience` (then cohort-launch runs one attempt and exits).
int ConnectLaunchSocket(absl::Duration patience) {
  std::optional<std::string> path = env::Get(env::kLaunchSocket);
  if (!path) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path->c_str(), sizeof(addr.sun_path) - 1);
  const absl::Time give_up = absl::Now() + patience;
  while (true) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    if (fd >= 0) close(fd);
    if (absl::Now() >= give_up) {
      std::cerr << kName << ": cannot reach the sidecar's launch socket " << *path << " ("
                << std::strerror(errno) << "): this pod's processes will not restart in place\n";
      return -1;
    }
    absl::SleepFor(
        absl::Milliseconds(50));  // The sidecar is starting: no notification to wait for.
  }
}

// Empties `dir` (the pod's /dev/shm) of what is not in `keep`: an attempt's files do not reach
// the next.
void CleanShm(const std::string& dir, const std::set<std::string>& keep) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (keep.count(e.path().filename().string())) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
  }
}

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    names.insert(e.path().filename().string());
  return names;
}

// This pod's place in the job. A spare pod (COHORT_SPARE, no COHORT_PROCESS_ID) has none yet:
// pod index -1 until its sidecar orders an attempt as some pod.
absl::StatusOr<env::ProcessPlacement> PodPlacement(bool spare) {
  if (!spare) return env::PodPlacementFromEnvironment();
  env::ProcessPlacement p;
  p.pod_index = -1;
  absl::StatusOr<std::optional<int64_t>> world = env::GetInt(env::kNumProcesses);
  absl::StatusOr<std::optional<int64_t>> per_pod = env::GetInt(env::kProcessesPerPod);
  if (!world.ok()) return world.status();
  if (!per_pod.ok()) return per_pod.status();
  p.processes_per_pod = static_cast<int>(per_pod->value_or(1));
  if (!world->has_value() || p.processes_per_pod < 1 || **world % p.processes_per_pod != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a spare pod needs COHORT_NUM_PROCESSES, a multiple of "
                     "COHORT_PROCESSES_PER_POD; the operator sets both"));
  }
  p.num_pods = static_cast<int>(**world / p.processes_per_pod);
  if (!env::Get(env::kLaunchSocket)) {
    return absl::InvalidArgumentError(
        "a spare pod runs only what its sidecar orders, on the launch socket: COHORT_LAUNCH_SOCKET "
        "is not set");
  }
  return p;
}

int Launch(const std::vector<std::string>& command, absl::Duration window, bool one_process) {
  const bool spare = env::Get(env::kSpare).has_value() && !env::Get(env::kProcessId).has_value();
  absl::StatusOr<env::ProcessPlacement> pod = PodPlacement(spare);
  if (!pod.ok()) {
    std::cerr << kName << ": " << pod.status().message() << "\n";
    return kExitUsage;
  }
  if (absl::StatusOr<CpuBind> bind = CpuBindFromEnvironment(kDefaultCpuBind); !bind.ok()) {
    std::cerr << kName << ": " << bind.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<std::optional<int64_t>> first = env::GetInt(env::kRestartAttempt);
  if (!first.ok()) {
    std::cerr << kName << ": " << first.status().message() << "\n";
    return kExitUsage;
  }
  ProcessGroup group(kName);
  int launch_fd = ConnectLaunchSocket(absl::Seconds(10));
  if (launch_fd < 0 && spare) return 1;  // It said why.
  if (launch_fd < 0) {
    AttemptOutcome out = RunAttempt(group, command, *pod, std::nullopt, window, one_process);
    if (!out.cause.empty()) ProcessGroup::Print(absl::StrCat(kName, ": exiting with ", out.cause));
    return out.exit_code;
  }

  // Restarting in place: attempt after attempt, as the sidecar says.
  const std::string shm_dir = env::Get(env::kShmDir).value_or("");
  const std::set<std::string> shm_before =
      shm_dir.empty() ? std::set<std::string>() : ListDir(shm_dir);
  int32_t attempt = static_cast<int32_t>(first->value_or(0));
  LineReader from_sidecar(launch_fd);
  bool signalled = false;
  ProcessGroup::Hooks idle;
  idle.on_signal = [&](int) { signalled = true; };
  // The latest order among `lines` for an attempt of at least `least`. One that gives this pod
  // another pod index (a spare that took a slot) moves the pod's ranks there, for that attempt
  // and the ones after it; an index outside the job is refused, saying so.
  auto latest_order = [&](const std::vector<std::string>& lines,
                          int32_t least) -> std::optional<int32_t> {
    std::optional<launch::AttemptOrder> next;
    for (const std::string& l : lines) {
      std::optional<launch::AttemptOrder> o = launch::ParseOrder(l);
      if (!o || o->attempt < least || (next && o->attempt <= next->attempt)) continue;
      if (o->pod_index && *o->pod_index >= pod->num_pods) {
        ProcessGroup::Print(absl::StrCat(kName, ": the sidecar ordered restart attempt ",
                                         o->attempt, " as pod ", *o->pod_index,
                                         ", but the job has ", pod->num_pods, " pods: ignored"));
        continue;
      }
      if (!o->pod_index && pod->pod_index < 0)
        continue;  // A spare runs nothing until it holds a slot.
      next = o;
    }
    if (!next) return std::nullopt;
    if (next->pod_index && *next->pod_index != pod->pod_index) {
      ProcessGroup::Print(absl::StrCat(kName, ": this pod holds pod index ", *next->pod_index,
                                       " (ranks ", *next->pod_index * pod->processes_per_pod, "-",
                                       (*next->pod_index + 1) * pod->processes_per_pod - 1,
                                       ") from restart attempt ", next->attempt, " on"));
      pod->pod_index = *next->pod_index;
    }
    return next->attempt;
  };
  // The next attempt the sidecar orders, at least `least`; nullopt after a signal or when the
  // sidecar is gone. The first attempt too waits for its order: a pod's sidecar gives it at once,
  // unless the pod replaces one alone while the others still end the last attempt (its processes
  // would reach the last attempt's coordination service).
  auto await_order = [&](int32_t least, const std::string& waiting) -> std::optional<int32_t> {
    bool said = false;
    while (!signalled) {
      if (!group.WaitIdle(launch_fd, idle,
                          said ? absl::InfiniteDuration() : absl::Milliseconds(200))) {
        if (!said && !signalled && !waiting.empty()) ProcessGroup::Print(waiting);
        said = true;
        continue;
      }
      std::vector<std::string> lines;
      const bool open = from_sidecar.Read(&lines);
      std::optional<int32_t> next = latest_order(lines, least);
      if (next) return next;
      if (!open && !spare) return std::nullopt;
      if (!open) {
        // A spare's sidecar re-executes itself as the pod whose slot it took: its socket is back
        // within moments (or the pod is gone).
        close(launch_fd);
        launch_fd = ConnectLaunchSocket(absl::Seconds(10));
        if (launch_fd < 0) return std::nullopt;
        from_sidecar = LineReader(launch_fd);
        ProcessGroup::Print(
            absl::StrCat(kName, ": the sidecar's launch socket closed; reconnected"));
      }
    }
    return std::nullopt;
  };
  std::optional<int32_t> go = await_order(
      attempt,
      spare
          ? absl::StrCat(kName,
                         ": a spare pod: waiting for the sidecar to give it the slot of a pod "
                         "that is gone")
          : absl::StrCat(kName, ": restart attempt ", attempt,
                         " waits for its order from the sidecar (this pod replaces one alone: the "
                         "others end the last attempt first)"));
  if (!go && !signalled) {
    std::cerr << kName
              << ": the pod's sidecar closed the launch socket before it ordered restart attempt "
              << attempt << ": its log says why\n";
  }
  if (!go) return signalled ? 128 + SIGTERM : 1;
  attempt = *go;
  // While an attempt runs: a later attempt the sidecar ordered (read without waiting).
  bool sidecar_gone = false;
  auto ordered_meanwhile = [&]() -> std::optional<int32_t> {
    pollfd p{launch_fd, POLLIN, 0};
    if (sidecar_gone || poll(&p, 1, 0) != 1) return std::nullopt;
    std::vector<std::string> lines;
    sidecar_gone = !from_sidecar.Read(&lines);
    return latest_order(lines, attempt + 1);
  };
  while (true) {
    AttemptOutcome out =
        RunAttempt(group, command, *pod, attempt, window, one_process, ordered_meanwhile);
    if (out.superseded) {
      // Nobody waits for this attempt's end any more: the next one starts.
      if (!shm_dir.empty()) CleanShm(shm_dir, shm_before);
      attempt = *out.superseded;
      ProcessGroup::Print(absl::StrCat(kName, ": starting restart attempt ", attempt, " in place"));
      continue;
    }
    if (out.exit_code == 0 || out.signalled) {
      if (!out.cause.empty())
        ProcessGroup::Print(absl::StrCat(kName, ": exiting with ", out.cause));
      return out.exit_code;
    }
    // Its last line, as the container's termination message would end: which process, and how.
    const std::string summary =
        absl::StrCat(kName, ": restart attempt ", attempt, " ended with ", out.cause);
    out.message = out.message.empty() ? summary : absl::StrCat(out.message, "\n", summary);
    if (!shm_dir.empty()) CleanShm(shm_dir, shm_before);
    launch::AttemptEnded ended{attempt, out.exit_code, absl::ToUnixMillis(absl::Now()), out.reason,
                               out.message};
    const std::string line = launch::FormatEnded(ended);
    if (send(launch_fd, line.data(), line.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(line.size())) {
      return out.exit_code;  // The sidecar is gone: so is the pod's way to restart in place.
    }
    ProcessGroup::Print(absl::StrCat(summary, "; waiting for the next"));
    std::optional<int32_t> next = await_order(attempt + 1, "");
    if (!next) return out.exit_code;
    attempt = *next;
    ProcessGroup::Print(absl::StrCat(kName, ": starting restart attempt ", attempt, " in place"));
  }
}

int Run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::Duration window = kDefaultFateSharingWindow;
  bool one_process = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    }
    if (args[i] == "--install") {
      if (i + 1 >= args.size()) return Usage("--install needs a destination path");
      return Install(args[i + 1]);
    }
    if (args[i] == "--grace-period") {
      absl::StatusOr<absl::Duration> d =
          i + 1 < args.size() ? env::ParseDuration(args[i + 1])
                              : absl::InvalidArgumentError("needs a duration, e.g. 5s");
      if (!d.ok()) return Usage(absl::StrCat("--grace-period: ", d.status().message()));
      window = *d;
      ++i;
      continue;
    }
    if (args[i] == "--one-process") {
      one_process = true;
      continue;
    }
    if (args[i] == "-h" || args[i] == "--help") {
      Usage("starts COHORT_PROCESSES_PER_POD copies of PROGRAM, one per rank of this pod");
      return 0;
    }
    break;  // The program itself, without "--".
  }
  std::vector<std::string> command(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (command.empty()) return Usage("no program given");
  return Launch(command, window, one_process);
}

}  // namespace
}  // namespace cohort

int main(int argc, char** argv) {
  int code = cohort::Run(argc, argv);
  std::fflush(nullptr);
  return code;
}
