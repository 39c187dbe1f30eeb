#include "common/process/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cohort {
namespace {

// Whether `pid` is in a stopped state (T: by a signal; t: by a tracer), from /proc/<pid>/stat.
bool IsStopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // The command may hold spaces and parentheses.
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'T' || paren[2] == 't');
}

}  // namespace

ProcessGroup::ProcessGroup(std::string name) : ProcessGroup(std::move(name), Options()) {}

ProcessGroup::ProcessGroup(std::string name, Options options) : name_(std::move(name)) {
  if (!options.take_signals) return;
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

ProcessGroup::~ProcessGroup() {
  if (signal_fd_ >= 0) close(signal_fd_);
}

void ProcessGroup::Print(const std::string& line) {
  std::string out = line + "\n";
  fwrite(out.data(), 1, out.size(), stdout);
  fflush(stdout);
}

ProcessGroup::Child* ProcessGroup::Start(Child child, Subprocess::Options options) {
  options.die_with_parent = true;  // Nothing outlives the group's owner, even a kill -9 of it.
  options.capture_output = true;
  options.output_path.clear();
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) {
    std::cerr << name_ << ": " << child.label << ": " << p.status().message() << "\n";
    return nullptr;
  }
  child.process = std::move(*p);
  fcntl(child.process.output_fd(), F_SETFL, O_NONBLOCK);
  child.output = LineReader(child.process.output_fd());
  child.output_open = true;
  children_.push_back(std::move(child));
  return &children_.back();
}

ProcessGroup::Child* ProcessGroup::Find(bool trainer, int rank) {
  for (Child& c : children_) {
    if (c.trainer == trainer && c.rank == rank) return &c;
  }
  return nullptr;
}

ProcessGroup::Child* ProcessGroup::Find(const std::string& label) {
  for (Child& c : children_) {
    if (c.label == label) return &c;
  }
  return nullptr;
}

void ProcessGroup::KillAllAt(absl::Time at) {
  if (!kill_at_ || at < *kill_at_) kill_at_ = at;
}

void ProcessGroup::DrainOutput(Child& c, const Hooks& hooks) {
  std::vector<std::string> lines;
  bool open = c.output.Read(&lines);
  for (std::string& line : lines) {
    if (hooks.on_line) {
      hooks.on_line(c, std::move(line));
    } else {
      Print(absl::StrCat("[", c.label, "] ", line));
    }
  }
  if (!open) {
    c.output_open = false;
    c.process.CloseOutput();
  }
}

void ProcessGroup::Run(const Hooks& hooks) {
  // Signals (SIGCHLD included) wake the wait; the 50 ms only paces the callers' timed steps.
  while (Step(hooks, absl::Milliseconds(50))) {
  }
}

bool ProcessGroup::Step(const Hooks& hooks, absl::Duration wait) {
  // Reap everything that exited, then let the caller judge: a batch may hold a death and the
  // exits it caused.
  std::vector<Child*> exited;
  for (Child& c : children_) {
    if (!c.process.running() || !c.process.Poll()) continue;
    c.exited_at = absl::Now();
    exited.push_back(&c);
  }
  if (!exited.empty() && hooks.on_exits) hooks.on_exits(exited);
  if (hooks.on_tick) hooks.on_tick();

  bool any_running = false;
  bool outputs_open = false;
  for (const Child& c : children_) {
    any_running |= c.process.running();
    outputs_open |= c.output_open;
  }
  if (!any_running && !outputs_open) return false;
  if (kill_at_ && absl::Now() >= *kill_at_) {
    for (Child& c : children_) {
      if (c.process.running() && !c.killed) {
        c.killed = true;
        Print(absl::StrCat(name_, ": stopping ", c.label, " (SIGKILL)"));
        c.process.Signal(SIGKILL);
      }
    }
  } else if (kill_at_ && absl::Now() - stops_checked_ >= absl::Milliseconds(100)) {
    stops_checked_ = absl::Now();
    for (Child& c : children_) {
      if (c.process.running() && !c.killed && IsStopped(c.process.pid())) {
        c.killed = true;
        Print(absl::StrCat(name_, ": ", c.label,
                           " is stopped (SIGSTOP or a debugger) and cannot exit by itself: "
                           "stopping it now (SIGKILL)"));
        c.process.Signal(SIGKILL);
      }
    }
  }

  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  if (signal_fd_ >= 0) {
    fds.push_back(pollfd{signal_fd_, POLLIN, 0});
    owners.push_back(nullptr);
  }
  for (Child& c : children_) {
    if (c.output_open) {
      fds.push_back(pollfd{c.process.output_fd(), POLLIN, 0});
      owners.push_back(&c);
    }
  }
  poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(wait)));
  for (size_t i = 0; i < fds.size(); ++i) {
    if (owners[i] == nullptr) {
      if (!(fds[i].revents & POLLIN)) continue;
      signalfd_siginfo info;
      while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo != SIGCHLD && hooks.on_signal) hooks.on_signal(info.ssi_signo);
      }
    } else if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      DrainOutput(*owners[i], hooks);
    }
  }
  return true;
}

bool ProcessGroup::WaitIdle(int fd, const Hooks& hooks, absl::Duration wait) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
  const int n = signal_fd_ >= 0 ? 2 : 1;
  const int ms =
      wait == absl::InfiniteDuration() ? -1 : static_cast<int>(absl::ToInt64Milliseconds(wait));
  if (poll(fds, n, ms) <= 0) return false;
  if (n == 2 && (fds[1].revents & POLLIN)) {
    signalfd_siginfo info;
    while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
      if (info.ssi_signo != SIGCHLD && hooks.on_signal) hooks.on_signal(info.ssi_signo);
    }
  }
  return (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

const ProcessGroup::Child* RootCauseChild(const std::vector<const ProcessGroup::Child*>& exited) {
  std::vector<const ProcessGroup::Child*> ended;
  std::vector<ExitKind> kinds;
  for (const ProcessGroup::Child* c : exited) {
    if (!c->process.status()) continue;  // Status() needs one.
    ended.push_back(c);
    kinds.push_back(ClassifyExit(c->Exit()));
  }
  std::optional<size_t> root = RootCause(kinds);
  return root ? ended[*root] : nullptr;
}

}  // namespace cohort
