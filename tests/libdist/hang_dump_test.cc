// A libdist process's own evidence of a hang: every thread's native frames, taken by the process
// itself with a real-time signal (no debugger, no SYS_PTRACE), and the files the sidecar waits for.

#include "libdist/src/hang_dump.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// How long each thread gets to answer: generous, so that a loaded machine (ctest -j) does not make
// a thread that answers late look like one that cannot (the default is 1 s).
constexpr absl::Duration kPerThread = absl::Seconds(10);

// A thread parked in a function of its own, until `release`.
class ParkedThread {
 public:
  explicit ParkedThread(const char* name, bool block_signals = false) {
    thread_ = std::thread([this, name, block_signals] {
      pthread_setname_np(pthread_self(), name);
      if (block_signals) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
      }
      ParkedInsideAKnownFunction(&parked_, &release_);
    });
    parked_.WaitForNotification();
  }
  ~ParkedThread() {
    release_.Notify();
    thread_.join();
  }

 private:
  [[gnu::noinline]] static void ParkedInsideAKnownFunction(absl::Notification* parked,
                                                           absl::Notification* release) {
    parked->Notify();
    release->WaitForNotification();
    asm volatile("");  // Not a tail call: this frame stays on the stack.
  }

  absl::Notification parked_;
  absl::Notification release_;
  std::thread thread_;
};

TEST(HangDumpTest, ThreadStacks_EveryThreadByNameWithItsFrames) {
  ParkedThread parked("parked-here");
  const std::string stacks = ThreadStacks(kPerThread);
  EXPECT_THAT(stacks, HasSubstr(absl::StrCat("native stacks of process ", getpid())));
  EXPECT_THAT(stacks, HasSubstr("(parked-here)"));
  EXPECT_THAT(stacks, HasSubstr("ParkedInsideAKnownFunction"))
      << "the parked thread's own frame, symbolized";
  EXPECT_THAT(stacks, HasSubstr(", the main thread")) << stacks;
  EXPECT_THAT(stacks, Not(HasSubstr("no answer within"))) << stacks;
}

// A trainer's worth of threads (gRPC's, the backends', the program's): every one answers. Prints
// how long the dump took (docs/benchmarks.md, "Hang detection"; not asserted).
TEST(HangDumpTest, ThreadStacks_TwentyFourThreads_EveryOneWithItsFrames) {
  std::vector<std::unique_ptr<ParkedThread>> threads;
  for (int i = 0; i < 23; ++i) threads.push_back(std::make_unique<ParkedThread>("parked-here"));
  for (int run = 0; run < 7; ++run) {
    const absl::Time start = absl::Now();
    const std::string stacks = ThreadStacks(kPerThread);
    std::cout << "dump " << run << " of 24 threads: " << absl::FormatDuration(absl::Now() - start)
              << "\n";
    size_t frames = 0;
    for (size_t at = stacks.find("ParkedInsideAKnownFunction"); at != std::string::npos;
         at = stacks.find("ParkedInsideAKnownFunction", at + 1)) {
      ++frames;
    }
    EXPECT_EQ(frames, 23u) << stacks;
  }
}

TEST(HangDumpTest, ThreadStacks_AThreadThatBlocksSignals_ListedWithoutFramesAtOnce) {
  ParkedThread deaf("deaf-thread", /*block_signals=*/true);
  const std::string stacks = ThreadStacks(absl::Seconds(30));
  const size_t at = stacks.find("(deaf-thread)");
  ASSERT_NE(at, std::string::npos) << stacks;
  EXPECT_THAT(stacks.substr(at, 200), HasSubstr(": no frames)")) << stacks;
}

int g_program_signals = 0;
void ProgramsOwnHandler(int) { ++g_program_signals; }

// Also when the program takes the signal the last dump used: the next dump picks another.
TEST(HangDumpTest, ThreadStacks_ARealTimeSignalTheProgramHandles_IsLeftToIt) {
  ThreadStacks(kPerThread);
  // Every real-time signal the dump might pick belongs to the program now, but one.
  struct sigaction own {};
  own.sa_handler = ProgramsOwnHandler;
  sigemptyset(&own.sa_mask);
  for (int s = SIGRTMIN + 3; s <= SIGRTMAX - 2; ++s) ASSERT_EQ(sigaction(s, &own, nullptr), 0);
  ParkedThread parked("parked-here");

  const std::string stacks = ThreadStacks(kPerThread);
  EXPECT_THAT(stacks, HasSubstr("ParkedInsideAKnownFunction"))
      << "the one signal left (SIGRTMIN+2)";
  EXPECT_EQ(g_program_signals, 0);
  for (int s = SIGRTMIN + 3; s <= SIGRTMAX - 2; ++s) {
    struct sigaction now {};
    ASSERT_EQ(sigaction(s, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, &ProgramsOwnHandler)
        << "signal " << s << " was taken from the program";
  }
}

TEST(HangDumpTest, WriteHangDump_IntoAMissingDirectory_SaysWhichFile) {
  const std::string missing = absl::StrCat(testing::TempDir(), "/no-such-dir-", getpid());
  absl::Status s = WriteHangDump(7, missing);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(missing + "/stacks.txt"));
}

}  // namespace
}  // namespace dist::internal
