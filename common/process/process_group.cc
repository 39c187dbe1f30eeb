#include "launcher/process_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"

namespace cohort {

ProcessGroup::ProcessGroup(std::string name) : name_(std::move(name)) {
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

bool ProcessGroup::Start(Child child, Subprocess::Options options) {
  options.die_with_parent = true;  // Nothing outlives the group's owner, even a kill -9 of it.
  options.capture_output = true;
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) {
    std::cerr << name_ << ": " << child.label << ": " << p.status().message() << "\n";
    return false;
  }
  child.process = std::move(*p);
  fcntl(child.process.output_fd(), F_SETFL, O_NONBLOCK);
  children_.push_back(std::move(child));
  return true;
}

ProcessGroup::Child* ProcessGroup::Find(bool trainer, int rank) {
  for (Child& c : children_) {
    if (c.trainer == trainer && c.rank == rank) return &c;
  }
  return nullptr;
}

void ProcessGroup::KillAllAt(absl::Time at) {
  if (!kill_at_ || at < *kill_at_) kill_at_ = at;
}

void ProcessGroup::DrainOutput(Child& c) {
  std::vector<std::string> lines;
  bool open = ReadLines(c.process.output_fd(), &c.buffer, &lines);
  for (const std::string& line : lines) Print(absl::StrCat("[", c.label, "] ", line));
  if (!open) {
    c.output_open = false;
    c.process.CloseOutput();
  }
}

void ProcessGroup::Run(const Hooks& hooks) {
  while (true) {
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
    if (!any_running && !outputs_open) return;
    if (kill_at_ && absl::Now() >= *kill_at_) {
      for (Child& c : children_) {
        if (c.process.running() && !c.killed) {
          c.killed = true;
          Print(absl::StrCat(name_, ": stopping ", c.label, " (SIGKILL)"));
          c.process.Signal(SIGKILL);
        }
      }
    }

    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    fds.push_back(pollfd{signal_fd_, POLLIN, 0});
    owners.push_back(nullptr);
    for (Child& c : children_) {
      if (c.output_open) {
        fds.push_back(pollfd{c.process.output_fd(), POLLIN, 0});
        owners.push_back(&c);
      }
    }
    // Signals (SIGCHLD included) wake the poll; the timeout only paces the callers' timed steps.
    poll(fds.data(), fds.size(), 50);
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo != SIGCHLD && hooks.on_signal) hooks.on_signal(info.ssi_signo);
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) DrainOutput(*owners[i]);
    }
  }
}

const ProcessGroup::Child* FirstCause(const std::vector<const ProcessGroup::Child*>& exited) {
  auto severity = [](const ProcessGroup::Child* c) {
    int st = *c->process.status();
    if (WIFSIGNALED(st) && !c->killed && !c->stopped_by_us) return 0;
    int code = Subprocess::ExitCodeOf(st);
    if (code == 0) return 5;
    if (c->killed || c->stopped_by_us) return 4;
    if (code == kPeerFailureExitCode) return 3;
    if (code == kPreemptedExitCode) return 2;
    return 1;
  };
  const ProcessGroup::Child* cause = nullptr;
  for (const ProcessGroup::Child* c : exited) {
    if (!c->process.status() || severity(c) == 5) continue;
    if (cause == nullptr || severity(c) < severity(cause)) cause = c;
  }
  return cause;
}

}  // namespace cohort
