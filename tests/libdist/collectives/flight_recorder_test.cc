// The flight recorder: a ring of the process's last collectives, and its text dump. Each test
// builds its own FlightRecorder(capacity); the process-wide Get() (COHORT_FLIGHT_RECORDER_ENTRIES,
// the SIGUSR2 dump) is read once per process, so its test runs in a process of its own.

#include "libdist/src/collectives/flight_recorder.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

OpSignature AllReduce(uint64_t seq, uint64_t count = 1000) {
  return OpSignature{seq,  CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1,
                     count};
}

std::vector<uint64_t> Ids(const std::vector<FlightRecorder::Entry>& entries) {
  std::vector<uint64_t> ids;
  for (const FlightRecorder::Entry& e : entries) ids.push_back(e.id);
  return ids;
}

std::vector<std::string> Lines(const std::string& dump) {
  return absl::StrSplit(dump, '\n', absl::SkipEmpty());
}

TEST(FlightRecorderTest, Start_PastCapacity_KeepsTheNewest) {
  FlightRecorder recorder(3);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    EXPECT_EQ(recorder.Start("world#0", AllReduce(seq), kT0 + absl::Seconds(seq)), seq);
  }

  std::vector<FlightRecorder::Entry> last = recorder.Last(10);
  EXPECT_THAT(Ids(last), ElementsAre(3, 4, 5));
  ASSERT_EQ(last.size(), 3u);
  for (size_t i = 0; i < last.size(); ++i) {
    EXPECT_EQ(last[i].sig.seq, i + 3);
    EXPECT_EQ(last[i].started, kT0 + absl::Seconds(i + 3));
    EXPECT_EQ(last[i].comm, "world#0");
  }
}

TEST(FlightRecorderTest, Start_AcrossCommunicators_IdsIncrease) {
  FlightRecorder recorder(10);
  EXPECT_EQ(recorder.Start("dp", AllReduce(1), kT0), 1u);
  EXPECT_EQ(recorder.Start("tp", AllReduce(1), kT0), 2u);
  EXPECT_EQ(recorder.Start("dp", AllReduce(2), kT0), 3u);

  std::vector<FlightRecorder::Entry> last = recorder.Last(10);
  ASSERT_THAT(Ids(last), ElementsAre(1, 2, 3));
  EXPECT_EQ(last[0].comm, "dp");
  EXPECT_EQ(last[1].comm, "tp");
  EXPECT_EQ(last[2].comm, "dp");
  EXPECT_EQ(last[2].sig.seq, 2u);
}

TEST(FlightRecorderTest, Start_NotEnded_IsPending) {
  FlightRecorder recorder(4);
  recorder.Start("world#0", AllReduce(1), kT0);

  std::vector<FlightRecorder::Entry> last = recorder.Last(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].result, "pending");
  EXPECT_EQ(last[0].ended, absl::InfinitePast());
  EXPECT_THAT(Lines(recorder.Dump()).back(),
              StartsWith("  [world#0] all_reduce #1 (float32 sum, 1000 elements): pending for "));
}

TEST(FlightRecorderTest, End_Succeeded_MarksOk) {
  FlightRecorder recorder(4);
  const uint64_t id = recorder.Start("world#0", AllReduce(1), kT0);
  recorder.End(id);

  std::vector<FlightRecorder::Entry> last = recorder.Last(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].result, "ok");
  EXPECT_EQ(last[0].ended, absl::InfinitePast());  // A success's end time is not taken.
  EXPECT_EQ(last[0].started, kT0);
}

TEST(FlightRecorderTest, End_WithError_RecordsErrorAndTime) {
  FlightRecorder recorder(4);
  const uint64_t id = recorder.Start("world#0", AllReduce(7), kT0);
  recorder.End(id, "DEADLINE_EXCEEDED: waited for process 3", kT0 + absl::Milliseconds(250));

  std::vector<FlightRecorder::Entry> last = recorder.Last(1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].result, "DEADLINE_EXCEEDED: waited for process 3");
  EXPECT_EQ(last[0].ended, kT0 + absl::Milliseconds(250));
  EXPECT_EQ(Lines(recorder.Dump()).back(),
            "  [world#0] all_reduce #7 (float32 sum, 1000 elements): "
            "DEADLINE_EXCEEDED: waited for process 3 in 250ms");
}

TEST(FlightRecorderTest, End_OfOverwrittenEntry_LeavesTheNewerOne) {
  FlightRecorder recorder(2);
  const uint64_t first = recorder.Start("world#0", AllReduce(1), kT0);
  recorder.Start("world#0", AllReduce(2), kT0);
  recorder.Start("world#0", AllReduce(3), kT0);  // Takes the first call's slot.

  recorder.End(first, "too late", kT0 + absl::Seconds(1));
  recorder.End(first);

  std::vector<FlightRecorder::Entry> last = recorder.Last(2);
  ASSERT_THAT(Ids(last), ElementsAre(2, 3));
  EXPECT_EQ(last[0].result, "pending");
  EXPECT_EQ(last[1].result, "pending");
  EXPECT_EQ(last[1].ended, absl::InfinitePast());
}

TEST(FlightRecorderTest, Last_N_IsTheNewestOldestFirst) {
  FlightRecorder recorder(10);
  for (uint64_t seq = 1; seq <= 5; ++seq) recorder.Start("world#0", AllReduce(seq), kT0);

  EXPECT_THAT(Ids(recorder.Last(2)), ElementsAre(4, 5));
  EXPECT_THAT(Ids(recorder.Last(5)), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(Ids(recorder.Last(0)), IsEmpty());
}

TEST(FlightRecorderTest, Last_AfterWrapping_IsOldestFirst) {
  FlightRecorder recorder(4);
  for (uint64_t seq = 1; seq <= 10; ++seq) recorder.Start("world#0", AllReduce(seq), kT0);

  EXPECT_THAT(Ids(recorder.Last(4)), ElementsAre(7, 8, 9, 10));
  EXPECT_THAT(Ids(recorder.Last(3)), ElementsAre(8, 9, 10));
}

TEST(FlightRecorderTest, Dump_NamesProcessAndEachEntrysSignature) {
  FlightRecorder recorder(10);
  const OpSignature reduce = AllReduce(1);
  const OpSignature broadcast{4, CollectiveKind::kBroadcast, DataType::kInt64, ReduceOp::kSum, 2,
                              1};
  const OpSignature barrier{9, CollectiveKind::kBarrier, DataType::kFloat32, ReduceOp::kSum, -1, 0};
  const absl::Time now = absl::Now();
  recorder.End(recorder.Start("dp", reduce, now));
  recorder.End(recorder.Start("tp", broadcast, now), "ABORTED: communicator aborted",
               now + absl::Microseconds(1500));
  recorder.Start("world#0", barrier, now);

  std::vector<std::string> lines = Lines(recorder.Dump());
  ASSERT_EQ(lines.size(), 4u) << recorder.Dump();
  EXPECT_EQ(lines[0], absl::StrCat("cohort flight recorder: process 0 (pid ", getpid(),
                                   "), the last 3 collectives, oldest first"));
  EXPECT_THAT(lines[1], StartsWith(absl::StrCat("  [dp] ", reduce.ToString(), ": ok, started ")));
  EXPECT_THAT(lines[1], HasSubstr(" ago"));
  EXPECT_EQ(lines[2], absl::StrCat("  [tp] ", broadcast.ToString(),
                                   ": ABORTED: communicator aborted in 1.5ms"));
  EXPECT_THAT(lines[3],
              StartsWith(absl::StrCat("  [world#0] ", barrier.ToString(), ": pending for ")));
  // ToString's own form, so that the dump reads as documented.
  EXPECT_THAT(lines[2], HasSubstr("broadcast #4 (int64, 1 element, root 2)"));
  EXPECT_THAT(lines[3], HasSubstr("barrier #9: pending"));

  std::vector<std::string> newest = Lines(recorder.Dump(1));
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_THAT(newest[0], HasSubstr("the last 1 collectives"));
  EXPECT_THAT(newest[1], StartsWith("  [world#0] barrier #9"));
}

TEST(FlightRecorderTest, CapacityZero_RecordsNothing) {
  FlightRecorder recorder(0);
  const uint64_t a = recorder.Start("world#0", AllReduce(1), kT0);
  const uint64_t b = recorder.Start("world#0", AllReduce(2), kT0);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  recorder.End(a);
  recorder.End(b, "failed", kT0);

  EXPECT_THAT(recorder.Last(10), IsEmpty());
  std::vector<std::string> lines = Lines(recorder.Dump());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("the last 0 collectives"));
}

TEST(FlightRecorderTest, StartEnd_FromManyThreads_LoseNothing) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 2000;
  FlightRecorder recorder(kThreads * kCallsPerThread);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, t] {
      const std::string comm = absl::StrCat("comm", t);
      for (uint64_t seq = 1; seq <= kCallsPerThread; ++seq) {
        const uint64_t id = recorder.Start(comm, AllReduce(seq), kT0);
        if (seq % 2 == 0) {
          recorder.End(id);
        } else {
          recorder.End(id, absl::StrCat("error ", seq), kT0 + absl::Seconds(1));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::vector<FlightRecorder::Entry> all = recorder.Last(SIZE_MAX);
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kCallsPerThread));
  absl::flat_hash_map<std::string, uint64_t> last_seq;  // Per communicator.
  for (size_t i = 0; i < all.size(); ++i) {
    const FlightRecorder::Entry& e = all[i];
    ASSERT_EQ(e.id, i + 1) << "ids are dense and in order";
    // Each thread's calls appear in its own order, each once, each ended as it was.
    ASSERT_EQ(e.sig.seq, last_seq[e.comm] + 1) << e.comm << " at id " << e.id;
    last_seq[e.comm] = e.sig.seq;
    if (e.sig.seq % 2 == 0) {
      ASSERT_EQ(e.result, "ok") << e.comm << " #" << e.sig.seq;
    } else {
      ASSERT_EQ(e.result, absl::StrCat("error ", e.sig.seq)) << e.comm;
      ASSERT_EQ(e.ended, kT0 + absl::Seconds(1));
    }
  }
  ASSERT_EQ(last_seq.size(), static_cast<size_t>(kThreads));
  for (const auto& [comm, seq] : last_seq) EXPECT_EQ(seq, kCallsPerThread) << comm;
}

TEST(FlightRecorderTest, StartEnd_FromManyThreadsPastCapacity_KeepTheNewest) {
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 5000;
  constexpr size_t kCapacity = 64;
  FlightRecorder recorder(kCapacity);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&recorder, t] {
      for (uint64_t seq = 1; seq <= kCallsPerThread; ++seq) {
        recorder.End(recorder.Start(absl::StrCat("comm", t), AllReduce(seq), kT0));
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::vector<FlightRecorder::Entry> last = recorder.Last(SIZE_MAX);
  ASSERT_EQ(last.size(), kCapacity);
  const uint64_t total = kThreads * kCallsPerThread;
  for (size_t i = 0; i < last.size(); ++i) {
    EXPECT_EQ(last[i].id, total - kCapacity + 1 + i);
    EXPECT_EQ(last[i].result, "ok");
  }
}

volatile sig_atomic_t g_program_handler_ran = 0;
void ProgramsSigusr2Handler(int) { g_program_handler_ran = 1; }

// The program of the test below, in its own process: exits 0 when both handlers ran, 3 when the
// program's did not, 4 when libdist's dump did not come.
void ProgramWithItsOwnSigusr2Handler() {
  signal(SIGUSR2, ProgramsSigusr2Handler);
  int err[2];
  if (pipe(err) != 0 || dup2(err[1], STDERR_FILENO) < 0) std::exit(5);  // The dump, read back.
  FlightRecorder& recorder = FlightRecorder::Get();
  recorder.End(recorder.Start("world", AllReduce(7), absl::Now()));
  raise(SIGUSR2);
  std::string dump;
  char buf[4096];
  pollfd p{err[0], POLLIN, 0};
  while (dump.find("all_reduce") == std::string::npos && poll(&p, 1, 20000) == 1) {
    ssize_t n = read(err[0], buf, sizeof(buf));
    if (n <= 0) break;
    dump.append(buf, static_cast<size_t>(n));
  }
  std::exit(!g_program_handler_ran ? 3 : dump.find("all_reduce") == std::string::npos ? 4 : 0);
}

// A program that handles SIGUSR2 itself before its first collective (Python's
// faulthandler.register does) keeps its handler: libdist's dump and the program's both run.
TEST(FlightRecorderDeathTest, Sigusr2_AHandlerInstalledBeforeLibdistsStillRuns_BesideTheDump) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // A fresh process: Get() not yet called in it.
  EXPECT_EXIT(ProgramWithItsOwnSigusr2Handler(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dist::internal
