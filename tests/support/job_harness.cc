#include "tests/support/job_harness.h"

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
#include "common/env.h"
#include "common/token.h"
#include "gtest/gtest.h"

namespace cohort::testing {

std::string BinPath(const std::string& name) { return absl::StrCat(COHORT_BIN_DIR, "/", name); }

JobHarness::JobHarness(Config config) : config_(std::move(config)) {
  absl::StatusOr<int> port = PickFreePort();
  EXPECT_TRUE(port.ok()) << port.status();
  port_ = port.value_or(0);
  std::string tmpl = ::testing::TempDir() + "/cohort-job-XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  work_dir_ = tmpl;
  token_ = GenerateToken();
  std::ofstream(work_dir_ + "/token") << token_;
  hooks_.on_line = [this](ProcessGroup::Child& c, std::string line) {
    std::fprintf(stderr, "[%s] %s\n", c.label.c_str(), line.c_str());
    lines_[c.label].push_back(std::move(line));
  };
}

JobHarness::~JobHarness() {
  for (ProcessGroup::Child& c : group_.children()) {
    if (c.process.running()) c.process.Signal(SIGKILL);
  }
  group_.children().clear();
  std::error_code ec;
  std::filesystem::remove_all(work_dir_, ec);
}

std::map<std::string, std::string> JobHarness::Env(int rank, bool with_sidecar) const {
  // The contract every process of a job gets (env::JobVariables), as cohort-run gives it: each
  // rank a pod of its own.
  auto timeout = [](const std::string& text) {
    absl::StatusOr<absl::Duration> d = env::ParseDuration(text);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.value_or(absl::ZeroDuration());
  };
  env::JobInputs in;
  in.coordinator_address = absl::StrCat("127.0.0.1:", port_);
  in.token_file = work_dir_ + "/token";
  in.heartbeat_timeout = timeout(config_.heartbeat_timeout);
  in.initialization_timeout = timeout(config_.initialization_timeout);
  in.shutdown_timeout = timeout(config_.shutdown_timeout);
  if (with_sidecar) in.agent_socket = absl::StrCat(work_dir_, "/rank-", rank, ".sock");
  std::map<std::string, std::string> vars;
  for (auto& [name, value] : env::JobVariables(in)) vars[name] = std::move(value);
  const env::ProcessPlacement placement{.pod_index = rank,
                                        .local_index = 0,
                                        .processes_per_pod = 1,
                                        .num_pods = config_.num_processes};
  for (auto& [name, value] : env::ProcessVariables(placement, false)) vars[name] = value;
  if (!with_sidecar) vars[env::kMode] = "standalone";
  return vars;
}

void JobHarness::Start(const std::string& label, std::vector<std::string> argv,
                       std::map<std::string, std::string> env) {
  ASSERT_EQ(group_.Find(label), nullptr) << label << " was started already";
  ProcessGroup::Child child;
  child.label = label;
  ASSERT_NE(group_.Start(std::move(child), Subprocess::Options{std::move(argv), std::move(env)}),
            nullptr)
      << "cannot start " << label;
}

void JobHarness::StartSidecar(int rank, std::map<std::string, std::string> extra_env) {
  std::map<std::string, std::string> env = Env(rank, true);
  for (auto& [k, v] : extra_env) env[k] = v;
  Start(absl::StrCat("sidecar ", rank),
        {BinPath("cohort-sidecar"), "--http-port", "0", "--http-address", "127.0.0.1",
         "--http-port-file", absl::StrCat(work_dir_, "/http-port-", rank)},
        env);
}

void JobHarness::StartTrainer(int rank, const std::string& scenario,
                              std::map<std::string, std::string> extra_env, std::string label) {
  bool with_sidecar = group_.Find(absl::StrCat("sidecar ", rank)) != nullptr;
  std::map<std::string, std::string> env = Env(rank, with_sidecar);
  for (auto& [k, v] : extra_env) env[k] = v;
  Start(label.empty() ? absl::StrCat("rank ", rank) : label, {BinPath("test-trainer"), scenario},
        env);
}

void JobHarness::StartAll(const std::string& scenario) {
  for (int r = 0; r < config_.num_processes; ++r) StartSidecar(r);
  for (int r = 0; r < config_.num_processes; ++r) StartTrainer(r, scenario);
}

void JobHarness::Pump(absl::Duration wait) { group_.Step(hooks_, wait); }

bool JobHarness::WaitForLine(const std::string& label, const std::string& text,
                             absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (!FindLine(label, text).empty()) return true;
    if (absl::Now() >= deadline) return false;
    const ProcessGroup::Child* c = group_.Find(label);
    if (c == nullptr || (!c->output_open && !c->process.running())) {
      return !FindLine(label, text).empty();
    }
    Pump(absl::Milliseconds(50));
  }
}

int JobHarness::WaitForExit(const std::string& label, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  ProcessGroup::Child* c = group_.Find(label);
  if (c == nullptr) {
    ADD_FAILURE() << label << " was never started";
    return -1;
  }
  while (true) {
    if (std::optional<int> st = c->process.status()) {
      // Collect what it printed last.
      while (c->output_open) Pump(absl::Milliseconds(50));
      return *st;
    }
    if (absl::Now() >= deadline) return -1;
    Pump(absl::Milliseconds(20));
  }
}

std::vector<std::string> JobHarness::Lines(const std::string& label) const {
  auto it = lines_.find(label);
  return it == lines_.end() ? std::vector<std::string>{} : it->second;
}

std::string JobHarness::FindLine(const std::string& label, const std::string& text) const {
  for (const std::string& line : Lines(label)) {
    if (line.find(text) != std::string::npos) return line;
  }
  return "";
}

Subprocess& JobHarness::Process(const std::string& label) {
  ProcessGroup::Child* c = group_.Find(label);
  if (c == nullptr) {
    ADD_FAILURE() << label << " was never started";
    static Subprocess none;
    return none;
  }
  return c->process;
}

int JobHarness::http_port(int rank) const {
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
    open = output.Read(&got);
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
  run.output = LineReader(run.process.output_fd());
  return run;
}

}  // namespace cohort::testing
