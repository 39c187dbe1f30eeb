// cohort-run end to end: real sidecars, real trainers, real signals.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(CohortRunTest, ThreeRanks_PrefixedOutputAndSuccess) {
  LauncherRun run = Launch({"-n", "3", "--", BinPath("test-trainer"), "rendezvous"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(run.Has(absl::StrCat("[rank ", r, "] RENDEZVOUS rank=", r, " keys=3 count=3")));
  }
  EXPECT_TRUE(run.Has("cohort-run: all 3 processes finished successfully"));
}

TEST(CohortRunTest, ProcessesPerPod_PodsOfTwoShareASidecarWithThePodsEnvironment) {
  LauncherRun run =
      Launch({"-n", "4", "--processes-per-pod", "2", "--", BinPath("test-trainer"), "rendezvous"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("2 pods of 2 with a sidecar each"));
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(run.Has(
        absl::StrCat("[rank ", r, "] RENDEZVOUS rank=", r, " keys=4 count=4 local=", r % 2, "/2")));
  }
}

// nproc counts the CPUs a process may run on: bound, two ranks share this machine's CPUs out
// between them (one each on a 1-CPU machine); unbound, each may use them all.
TEST(CohortRunTest, CpuBinding_RanksShareTheCpusOutByDefault_NoneLeavesEachAllOfThem) {
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int allowed = CPU_COUNT(&set);
  ASSERT_GE(cpus, 1);
  for (const std::string bind : {"", "none"}) {
    SCOPED_TRACE(bind.empty() ? "default" : bind);
    std::vector<std::string> args = {"-n", "2"};
    if (!bind.empty()) args.insert(args.end(), {"--cpu-bind", bind});
    args.insert(args.end(), {"--", "sh", "-c", "echo NPROC $(nproc)"});
    LauncherRun run = Launch(args);
    int status = run.Finish();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    int total = 0;
    for (int r = 0; r < 2; ++r) {
      int n = 0;
      const std::string prefix = absl::StrCat("[rank ", r, "] NPROC ");
      const std::string line = run.Find(prefix);
      ASSERT_NE(line, "") << "rank " << r;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.find(prefix) + prefix.size()), &n)) << line;
      ASSERT_GT(n, 0) << "rank " << r;
      if (bind == "none") EXPECT_EQ(n, allowed) << "rank " << r;
      total += n;
    }
    if (bind.empty()) EXPECT_EQ(total, allowed >= 2 ? allowed : 2);
  }
}

TEST(CohortRunTest, CpuBindingUnknownValue_RefusedNamingTheChoices) {
  LauncherRun run = Launch({"-n", "1", "--cpu-bind", "sockets", "--", "/bin/true"});
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(run.Has("--cpu-bind: COHORT_CPU_BIND='sockets' is not one of none, cores"));
}

TEST(CohortRunTest, ProcessesPerPodNotADivisor_ClearError) {
  LauncherRun run = Launch({"-n", "3", "--processes-per-pod", "2", "--", "/bin/true"});
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(run.Has("--processes-per-pod 2 must be a positive divisor of -n 3"));
}

TEST(CohortRunTest, StandaloneMode_NoSidecars) {
  LauncherRun run =
      Launch({"-n", "3", "--standalone", "--", BinPath("test-trainer"), "rendezvous"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("[rank 2] RENDEZVOUS rank=2 keys=3 count=3"));
  EXPECT_FALSE(run.Has("[sidecar"));
}

TEST(CohortRunTest, ProgramWithoutLibdist_SidecarsStopCleanly) {
  // Its sidecars never see a trainer attach; they must stop on cohort-run's SIGTERM rather than
  // be killed after the grace period.
  LauncherRun run = Launch({"-n", "2", "--", "/bin/sh", "-c",
                            "echo env $COHORT_PROCESS_ID/$COHORT_NUM_PROCESSES $JAX_PROCESS_ID"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("[rank 0] env 0/2 0"));
  EXPECT_TRUE(run.Has("[rank 1] env 1/2 1"));
  EXPECT_FALSE(run.Has("SIGKILL"));
}

TEST(CohortRunTest, OneRankFails_EverythingStopsWithItsExitCode) {
  LauncherRun run = Launch({"-n", "3", "--", BinPath("test-trainer"), "rank1-exits-7"});
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 1 exit code 7"));
  EXPECT_TRUE(run.Has("[rank 0] cohort: the job failed: rank 1"));
}

TEST(CohortRunTest, Sigterm_ForwardedAsPreemptionNotice) {
  LauncherRun run = Launch({"-n", "2", "--", BinPath("test-trainer"), "preempt"});
  ASSERT_TRUE(run.ReadUntil("[rank 1] TRAINING", absl::Seconds(60)));
  ASSERT_TRUE(run.ReadUntil("[rank 0] TRAINING", absl::Seconds(60)));
  kill(run.process.pid(), SIGTERM);
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("forwarding SIGTERM to every rank as a preemption notice"));
  EXPECT_TRUE(run.Has("[rank 0] SYNC rank=0"));
  EXPECT_TRUE(run.Has("[rank 1] SYNC rank=1"));
}

// The environment of process `pid`, one "NAME=value" each.
std::vector<std::string> EnvironOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return absl::StrSplit(env, '\0', absl::SkipEmpty());
}

bool HasVariable(pid_t pid, const std::string& assignment) {
  std::vector<std::string> env = EnvironOf(pid);
  return std::find(env.begin(), env.end(), assignment) != env.end();
}

// The processes of a cohort-run job: those whose environment names its token file.
std::vector<pid_t> JobProcesses(const std::string& work_dir) {
  std::vector<pid_t> pids;
  const std::string needle = absl::StrCat("COHORT_TOKEN_FILE=", work_dir, "/token");
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    if (HasVariable(pid, needle)) pids.push_back(pid);
  }
  return pids;
}

// Kills `victim` (SIGKILL) and reads the launcher's output to its end, which must come within
// 2 s; returns the launcher's wait status.
int KillAndReadToTheEnd(LauncherRun& run, pid_t victim) {
  kill(victim, SIGKILL);
  absl::Time killed = absl::Now();
  int status = run.Finish();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  return status;
}

std::string FreshWorkDir(const std::string& name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     absl::StrCat("cohort-run-test-", name, "-", getpid()))
                        .string();
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CohortRunTest, ProcessesPerPod_OneProcessKilled_EveryOtherRankToldNamingItsPod) {
  std::string work_dir = FreshWorkDir("ppp-kill");
  LauncherRun run = Launch({"-n", "4", "--processes-per-pod", "2", "--grace-period", "60s",
                            "--work-dir", work_dir, "--", BinPath("test-trainer"), "wait"});
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(run.ReadUntil(absl::StrCat("[rank ", r, "] WAITING"), absl::Seconds(60)));
  }
  // Rank 3: local process 1 of pod 1, whose sidecar also serves rank 2.
  std::optional<pid_t> victim;
  for (pid_t pid : JobProcesses(work_dir)) {
    if (HasVariable(pid, "COHORT_PROCESS_ID=3")) victim = pid;
  }
  ASSERT_TRUE(victim.has_value());
  int status = KillAndReadToTheEnd(run, *victim);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL);
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 3 killed by signal 9"));
  for (int r : {0, 1, 2}) {
    bool told = false;
    for (const std::string& l : run.lines) {
      told |= absl::StartsWith(l, absl::StrCat("[rank ", r, "] ")) &&
              absl::StrContains(l, "rank 3 (pod local-1, local process 1, pid ");
    }
    EXPECT_TRUE(told) << "rank " << r << " was not told that rank 3 died";
  }
  EXPECT_FALSE(run.Has("SIGKILL)"));  // Nobody had to be killed: every rank followed by itself.
}

TEST(CohortRunTest, RankDiesBeforeRegistering_JobFailsAtOnceNamingIt) {
  // Rank 1 exits before it ever calls initialize(); the others wait there. A grace period of a
  // minute shows that they stop by themselves: cohort-run told the job.
  absl::Time start = absl::Now();
  LauncherRun run = Launch({"-n", "3", "--grace-period", "60s", "--", "/bin/sh", "-c",
                            absl::StrCat("test \"$COHORT_PROCESS_ID\" = 1 && exit 9; exec ",
                                         BinPath("test-trainer"), " wait")});
  int status = run.Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 9);
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 1 exit code 9"));
  for (int r : {0, 2}) {
    bool told = false;
    for (const std::string& l : run.lines) {
      told |= absl::StartsWith(l, absl::StrCat("[rank ", r, "] ")) &&
              absl::StrContains(l, "rank 1 failed because its process died");
    }
    EXPECT_TRUE(told) << "rank " << r << " was not told that rank 1 died";
  }
  EXPECT_FALSE(run.Has("SIGKILL"));
}

// The preemption notice cohort-run forwards, reaching a rank before its program could take it
// (no handler yet), is a preemption (exit 76), not a rank killed by signal 15.
TEST(CohortRunTest, ForwardedSigtermBeforeAHandler_APreemptionNotAFailure) {
  LauncherRun run = Launch(
      {"-n", "2", "--grace-period", "5s", "--", "/bin/sh", "-c", "echo ready; exec sleep 60"});
  ASSERT_TRUE(run.ReadUntil("[rank 0] ready", absl::Seconds(30)));
  ASSERT_TRUE(run.ReadUntil("[rank 1] ready", absl::Seconds(30)));
  kill(run.process.pid(), SIGTERM);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 76);
  EXPECT_TRUE(run.Has("cohort-run: PREEMPTED: rank "));
  EXPECT_TRUE(run.Has(
      "exit code 76 (the preemption notice, SIGTERM, ended it before its program could take it)"));
  EXPECT_FALSE(run.Has("killed by signal 15"));
}

TEST(CohortRunTest, RankKilledBySigtermBeforeInitialize_JobFailsNamingIt) {
  LauncherRun run = Launch({"-n", "2", "--grace-period", "60s", "--", "/bin/sh", "-c",
                            absl::StrCat("test \"$COHORT_PROCESS_ID\" = 0 && kill -TERM $$; exec ",
                                         BinPath("test-trainer"), " wait")});
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(run.Has("cohort-run: FAILED: rank 0 killed by signal 15"));
  EXPECT_FALSE(run.Has("SIGKILL"));
}

TEST(CohortRunTest, SidecarKilledAtStartup_JobEndsWithinTwoSecondsNamingIt) {
  std::string work_dir = FreshWorkDir("sidecar-start");
  LauncherRun run = Launch({"-n", "4", "--grace-period", "60s", "--work-dir", work_dir, "--",
                            BinPath("test-trainer"), "wait"});
  // As early as the process exists: before its agent socket, before any registration.
  std::optional<pid_t> victim;
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!victim && absl::Now() < deadline) {
    for (pid_t pid : JobProcesses(work_dir)) {
      std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (absl::StrContains(cmd, "cohort-sidecar") && absl::StrContains(cmd, "rank-2/"))
        victim = pid;
    }
  }
  ASSERT_TRUE(victim.has_value());
  int status = KillAndReadToTheEnd(run, *victim);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL);
  EXPECT_TRUE(run.Has("cohort-run: FAILED: sidecar 2 killed by signal 9"));
  EXPECT_THAT(JobProcesses(work_dir), ::testing::IsEmpty());
}

TEST(CohortRunTest, LauncherKilled_NoProcessOfTheJobOutlivesIt) {
  std::string work_dir = FreshWorkDir("launcher-killed");
  LauncherRun run =
      Launch({"-n", "3", "--work-dir", work_dir, "--", BinPath("test-trainer"), "wait"});
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(run.ReadUntil(absl::StrCat("[rank ", r, "] WAITING"), absl::Seconds(60)));
  }
  ASSERT_EQ(JobProcesses(work_dir).size(), 6u);
  run.process.Signal(SIGKILL);
  run.process.Wait();
  absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (!JobProcesses(work_dir).empty() && absl::Now() < deadline) usleep(10000);
  EXPECT_THAT(JobProcesses(work_dir), ::testing::IsEmpty());
  std::filesystem::remove_all(work_dir);
}

}  // namespace
}  // namespace cohort::testing
