// cohort-run end to end: real sidecars, real trainers, real signals.

#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/local_job.h"

namespace cohort::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

struct LauncherRun {
  Subprocess process;
  std::vector<std::string> lines;
  std::string buffer;
  bool open = true;

  // Reads output until a line contains `text` (or the output ends / the deadline passes).
  bool ReadUntil(const std::string& text, absl::Duration timeout) {
    absl::Time deadline = absl::Now() + timeout;
    while (open && absl::Now() < deadline) {
      for (const auto& l : lines) {
        if (!text.empty() && l.find(text) != std::string::npos) return true;
      }
      pollfd fd{process.output_fd(), POLLIN, 0};
      poll(&fd, 1, 100);
      std::vector<std::string> got;
      open = ReadLines(process.output_fd(), &buffer, &got);
      for (auto& l : got) {
        std::fprintf(stderr, "%s\n", l.c_str());
        lines.push_back(std::move(l));
      }
    }
    for (const auto& l : lines) {
      if (!text.empty() && l.find(text) != std::string::npos) return true;
    }
    return false;
  }
  int Finish() {
    ReadUntil("", absl::Seconds(60));
    return process.Wait();
  }
  bool Has(const std::string& text) const {
    for (const auto& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

LauncherRun Launch(std::vector<std::string> args) {
  std::vector<std::string> argv = {BinPath("cohort-run")};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<Subprocess> p = Subprocess::Start(Subprocess::Options{argv, {}});
  EXPECT_TRUE(p.ok()) << p.status();
  LauncherRun run;
  run.process = std::move(*p);
  fcntl(run.process.output_fd(), F_SETFL, O_NONBLOCK);
  return run;
}

TEST(CohortRunTest, ThreeRanks_PrefixedOutputAndSuccess) {
  LauncherRun run = Launch({"-n", "3", "--", BinPath("test-trainer"), "rendezvous"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(run.Has(absl::StrCat("[rank ", r, "] RENDEZVOUS rank=", r, " keys=3 count=3")));
  }
  EXPECT_TRUE(run.Has("cohort-run: all 3 processes finished successfully"));
}

TEST(CohortRunTest, StandaloneMode_NoSidecars) {
  LauncherRun run = Launch({"-n", "3", "--standalone", "--", BinPath("test-trainer"), "rendezvous"});
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

}  // namespace
}  // namespace cohort::testing
