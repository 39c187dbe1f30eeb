#include "common/process/watched_process.h"

#include <signal.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cohort {

absl::StatusOr<std::unique_ptr<WatchedProcess>> WatchedProcess::Start(
    std::vector<std::string> argv, std::map<std::string, std::string> env, std::string echo_label) {
  Subprocess::Options options{std::move(argv), std::move(env)};
  options.die_with_parent = true;
  absl::StatusOr<Subprocess> p = Subprocess::Start(options);
  if (!p.ok()) return p.status();
  std::unique_ptr<WatchedProcess> w(new WatchedProcess());
  w->echo_label_ = std::move(echo_label);
  w->process_ = std::move(*p);
  WatchedProcess* self = w.get();
  w->reader_ = std::thread([self] {
    LineReader reader(self->process_.output_fd());
    bool open = true;
    while (open) {
      std::vector<std::string> lines;
      open = reader.Read(&lines);  // Blocks for output.
      absl::MutexLock lock(&self->mu_);
      for (std::string& line : lines) {
        if (!self->echo_label_.empty())
          std::fprintf(stderr, "[%s] %s\n", self->echo_label_.c_str(), line.c_str());
        self->lines_.push_back(std::move(line));
      }
    }
    absl::MutexLock lock(&self->mu_);
    self->closed_ = true;
  });
  return w;
}

WatchedProcess::~WatchedProcess() {
  if (process_.running()) {
    process_.Signal(SIGKILL);
    process_.Wait();
  }
  if (reader_.joinable()) reader_.join();
}

std::string WatchedProcess::FindLocked(const std::string& text) {
  for (const std::string& line : lines_) {
    if (absl::StrContains(line, text)) return line;
  }
  return "";
}

std::string WatchedProcess::WaitForLine(const std::string& text, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  std::string found;
  auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    found = FindLocked(text);
    return !found.empty() || closed_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  return found;
}

bool WatchedProcess::HasLine(const std::string& text) {
  absl::MutexLock lock(&mu_);
  return !FindLocked(text).empty();
}

std::string WatchedProcess::Output() {
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const std::string& line : lines_) absl::StrAppend(&out, line, "\n");
  return out;
}

std::optional<int> WatchedProcess::WaitForExit(absl::Duration timeout) {
  // The reader sees end of file when the process (and every child holding the pipe) is gone.
  {
    absl::MutexLock lock(&mu_);
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&closed), timeout)) return std::nullopt;
  }
  return process_.Wait();
}

}  // namespace cohort
