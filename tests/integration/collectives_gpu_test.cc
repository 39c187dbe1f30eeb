// The NCCL backend across processes on a real GPU (ctest label `gpu`): two ranks share the one
// GPU, each with its own NCCL_HOSTID (NCCL then treats them as two hosts and connects them over
// its socket transport), under cohort-run as users run them. Without a GPU (no CUDA runtime, no
// device) every test is skipped, saying why.

#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;

// Why this machine cannot run the test, or "" when it can.
std::string NoGpu() {
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  if (cudart == nullptr) cudart = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
  if (cudart == nullptr) return absl::StrCat("no CUDA runtime: ", dlerror());
  if (dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL) == nullptr) {
    return absl::StrCat("no NCCL: ", dlerror());
  }
  using CountFn = int (*)(int*);
  auto count = reinterpret_cast<CountFn>(dlsym(cudart, "cudaGetDeviceCount"));
  int devices = 0;
  if (count == nullptr || count(&devices) != 0 || devices == 0) return "no GPU is visible";
  return "";
}

// kill -9 of rank 1 while rank 0 has three AllReduceAsync of device memory in flight: each ends
// Aborted naming rank 1, through the failure hook, the watch thread and ncclCommAbort.
TEST(CollectivesGpuTest, TwoRanksOnOneGpu_KillOneWithWorkInFlight_EveryWorkAbortedNamingIt) {
  if (std::string why = NoGpu(); !why.empty()) GTEST_SKIP() << why;
  LauncherRun run =
      StartLauncher({BinPath("cohort-run"), "-n", "2", "--", "sh", "-c",
                     absl::StrCat("NCCL_HOSTID=host$COHORT_PROCESS_ID exec ",
                                  BinPath("test-trainer"), " collective-kill-nccl-async")});
  ASSERT_TRUE(run.ReadUntil("[rank 1] STALLING", absl::Seconds(120)));
  ASSERT_TRUE(run.ReadUntil("[rank 0] IN_COLLECTIVE", absl::Seconds(60)));
  const std::string pid_line = run.Find("[rank 1] PID ");
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(pid_line.substr(pid_line.rfind(' ') + 1), &pid)) << pid_line;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(run.ReadUntil("[rank 0] COLLECTIVE_RETURNED", absl::Seconds(15)));
  const absl::Duration took = absl::Now() - killed;
  EXPECT_LT(took, absl::Seconds(5)) << "NCCL's abort took " << took;
  EXPECT_TRUE(run.Has("3 of 3 failed"));
  for (int seq : {2, 3, 4}) {
    const std::string line = run.Find(absl::StrCat("[rank 0] WORK_RETURNED #", seq, " "));
    EXPECT_THAT(line, HasSubstr("ABORTED")) << seq;
    EXPECT_THAT(line, HasSubstr("rank 1")) << seq;
  }
  run.Finish();
}

// SIGSTOP of rank 1 while it waits inside an NCCL all-reduce (its kernel on the GPU, its host
// thread waiting for it): the watchdog names it within the collective timeout + 1 s of rank 0
// entering, and the job has ended within the timeout + 2 s (docs/faults.md, "Hung ranks").
TEST(CollectivesGpuTest,
     TwoRanksOnOneGpu_OneStoppedInsideAnAllReduce_NamedWithinTheTimeoutPlusOneSecond) {
  if (std::string why = NoGpu(); !why.empty()) GTEST_SKIP() << why;
  LauncherRun run =
      StartLauncher({BinPath("cohort-run"), "-n", "2", "--", "sh", "-c",
                     absl::StrCat("NCCL_HOSTID=host$COHORT_PROCESS_ID exec ",
                                  BinPath("test-trainer"), " collective-stop-inside-nccl")},
                    {{"COHORT_COLLECTIVE_TIMEOUT", "3s"}});
  ASSERT_TRUE(run.ReadUntil("[rank 1] IN_COLLECTIVE", absl::Seconds(120)));
  const std::string pid_line = run.Find("[rank 1] PID ");
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(pid_line.substr(pid_line.rfind(' ') + 1), &pid)) << pid_line;
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(run.ReadUntil("[rank 0] IN_COLLECTIVE", absl::Seconds(30)));
  const absl::Time entered = absl::Now();
  ASSERT_TRUE(run.ReadUntil("the job failed", absl::Seconds(30)));
  EXPECT_LE(absl::Now() - entered, absl::Seconds(3 + 1));
  const std::string line = run.Find("the job failed");
  EXPECT_THAT(line, HasSubstr("cause: collective timeout"));
  EXPECT_THAT(line, HasSubstr("it is stopped (SIGSTOP, a debugger)"));
  const int status = run.Finish();
  EXPECT_LE(absl::Now() - entered, absl::Seconds(3 + 2)) << "cohort-run exited " << status;
  kill(pid, SIGKILL);
}

}  // namespace
}  // namespace cohort::testing
