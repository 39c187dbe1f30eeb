#include "localcluster/kubelet/podman.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;

std::string LastLine(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  return lines.empty() ? "" : lines.back();
}

}  // namespace

absl::StatusOr<std::string> Podman(const std::vector<std::string>& args, absl::Duration timeout) {
  Subprocess::Options options;
  options.argv = {"podman", "--log-level", "error"};  // No warnings in the output we parse.
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) return p.status();
  std::string output;
  LineReader reader(p->output_fd());
  std::vector<std::string> lines;
  const absl::Time deadline = absl::Now() + timeout;
  std::optional<int> status;
  for (;;) {
    pollfd ready{.fd = p->output_fd(), .events = POLLIN, .revents = 0};
    const int64_t left_ms =
        absl::ToInt64Milliseconds(absl::Ceil(deadline - absl::Now(), absl::Milliseconds(1)));
    const int polled =
        left_ms <= 0 ? 0 : poll(&ready, 1, static_cast<int>(std::min<int64_t>(left_ms, 60'000)));
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {
      if (absl::Now() < deadline) continue;  // poll's own limit, not ours.
      // Podman itself may have ended while something it started holds the pipe open: its status
      // stands, with what it wrote.
      if ((status = p->Poll())) break;
      p->Signal(SIGKILL);
      p->Wait();
      return absl::DeadlineExceededError(absl::StrCat(
          "podman ", args.empty() ? "" : args[0], " did not finish in ",
          absl::FormatDuration(timeout),
          " and was killed: podman looks hung on this machine (does `podman ps` answer?)"));
    }
    if (polled < 0 || !reader.Read(&lines)) break;  // A poll error reads as the end.
  }
  if (!reader.partial().empty()) lines.push_back(reader.partial());
  for (const std::string& line : lines) absl::StrAppend(&output, line, "\n");
  if (!status) status = p->Wait();
  if (Subprocess::ExitCodeOf(*status) == 0) return output;
  const std::string last = LastLine(output);
  absl::string_view reason = last;
  absl::ConsumePrefix(&reason, "Error: ");
  return absl::UnknownError(absl::StrCat("podman ", args.empty() ? "" : args[0], " failed (",
                                         Subprocess::DescribeStatus(*status), "): ", reason));
}

absl::Status CheckPodman() {
  absl::StatusOr<std::string> info = Podman({"info", "--format", "{{.Host.Security.Rootless}}"});
  if (absl::IsNotFound(info.status())) {
    return absl::NotFoundError("podman is not installed (make deps installs it on Debian)");
  }
  if (!info.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("podman cannot run containers here: ", info.status().message(),
                     " (on sandboxed machines set CONTAINERS_CONF=<source>/images/containers.conf; "
                     "docs/images.md)"));
  }
  if (absl::StripAsciiWhitespace(*info) == "true") {
    return absl::FailedPreconditionError(
        "podman runs rootless here, whose pods the host cannot reach at their own addresses: run "
        "as root");
  }
  return absl::OkStatus();
}

absl::StatusOr<PodmanNetwork> CreateClusterNetwork(const std::string& name) {
  // Networks of clusters that were killed: their pid is gone (or is no longer theirs; a reused pid
  // only keeps a stale network a while longer).
  absl::StatusOr<std::string> listed = Podman(
      {"network", "ls", "--format", "json", "--filter", absl::StrCat("label=", kClusterLabel)});
  json networks = listed.ok() ? json::parse(*listed, nullptr, false) : json::array();
  for (const json& n : networks.is_array() ? networks : json::array()) {
    const std::string owner = n.value("labels", json::object()).value(kClusterLabel, "");
    int pid = 0;
    if (absl::SimpleAtoi(owner, &pid) && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
      RemoveNetwork(n.value("name", ""));
    }
  }
  const int first = 90 + static_cast<int>(std::hash<std::string>()(name) % 150);
  absl::Status last;
  for (int tried = 0; tried < 150; ++tried) {
    const int n = 90 + (first - 90 + tried) % 150;  // 10.90.0.0/16 .. 10.239.0.0/16.
    absl::StatusOr<std::string> created =
        Podman({"network", "create", "--subnet", absl::StrCat("10.", n, ".0.0/16"), "--gateway",
                absl::StrCat("10.", n, ".0.1"), "--label",
                absl::StrCat(kClusterLabel, "=", getpid()), name});
    if (created.ok())
      return PodmanNetwork{name, absl::StrCat("10.", n, "."), absl::StrCat("10.", n, ".0.1")};
    last = created.status();
    if (!absl::StrContains(last.message(), "already used")) break;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot create podman network ", name, ": ", last.message()));
}

void RemoveNetwork(const std::string& name) {
  Podman({"network", "rm", "--force", name}).IgnoreError();
}

absl::Status CreatePodSandbox(const PodSandboxSpec& spec) {
  std::vector<std::string> args = {"pod",        "create",      "--name",    spec.name,
                                   "--network",  spec.network,  "--ip",      spec.address,
                                   "--hostname", spec.hostname, "--no-hosts"};
  for (const auto& [key, value] : spec.labels)
    args.insert(args.end(), {"--label", absl::StrCat(key, "=", value)});
  RemovePodSandbox(spec.name);  // A pod of the same name left by a kubelet that was killed.
  if (absl::StatusOr<std::string> created = Podman(args); !created.ok()) return created.status();
  // The infra container (holding the network namespace) starts now, so that what its start prints
  // goes to no container's log.
  return Podman({"pod", "start", spec.name}).status();
}

void RemovePodSandbox(const std::string& name) {
  Podman({"pod", "rm", "--force", "--ignore", "--time", "0", name}).IgnoreError();
}

void RemovePodSandboxes(const std::string& label, const std::string& value) {
  absl::StatusOr<std::string> pods =
      Podman({"pod", "ps", "--quiet", "--filter", absl::StrCat("label=", label, "=", value)});
  if (!pods.ok()) return;
  for (absl::string_view id : absl::StrSplit(*pods, '\n', absl::SkipWhitespace())) {
    RemovePodSandbox(std::string(id));
  }
}

absl::StatusOr<std::string> ImageUser(const std::string& image) {
  absl::StatusOr<std::string> user =
      Podman({"image", "inspect", "--format", "{{.Config.User}}", image});
  if (!user.ok()) {
    return absl::NotFoundError(
        absl::StrCat("image \"", image, "\" is not in the local store (`podman images`; ",
                     "`make images` builds Cohort's): ", user.status().message()));
  }
  return std::string(absl::StripAsciiWhitespace(*user));
}

absl::StatusOr<std::string> CreateContainer(const ContainerSpec& spec) {
  RemoveContainer(spec.name);
  std::vector<std::string> args = {"create",  "--pull", "never", "--name",
                                   spec.name, "--pod",  spec.pod};
  for (const auto& [key, value] : spec.labels)
    args.insert(args.end(), {"--label", absl::StrCat(key, "=", value)});
  for (const auto& [name, value] : spec.env)
    args.insert(args.end(), {"--env", absl::StrCat(name, "=", value)});
  for (const ContainerMount& m : spec.mounts) {
    args.insert(args.end(),
                {"--volume", absl::StrCat(m.source, ":", m.target, m.read_only ? ":ro" : "")});
  }
  if (!spec.working_dir.empty()) args.insert(args.end(), {"--workdir", spec.working_dir});
  if (!spec.user.empty()) args.insert(args.end(), {"--user", spec.user});
  // As Kubernetes' readOnlyRootFilesystem: no writable tmpfs at /tmp, /run and /var/tmp either.
  if (spec.read_only_root) args.insert(args.end(), {"--read-only", "--read-only-tmpfs=false"});
  if (spec.no_new_privileges) args.insert(args.end(), {"--security-opt", "no-new-privileges"});
  for (const std::string& c : spec.cap_drop) args.insert(args.end(), {"--cap-drop", c});
  for (const std::string& c : spec.cap_add) args.insert(args.end(), {"--cap-add", c});
  // As Kubernetes: a command replaces the image's ENTRYPOINT and drops its CMD; args replace CMD.
  if (!spec.command.empty()) args.insert(args.end(), {"--entrypoint", json(spec.command).dump()});
  args.push_back(spec.image);
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  absl::StatusOr<std::string> created = Podman(args);
  if (!created.ok()) {
    if (absl::StrContains(created.status().message(), "image not known")) {
      return absl::NotFoundError(
          absl::StrCat("image \"", spec.image,
                       "\" is not in the local store and is never pulled (`podman images` "
                       "lists the store; `make images` builds Cohort's images)"));
    }
    return created.status();
  }
  return LastLine(*created);
}

std::vector<std::string> StartAttachedCommand(const std::string& name) {
  return {"podman", "--log-level", "error", "start", "--attach", name};
}

void RemoveContainer(const std::string& name) {
  Podman({"rm", "--force", "--ignore", "--time", "0", name}).IgnoreError();
}

absl::Status KillContainer(const std::string& name, int signal) {
  return Podman({"kill", "--signal", absl::StrCat(signal), name}).status();
}

absl::StatusOr<ContainerState> InspectContainer(const std::string& name) {
  absl::StatusOr<std::string> text = Podman({"container", "inspect", name});
  if (!text.ok()) return text.status();
  json all = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!all.is_array() || all.empty() || !all[0].is_object()) {
    return absl::InternalError(absl::StrCat("podman inspect ", name, " printed no container"));
  }
  const json& c = all[0];
  const json state = c.value("State", json::object());
  ContainerState s;
  s.id = c.value("Id", "");
  s.image_id = c.value("Image", "");
  s.status = state.value("Status", "");
  s.exit_code = state.value("ExitCode", 0);
  s.oom_killed = state.value("OOMKilled", false);
  s.pid = state.value("Pid", 0);
  return s;
}

absl::StatusOr<PodReaper> PodReaper::Start(const std::string& label, const std::string& value) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  // Built before fork: the child only calls async-signal-safe functions.
  const std::string script =
      absl::StrCat("cat >/dev/null; podman pod ps --quiet --filter 'label=", label, "=", value, "'",
                   " | xargs -r podman pod rm --force --ignore --time 0 >/dev/null 2>&1; exit 0");
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    setsid();  // Out of the kubelet's process group: a signal to the group must not stop it.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(fds[0], STDIN_FILENO);  // Its copy of the write end closes at exec.
    execv(argv[0], const_cast<char* const*>(argv));
    _exit(127);
  }
  close(fds[0]);
  PodReaper reaper;
  reaper.write_fd_ = fds[1];
  reaper.pid_ = pid;
  return reaper;
}

PodReaper::PodReaper(PodReaper&& other) noexcept
    : write_fd_(std::exchange(other.write_fd_, -1)), pid_(std::exchange(other.pid_, -1)) {}

PodReaper& PodReaper::operator=(PodReaper&& other) noexcept {
  if (this != &other) {
    Close();
    write_fd_ = std::exchange(other.write_fd_, -1);
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

PodReaper::~PodReaper() { Close(); }

void PodReaper::Close() {
  if (write_fd_ >= 0) close(std::exchange(write_fd_, -1));
  if (pid_ > 0) {
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
}

}  // namespace cohort::local
