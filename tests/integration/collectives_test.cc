// libdist collectives in real processes with their sidecars (tests/integration/
// collective_scenarios.cc is the program): every op over shared memory and TCP, then a rank
// killed inside a collective, a rank stalled outside it, and ranks that call different ones.

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

constexpr int kPeerFailureExit = 75;

int ExitCode(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

void StartJob(JobHarness& job, const std::string& scenario,
              std::map<std::string, std::string> env) {
  for (int r = 0; r < job.config().num_processes; ++r) job.StartSidecar(r);
  for (int r = 0; r < job.config().num_processes; ++r) job.StartTrainer(r, scenario, env);
}

std::set<std::string> DevShm() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

void ExpectEveryOpWorks(int n, const std::string& transport, const std::string& described) {
  const std::set<std::string> shm_before = DevShm();
  JobHarness job({.num_processes = n});
  StartJob(job, "collectives", {{"COHORT_HOST_TRANSPORT", transport}});
  for (int r = 0; r < n; ++r) {
    const std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(120))), 0) << label;
    EXPECT_THAT(job.FindLine(label, "RESULT"), HasSubstr("failures=0")) << label;
    EXPECT_THAT(job.FindLine(label, "COMMUNICATOR"), HasSubstr(described)) << label;
    if (described == "shared memory" && n > 1) {
      EXPECT_THAT(job.FindLine(label, "SEGMENTS"), HasSubstr("memfd=yes")) << label;
    }
  }
  // The segments were memfds: nothing was left in /dev/shm (other tests may add their own files
  // meanwhile, so only ours would be named cohort).
  for (const std::string& name : DevShm()) {
    if (!shm_before.contains(name)) EXPECT_EQ(name.find("cohort"), std::string::npos) << name;
  }
  if (n > 1) {
    EXPECT_THAT(job.FindLine("rank 1", "ASSERT_EQUAL_MESSAGE"),
                HasSubstr("params diverged. Expected: int32[3]{1, 2, 3}; got: int32[3]{1, 2, 9}."));
    EXPECT_THAT(job.FindLine(absl::StrCat("rank ", n - 1), "SYNC_MISMATCH_MESSAGE"),
                HasSubstr("SyncGlobalDevices(\"checkpoint-x\") while process 0 called "
                          "SyncGlobalDevices(\"checkpoint-2\")"));
  }
}

TEST(CollectivesTest, ThreeRanksOnOneHost_EveryOpOverSharedMemory) {
  ExpectEveryOpWorks(3, "auto", "shared memory");
}

TEST(CollectivesTest, ThreeRanksForcedTcp_EveryOpOverTcp) { ExpectEveryOpWorks(3, "tcp", "TCP"); }

TEST(CollectivesTest, OneRank_EveryOpIsLocal) { ExpectEveryOpWorks(1, "auto", "shared memory"); }

// Runs `scenario` on 3 ranks over each transport: once rank 2 stalls and the others are inside
// their collective calls, kills rank 2 and gives each other rank 1 s to say COLLECTIVE_RETURNED;
// `check` then reads that rank's lines.
void KillRankTwoWhileTheOthersWait(
    const std::string& scenario,
    const std::function<void(JobHarness& job, const std::string& label)>& check) {
  for (const std::string transport : {"shm", "tcp"}) {
    SCOPED_TRACE(transport);
    JobHarness job({.num_processes = 3});
    StartJob(job, scenario, {{"COHORT_HOST_TRANSPORT", transport}});
    ASSERT_TRUE(job.WaitForLine("rank 2", "STALLING", absl::Seconds(60)));
    for (int r : {0, 1}) {
      ASSERT_TRUE(job.WaitForLine(absl::StrCat("rank ", r), "IN_COLLECTIVE", absl::Seconds(30)));
    }
    job.Process("rank 2").Signal(SIGKILL);
    const absl::Time killed = absl::Now();
    for (int r : {0, 1}) {
      const std::string label = absl::StrCat("rank ", r);
      ASSERT_TRUE(
          job.WaitForLine(label, "COLLECTIVE_RETURNED", absl::Seconds(1) - (absl::Now() - killed)))
          << label << " still waiting in its collective 1 s after rank 2 was killed";
      check(job, label);
    }
  }
}

TEST(CollectivesTest,
     RankKilledWhileOthersWaitInAllReduce_TheyReturnAbortedNamingItWithinOneSecond) {
  KillRankTwoWhileTheOthersWait("collective-kill", [](JobHarness& job, const std::string& label) {
    const std::string line = job.FindLine(label, "COLLECTIVE_RETURNED");
    EXPECT_THAT(line, HasSubstr("ABORTED")) << label;
    EXPECT_THAT(line, HasSubstr("rank 2")) << label;
    EXPECT_THAT(line, HasSubstr("all_reduce #2")) << label;
  });
}

TEST(CollectivesTest,
     RankKilledWithThreeAsyncAllReducesInFlight_EachEndsAbortedNamingItWithinOneSecond) {
  KillRankTwoWhileTheOthersWait(
      "collective-kill-async", [](JobHarness& job, const std::string& label) {
        EXPECT_THAT(job.FindLine(label, "COLLECTIVE_RETURNED"), HasSubstr("3 of 3 failed"));
        for (int seq : {2, 3, 4}) {
          const std::string line = job.FindLine(label, absl::StrCat("WORK_RETURNED #", seq, " "));
          EXPECT_THAT(line, HasSubstr("ABORTED")) << label << " #" << seq;
          EXPECT_THAT(line, HasSubstr("rank 2")) << label << " #" << seq;
          EXPECT_THAT(line, HasSubstr(absl::StrCat("all_reduce #", seq))) << label;
        }
      });
}

// Runs `scenario` on 3 ranks with a 2 s collective timeout while rank 2 stalls outside the
// collective: every rank must exit 75, told by the watchdog's sentence naming rank 2 (and each
// of `also` in it).
void ExpectStalledRankTwoNamedByEveryRank(const std::string& scenario,
                                          const std::vector<std::string>& also = {}) {
  JobHarness job({.num_processes = 3});
  StartJob(job, scenario, {{"COHORT_COLLECTIVE_TIMEOUT", "2s"}});
  for (int r = 0; r < 3; ++r) {
    const std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(30))), kPeerFailureExit) << label;
  }
  // Whichever rank timed out first reported it; every rank was told, naming the stalled one.
  for (int r = 0; r < 3; ++r) {
    const std::string line = job.FindLine(absl::StrCat("rank ", r), "the job failed");
    EXPECT_THAT(line, HasSubstr("process 2 is alive (heartbeat")) << r;
    EXPECT_THAT(line, HasSubstr("but never entered all_reduce #2 (float32 sum, 65536 elements), "
                                "which the other 2 processes entered"))
        << r;
    for (const std::string& text : also) EXPECT_THAT(line, HasSubstr(text)) << r;
    EXPECT_THAT(line, HasSubstr("cause: collective timeout")) << r;
  }
}

// The waiting ranks enqueue three all-reduces and never look at them again: the timeout still
// fails the job with the watchdog's sentence.
TEST(CollectivesTest, AsyncAllReducesNobodyWaitsFor_TimeoutStillNamesTheRankThatNeverCalled) {
  ExpectStalledRankTwoNamedByEveryRank("collective-stall-async");
}

TEST(CollectivesTest, Sigusr2_DumpsTheFlightRecorderWithThePendingCollective) {
  JobHarness job({.num_processes = 2});
  StartJob(job, "collective-kill", {});
  ASSERT_TRUE(job.WaitForLine("rank 1", "STALLING", absl::Seconds(60)));
  ASSERT_TRUE(job.WaitForLine("rank 0", "IN_COLLECTIVE", absl::Seconds(30)));
  // IN_COLLECTIVE comes just before the call: a dump at that moment may not show #2 yet, so
  // ask again until it does (another process's state: polling it is all there is).
  const std::string pending = "[world] all_reduce #2 (float32 sum, 65536 elements): pending for";
  bool dumped = false;
  for (int attempt = 0; attempt < 10 && !dumped; ++attempt) {
    job.Process("rank 0").Signal(SIGUSR2);
    dumped = job.WaitForLine("rank 0", pending, absl::Milliseconds(500));
  }
  EXPECT_TRUE(dumped);
  EXPECT_NE(job.FindLine("rank 0", "cohort flight recorder: process 0"), "");
  EXPECT_NE(job.FindLine("rank 0", "[world] all_reduce #1 (float32 sum, 65536 elements): ok"), "");
  job.Process("rank 1").Signal(SIGKILL);
  EXPECT_TRUE(job.WaitForLine("rank 0", "COLLECTIVE_RETURNED", absl::Seconds(5)));
}

TEST(CollectivesTest, RankStalledOutsideTheCollective_TimeoutNamesItAndEveryRankExits) {
  ExpectStalledRankTwoNamedByEveryRank("collective-stall", {"its last completed collective is #1"});
}

// SIGSTOP freezes the whole program, libdist's threads included; its sidecar keeps heartbeating.
TEST(
    CollectivesTest,
    RankStoppedWithSigstop_WatchdogNamesItInsideOrOutsideTheCollective_WithinTheTimeoutPlusOneSecond) {
  for (const bool inside : {false, true}) {
    SCOPED_TRACE(inside ? "stopped inside the all-reduce" : "stopped outside it");
    JobHarness job({.num_processes = 3, .heartbeat_timeout = "2s"});
    StartJob(job, inside ? "collective-stop-inside" : "collective-stall",
             {{"COHORT_COLLECTIVE_TIMEOUT", "3s"}});
    ASSERT_TRUE(
        job.WaitForLine("rank 2", inside ? "IN_COLLECTIVE" : "STALLING", absl::Seconds(60)));
    job.Process("rank 2").Signal(SIGSTOP);
    // The peers wait in all-reduce #2 since the stop (outside: they entered before it) or since
    // they enter it a second later (inside): the rank is named within the collective timeout +
    // 1 s of that, and they have left within the timeout + 2 s (docs/faults.md).
    absl::Time entered = absl::Now();
    if (inside) {
      ASSERT_TRUE(job.WaitForLine("rank 0", "IN_COLLECTIVE", absl::Seconds(30)));
      entered = absl::Now();
    }
    ASSERT_TRUE(job.WaitForLine("rank 0", "the job failed", absl::Seconds(30)));
    EXPECT_LE(absl::Now() - entered, absl::Seconds(3 + 1));
    for (int r : {0, 1}) {
      const std::string label = absl::StrCat("rank ", r);
      EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(30))), kPeerFailureExit) << label;
      EXPECT_LE(absl::Now() - entered, absl::Seconds(3 + 2)) << label;
      const std::string line = job.FindLine(label, "the job failed");
      EXPECT_THAT(line, HasSubstr("cause: collective timeout")) << label;
      EXPECT_THAT(line, HasSubstr("process 2 is alive (heartbeat")) << label;
      // "stopped reporting" once its report of all-reduce #1 reached the sidecar; "never
      // reported" when SIGSTOP came first (the report goes out asynchronously, moments after
      // the call returned).
      EXPECT_THAT(line,
                  ContainsRegex("but its program (stopped reporting|never reported) progress"))
          << label;
      EXPECT_THAT(line, HasSubstr("it is stopped (SIGSTOP, a debugger)")) << label;
    }
    job.Process("rank 2").Signal(SIGKILL);
  }
}

TEST(CollectivesTest, RanksCallDifferentCollectives_MismatchNamedAndJobFails) {
  JobHarness job({.num_processes = 2});
  StartJob(job, "collective-mismatch", {});
  for (int r = 0; r < 2; ++r) {
    const std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(30))), kPeerFailureExit) << label;
    const std::string line = job.FindLine(label, "the job failed");
    EXPECT_THAT(line, HasSubstr("collective mismatch")) << label;
    EXPECT_THAT(line, HasSubstr("all_reduce #1 (float32 sum, 1000 elements)")) << label;
    EXPECT_THAT(line, HasSubstr("all_gather #1 (float32, 1000 elements)")) << label;
  }
}

}  // namespace
}  // namespace cohort::testing
