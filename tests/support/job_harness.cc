#include "tests/integration/local_job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/token.h"
#include "gtest/gtest.h"

namespace cohort::testing {

std::string BinPath(const std::string& name) { return absl::StrCat(COHORT_BIN_DIR, "/", name); }

LocalJob::LocalJob(Config config) : config_(std::move(config)) {
  absl::StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status();
  port_ = port.value_or(0);
  std::string tmpl = ::testing::TempDir() + "/cohort-job-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  work_dir_ = tmpl;
  token_ = GenerateToken();
  std::ofstream(work_dir_ + "/token") << token_;
}

LocalJob::~LocalJob() {
  for (auto& [label, p] : procs_) {
    if (p.process.running()) p.process.Signal(SIGKILL);
  }
  procs_.clear();
  std::error_code ec;
  std::filesystem::remove_all(work_dir_, ec);
}

std::map<std::string, std::string> LocalJob::Env(int rank, bool with_sidecar) const {
  std::map<std::string, std::string> env = {
      {"COHORT_COORDINATOR_ADDRESS", absl::StrCat("127.0.0.1:", port_)},
      {"COHORT_NUM_PROCESSES", absl::StrCat(config_.num_processes)},
      {"COHORT_PROCESS_ID", absl::StrCat(rank)},
      {"COHORT_TOKEN_FILE", work_dir_ + "/token"},
      {"COHORT_HEARTBEAT_TIMEOUT", config_.heartbeat_timeout},
      {"COHORT_INITIALIZATION_TIMEOUT", config_.initialization_timeout},
      {"COHORT_SHUTDOWN_TIMEOUT", config_.shutdown_timeout},
  };
  if (with_sidecar) {
    env["COHORT_AGENT_SOCKET"] = absl::StrCat(work_dir_, "/rank-", rank, ".sock");
  } else {
    env["COHORT_MODE"] = "standalone";
  }
  return env;
}

void LocalJob::Start(const std::string& label, std::vector<std::string> argv,
                     std::map<std::string, std::string> env) {
  absl::StatusOr<Subprocess> p = Subprocess::Start(Subprocess::Options{std::move(argv), env});
  ASSERT_TRUE(p.ok()) << p.status();
  fcntl(p->output_fd(), F_SETFL, O_NONBLOCK);
  procs_[label].process = std::move(*p);
}

void LocalJob::StartSidecar(int rank, std::map<std::string, std::string> extra_env) {
  std::map<std::string, std::string> env = Env(rank, true);
  for (auto& [k, v] : extra_env) env[k] = v;
  Start(absl::StrCat("sidecar ", rank),
        {BinPath("cohort-sidecar"), "--http-port", "0", "--http-address", "127.0.0.1",
         "--http-port-file", absl::StrCat(work_dir_, "/http-port-", rank)},
        env);
}

void LocalJob::StartTrainer(int rank, const std::string& scenario,
                            std::map<std::string, std::string> extra_env, std::string label) {
  bool with_sidecar = procs_.count(absl::StrCat("sidecar ", rank)) > 0;
  std::map<std::string, std::string> env = Env(rank, with_sidecar);
  for (auto& [k, v] : extra_env) env[k] = v;
  Start(label.empty() ? absl::StrCat("rank ", rank) : label, {BinPath("test-trainer"), scenario},
        env);
}

void LocalJob::StartAll(const std::string& scenario) {
  for (int r = 0; r < config_.num_processes; ++r) StartSidecar(r);
  for (int r = 0; r < config_.num_processes; ++r) StartTrainer(r, scenario);
}

void LocalJob::Pump(absl::Duration wait) {
  std::vector<pollfd> fds;
  std::vector<Proc*> owners;
  std::vector<std::string> labels;
  for (auto& [label, p] : procs_) {
    if (!p.open) continue;
    fds.push_back(pollfd{p.process.output_fd(), POLLIN, 0});
    owners.push_back(&p);
    labels.push_back(label);
  }
  if (fds.empty()) return;
  poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(wait)));
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    std::vector<std::string> lines;
    bool open = ReadLines(fds[i].fd, &owners[i]->buffer, &lines);
    for (auto& line : lines) {
      std::fprintf(stderr, "[%s] %s\n", labels[i].c_str(), line.c_str());
      owners[i]->lines.push_back(std::move(line));
    }
    if (!open) {
      owners[i]->open = false;
      owners[i]->process.CloseOutput();
    }
  }
}

bool LocalJob::WaitForLine(const std::string& label, const std::string& text,
                           absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (!FindLine(label, text).empty()) return true;
    if (absl::Now() >= deadline) return false;
    auto it = procs_.find(label);
    if (it == procs_.end() || (!it->second.open && !it->second.process.running())) {
      return !FindLine(label, text).empty();
    }
    Pump(absl::Milliseconds(50));
  }
}

int LocalJob::WaitForExit(const std::string& label, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  Proc& p = procs_.at(label);
  while (true) {
    if (std::optional<int> st = p.process.Poll()) {
      // Collect what it printed last.
      while (p.open) Pump(absl::Milliseconds(50));
      return *st;
    }
    if (absl::Now() >= deadline) return -1;
    Pump(absl::Milliseconds(20));
  }
}

std::vector<std::string> LocalJob::Lines(const std::string& label) const {
  auto it = procs_.find(label);
  return it == procs_.end() ? std::vector<std::string>{} : it->second.lines;
}

std::string LocalJob::FindLine(const std::string& label, const std::string& text) const {
  for (const std::string& line : Lines(label)) {
    if (line.find(text) != std::string::npos) return line;
  }
  return "";
}

Subprocess& LocalJob::Process(const std::string& label) { return procs_.at(label).process; }

int LocalJob::http_port(int rank) const {
  std::ifstream in(absl::StrCat(work_dir_, "/http-port-", rank));
  int port = 0;
  in >> port;
  return port;
}

bool LauncherRun::ReadUntil(const std::string& text, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (open && absl::Now() < deadline) {
    if (!text.empty() && Has(text)) return true;
    pollfd fd{process.output_fd(), POLLIN, 0};
    poll(&fd, 1, 100);
    std::vector<std::string> got;
    open = ReadLines(process.output_fd(), &buffer, &got);
    for (auto& l : got) {
      std::fprintf(stderr, "%s\n", l.c_str());
      lines.push_back(std::move(l));
    }
  }
  return !text.empty() && Has(text);
}

int LauncherRun::Finish() {
  ReadUntil("", absl::Seconds(60));
  return process.Wait();
}

bool LauncherRun::Has(const std::string& text) const { return !Find(text).empty(); }

std::string LauncherRun::Find(const std::string& text) const {
  for (const auto& l : lines) {
    if (l.find(text) != std::string::npos) return l;
  }
  return "";
}

LauncherRun Launch(std::vector<std::string> args, std::map<std::string, std::string> env) {
  std::vector<std::string> argv = {BinPath("cohort-run")};
  argv.insert(argv.end(), args.begin(), args.end());
  return StartLauncher(std::move(argv), std::move(env));
}

LauncherRun StartLauncher(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  absl::StatusOr<Subprocess> p = Subprocess::Start(Subprocess::Options{argv, std::move(env)});
  EXPECT_TRUE(p.ok()) << p.status();
  LauncherRun run;
  if (!p.ok()) {
    run.open = false;
    return run;
  }
  run.process = std::move(*p);
  fcntl(run.process.output_fd(), F_SETFL, O_NONBLOCK);
  return run;
}

}  // namespace cohort::testing
