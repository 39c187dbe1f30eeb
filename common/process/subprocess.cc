#include "common/process/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace cohort {

absl::StatusOr<Subprocess> Subprocess::Start(const Options& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("no program to start");
  std::vector<std::string> env_strings;
  for (char** e = environ; options.inherit_env && *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    if (options.env_set.count(name) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : options.env_set) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  bool capture = options.capture_output && options.output_path.empty();
  int output_file = -1;
  if (!options.output_path.empty()) {
    output_file =
        open(options.output_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (output_file < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open ", options.output_path, ": ", std::strerror(errno)));
    }
  }
  int fds[2] = {-1, -1};
  if (capture && pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Report exec failure through a close-on-exec pipe.
  int exec_err[2];
  if (pipe2(exec_err, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Built before fork: the child only calls async-signal-safe functions.
  const std::vector<int>& cpus = options.cpus;
  cpu_set_t cpus_set;
  CPU_ZERO(&cpus_set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus_set);
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    if (options.die_with_parent) {
      // The kernel kills the child when the forking thread ends; a parent that died before this
      // line is caught by the check after it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (capture) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
    } else if (output_file >= 0) {
      dup2(output_file, STDOUT_FILENO);
      dup2(output_file, STDERR_FILENO);
    }
    if (!options.working_dir.empty() && chdir(options.working_dir.c_str()) != 0) _exit(126);
    if (!cpus.empty()) sched_setaffinity(0, sizeof(cpus_set), &cpus_set);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = write(exec_err[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // Also in the parent, so Signal() works before the child runs.
  close(exec_err[1]);
  int child_errno = 0;
  ssize_t n = read(exec_err[0], &child_errno, sizeof(child_errno));
  close(exec_err[0]);
  if (output_file >= 0) close(output_file);
  Subprocess p;
  p.pid_ = pid;
  if (capture) {
    close(fds[1]);
    p.output_fd_ = fds[0];
  }
  if (n == sizeof(child_errno)) {
    p.Wait();
    return absl::NotFoundError(
        absl::StrCat("cannot run '", options.argv[0], "': ", std::strerror(child_errno)));
  }
  return p;
}

Subprocess::Subprocess(Subprocess&& o) noexcept
    : pid_(o.pid_), output_fd_(o.output_fd_), status_(o.status_) {
  o.pid_ = -1;
  o.output_fd_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    this->~Subprocess();
    pid_ = o.pid_;
    output_fd_ = o.output_fd_;
    status_ = o.status_;
    o.pid_ = -1;
    o.output_fd_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (running()) {
    Signal(SIGKILL);
    Wait();
  }
  CloseOutput();
}

void Subprocess::CloseOutput() {
  if (output_fd_ >= 0) close(output_fd_);
  output_fd_ = -1;
}

void Subprocess::Signal(int sig) const {
  if (pid_ > 0) kill(-pid_, sig);
}

std::optional<int> Subprocess::Poll() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = st;
  return status_;
}

int Subprocess::Wait() {
  if (status_) return *status_;
  int st = 0;
  while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  status_ = st;
  return st;
}

std::string Subprocess::DescribeStatus(int st) {
  if (WIFEXITED(st)) return absl::StrCat("exit code ", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    return absl::StrCat("killed by signal ", WTERMSIG(st), " (", strsignal(WTERMSIG(st)), ")");
  }
  return absl::StrCat("wait status ", st);
}

int Subprocess::ExitCodeOf(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

bool LineReader::Read(std::vector<std::string>* lines) {
  if (fd_ < 0) return false;
  char chunk[4096];
  ssize_t n = read(fd_, chunk, sizeof(chunk));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!partial_.empty()) lines->push_back(std::move(partial_));
    partial_.clear();
    return false;
  }
  partial_.append(chunk, n);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines->push_back(partial_.substr(start, nl - start));
  }
  partial_.erase(0, start);
  return true;
}

int64_t PeakRssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kb = 0;  // "VmHWM:    12345 kB"
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 6 - 3)), &kb))
        return -1;
      return kb * 1024;
    }
  }
  return -1;
}

namespace {

// Whether `port` on 127.0.0.1 (0: any) can be bound now; the port bound, or 0.
int TryBindLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

}  // namespace

absl::StatusOr<int> PickFreePort() {
  // Below the kernel's ephemeral range: a port released there can be taken at any moment as the
  // local port of some process's outgoing connection before the caller binds it (an EADDRINUSE
  // seen when a second program, e.g. PyTorch's TCPStore on MASTER_PORT, binds a second later).
  int ephemeral_low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 0, high = 0;
    if (range >> low >> high && low > 0) ephemeral_low = low;
  }
  constexpr int kLowest = 10000;
  if (ephemeral_low - kLowest >= 1000) {
    thread_local std::mt19937 random(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, ephemeral_low - 1);
    for (int tries = 0; tries < 64; ++tries) {
      if (int port = TryBindLoopback(pick(random)); port > 0) return port;
    }
  }
  if (int port = TryBindLoopback(0); port > 0) return port;
  return absl::InternalError(
      absl::StrCat("cannot pick a free port on 127.0.0.1: ", std::strerror(errno)));
}

}  // namespace cohort
