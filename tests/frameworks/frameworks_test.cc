// Unmodified JAX programs (tests/frameworks/jax_program.py, jax from PyPI, CPU) under cohort-run:
// every process dials rank 0's sidecar, which speaks XLA's coordination protocol (docs/jax.md).
// Each test runs for every supported jaxlib generation that this machine can install: jax 0.10.2
// (xla.coordination) and 0.9.2 (tensorflow.CoordinationService) on Python 3.11, and 0.12.0.1 where
// a Python >= 3.12 exists.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/python_environment.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

struct JaxVersion {
  std::string jax;       // The pinned PyPI version.
  std::string protocol;  // The generation of XLA's protocol it speaks, as metrics label it.
  std::string python;    // The interpreter the environment is made with.
};

std::string ProgramPath() {
  return absl::StrCat(COHORT_SOURCE_DIR, "/tests/frameworks/jax_program.py");
}

// A Python >= 3.12 interpreter (jax 0.11+ needs one): python3.13 or python3.12 in PATH, else
// one that pyenv installed; "" when there is none.
std::string FindPython312() {
  std::vector<std::string> candidates = {"python3.13", "python3.12"};
  const char* pyenv_root = getenv("PYENV_ROOT");
  const char* home = getenv("HOME");
  std::filesystem::path versions =
      pyenv_root != nullptr
          ? std::filesystem::path(pyenv_root) / "versions"
          : std::filesystem::path(home != nullptr ? home : "/root") / ".pyenv/versions";
  std::error_code ec;
  std::vector<std::string> installed;
  for (const auto& entry : std::filesystem::directory_iterator(versions, ec)) {
    installed.push_back((entry.path() / "bin/python3").string());
  }
  std::sort(installed.rbegin(), installed.rend());  // Newest first.
  candidates.insert(candidates.end(), installed.begin(), installed.end());
  for (const std::string& python : candidates) {
    absl::StatusOr<Subprocess> p = Subprocess::Start(Subprocess::Options{
        {python, "-c", "import sys, venv; sys.exit(sys.version_info < (3, 12))"}, {}});
    if (p.ok() && Subprocess::ExitCodeOf(p->Wait()) == 0) return python;
  }
  return "";
}

class JaxProgramTest : public ::testing::TestWithParam<JaxVersion> {
 protected:
  void SetUp() override {
    const JaxVersion& v = GetParam();
    if (v.python.empty()) {
      GTEST_SKIP() << "jax " << v.jax << " needs Python >= 3.12 (its wheels say "
                   << "Requires-Python >=3.12), and this machine has none (in PATH or under pyenv)";
    }
    venv_ = JaxEnvironment(v.jax, v.python);
    if (HasFailure()) return;
    if (venv_.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax " << v.jax;
    // Short: the sidecars' Unix sockets live under it.
    std::string tmpl = "/tmp/cohort-jax-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    work_dir_ = tmpl;
  }

  LauncherRun Run(const std::string& mode, std::vector<std::string> wrapper = {}) {
    std::vector<std::string> args = {"-n", "2", "--work-dir", work_dir_, "--"};
    args.insert(args.end(), wrapper.begin(), wrapper.end());
    args.push_back(absl::StrCat(venv_, "/bin/python"));
    args.push_back(ProgramPath());
    args.push_back(mode);
    return Launch(
        args, {{"JAX_PLATFORMS", "cpu"},
               {"COHORT_TEST_SIDECAR_PORT_FILE", absl::StrCat(work_dir_, "/rank-0/http-port")}});
  }

  // The pid of `rank`'s process whose command line contains `text`, or 0.
  static pid_t FindProcess(int rank, const std::string& text) {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::string name = entry.path().filename();
      if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
      std::string cmdline = ReadFileOrEmpty(entry.path() / "cmdline");
      std::string environ = ReadFileOrEmpty(entry.path() / "environ");
      if (cmdline.find(text) == std::string::npos) continue;
      if (environ.find(absl::StrCat(std::string(1, '\0'), "COHORT_PROCESS_ID=", rank,
                                    std::string(1, '\0'))) == std::string::npos) {
        continue;
      }
      return std::stoi(name);
    }
    return 0;
  }
  static std::string ReadFileOrEmpty(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string protocol() const { return GetParam().protocol; }

  // Both processes returned true from reached_preemption_sync_point at the same step.
  static void ExpectOneSyncStep(const LauncherRun& run) {
    std::string step0 = run.Find("[rank 0] JAX process 0 preemption sync point at step");
    std::string step1 = run.Find("[rank 1] JAX process 1 preemption sync point at step");
    ASSERT_FALSE(step0.empty());
    ASSERT_FALSE(step1.empty());
    EXPECT_EQ(step0.substr(step0.find("at step")), step1.substr(step1.find("at step")));
  }

  void TearDown() override {
    if (!work_dir_.empty()) std::filesystem::remove_all(work_dir_);
  }

  std::string venv_;
  std::string work_dir_;
};

void PrintTo(const JaxVersion& v, std::ostream* os) {
  *os << "jax " << v.jax << " on " << (v.python.empty() ? "(no suitable python)" : v.python);
}

TEST_P(JaxProgramTest, TwoRanks_EveryCallWorksAndRankZerosSidecarServedBothTasks) {
  LauncherRun run = Run("clean");
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(
        run.Has(absl::StrCat("[rank ", rank, "] JAX process ", rank,
                             " of 2: kv, barrier, allgather, broadcast and live nodes ok")));
  }
  // Both JAX tasks registered with, and shut down through, the sidecar's service: neither talked
  // to the service JAX's process 0 started on its own (its registration barrier needs both).
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(run.Has(absl::StrCat("METRIC cohort_task_state{rank=\"", rank,
                                     "\",state=\"shut_down\",protocol=\"", protocol(), "\"} 1")))
        << "rank " << rank;
  }
  EXPECT_TRUE(run.Has(
      absl::StrCat("METRIC cohort_jax_rpcs_total{code=\"ok\",method=\"RegisterTask\",protocol=\"",
                   protocol(), "\"} 2")));
  EXPECT_TRUE(run.Has(
      absl::StrCat("METRIC cohort_jax_rpcs_total{code=\"ok\",method=\"ShutdownTask\",protocol=\"",
                   protocol(), "\"} 2")));
}

TEST_P(JaxProgramTest, OneRankKilled_TheOtherIsTerminatedWithinTwoSecondsNamingIt) {
  LauncherRun run = Run("wait");
  ASSERT_TRUE(run.ReadUntil("[rank 0] JAX process 0 ready", absl::Seconds(90)));
  ASSERT_TRUE(run.ReadUntil("[rank 1] JAX process 1 ready", absl::Seconds(30)));
  pid_t victim = FindProcess(1, "jax_program.py");
  ASSERT_NE(victim, 0);
  absl::Time killed = absl::Now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(run.ReadUntil("[rank 0] F", absl::Seconds(10)));  // JAX's fatal log line.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  int status = run.Finish();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string fatal = run.Find("Terminating process because the JAX distributed service detected");
  // Named by whichever noticed first: the service (the process's poll broke) or cohort-run (its
  // child died), in the same sentence.
  EXPECT_THAT(fatal, HasSubstr("rank 1 (JAX process at 127.0.0.1:")) << fatal;
  EXPECT_THAT(fatal, HasSubstr("failed because its process died")) << fatal;
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 1 killed by signal 9"));
  EXPECT_TRUE(run.Has("cohort-run: rank 0 killed by signal 6"));
}

// JAX's own SIGTERM handler sets the notice key in Cohort's store; every process then agrees on
// a step through Cohort's barrier.
TEST_P(JaxProgramTest, SigtermToOneProcess_BothReachThePreemptionSyncPointAtTheSameStep) {
  LauncherRun run = Run("preemption");
  ASSERT_TRUE(run.ReadUntil("[rank 0] JAX process 0 ready", absl::Seconds(90)));
  ASSERT_TRUE(run.ReadUntil("[rank 1] JAX process 1 ready", absl::Seconds(30)));
  pid_t trainer = FindProcess(1, "jax_program.py");
  ASSERT_NE(trainer, 0);
  ASSERT_EQ(kill(trainer, SIGTERM), 0);
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectOneSyncStep(run);
}

// A rank's sidecar told of a preemption (SIGTERM; under cohort-run the same as the operator's
// notice) reports it for the JAX process that holds the rank; the service turns it into JAX's
// notice key.
TEST_P(JaxProgramTest, SigtermToASidecar_BothReachThePreemptionSyncPointAtTheSameStep) {
  LauncherRun run = Run("preemption");
  ASSERT_TRUE(run.ReadUntil("[rank 0] JAX process 0 ready", absl::Seconds(90)));
  ASSERT_TRUE(run.ReadUntil("[rank 1] JAX process 1 ready", absl::Seconds(30)));
  pid_t sidecar = FindProcess(1, "cohort-sidecar");
  ASSERT_NE(sidecar, 0);
  ASSERT_EQ(kill(sidecar, SIGTERM), 0);
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectOneSyncStep(run);
}

// cohort-run forwards its SIGTERM to every rank's process: JAX's own handlers take it.
TEST_P(JaxProgramTest, SigtermToCohortRun_BothReachThePreemptionSyncPointAtTheSameStep) {
  LauncherRun run = Run("preemption");
  ASSERT_TRUE(run.ReadUntil("[rank 0] JAX process 0 ready", absl::Seconds(90)));
  ASSERT_TRUE(run.ReadUntil("[rank 1] JAX process 1 ready", absl::Seconds(30)));
  ASSERT_EQ(kill(run.process.pid(), SIGTERM), 0);
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ExpectOneSyncStep(run);
}

// Without JAX_COORDINATOR_BIND_ADDRESS, JAX's process 0 tries to host its own service on the
// sidecar's port; the sidecar refuses to share it, so the job fails at once, naming rank 0 and
// the port, instead of splitting into two services and hanging.
TEST_P(JaxProgramTest, WithoutTheBindAddress_TheJobFailsFastNamingRankZero) {
  absl::Time start = absl::Now();
  LauncherRun run = Run("clean", {"env", "-u", "JAX_COORDINATOR_BIND_ADDRESS"});
  int status = run.Finish();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(50));  // JAX's own init timeout here is 60 s.
  EXPECT_TRUE(run.Has("[rank 0]") && run.Has("Failed to add port to server"));
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 0"));
}

TEST(TorchProgramTest, DdpWithNoArguments_TrainsOnTwoRanksUnderCohortRun) {
  std::string venv = TorchEnvironment();
  if (HasFailure()) return;
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no torch";
  LauncherRun run =
      Launch({"-n", "2", "--", absl::StrCat(venv, "/bin/python"),
              absl::StrCat(COHORT_SOURCE_DIR, "/tests/frameworks/torch_ddp_program.py")});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(run.Has(absl::StrCat("[rank ", rank, "] torch rank ", rank,
                                     ": 5 DDP steps, parameters equal on every rank")));
  }
}

INSTANTIATE_TEST_SUITE_P(Jaxlib, JaxProgramTest,
                         ::testing::Values(JaxVersion{"0.10.2", "xla_coordination", "python3"},
                                           JaxVersion{"0.9.2", "tensorflow", "python3"},
                                           JaxVersion{"0.12.0.1", "xla_coordination",
                                                      FindPython312()}),
                         [](const ::testing::TestParamInfo<JaxVersion>& info) {
                           std::string name = absl::StrCat("jax_", info.param.jax);
                           for (char& c : name) {
                             if (c == '.') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace cohort::testing
