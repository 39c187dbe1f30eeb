// The collective watchdog's diagnosis: from the service's cross-rank table to a sentence naming
// who held a call up.

#include "libdist/src/collectives/timeout_diagnosis.h"
#include "libdist/src/collectives/progress_reporter.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

using cohort::coordination::CollectiveProgress;
using cohort::coordination::TaskProgress;
using cohort::coordination::TaskState;
using ::testing::HasSubstr;

const OpSignature kCall{183, CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1,
                        4096};

TimeoutContext Context(int ranks, int me = 0) {
  TimeoutContext c;
  c.communicator = "world#0";
  c.sig = kCall;
  c.rank = me;
  for (int r = 0; r < ranks; ++r) c.names.processes.push_back(r);
  c.waited = absl::Seconds(600);
  c.stale_after = absl::Seconds(7);
  return c;
}

// A live rank inside `started` (pending when started > completed), reported 0.5 s ago.
TaskProgress Rank(int task, uint64_t started, uint64_t completed,
                  uint64_t signature = SignatureHash(kCall)) {
  TaskProgress t;
  t.task = task;
  t.state = TaskState::kConnected;
  t.since_heartbeat = absl::Milliseconds(400);
  t.since_report = absl::Milliseconds(500);
  CollectiveProgress p;
  p.communicator = "world#0";
  p.last_started = started;
  p.last_completed = completed;
  if (started > completed) {
    p.pending = "some call";
    p.pending_signature = signature;
    p.pending_for = absl::Seconds(600);
  }
  t.communicators.push_back(p);
  return t;
}

TEST(DiagnoseTimeoutTest, OneRankNeverEntered_NamedAsTheIssueShowsIt) {
  std::vector<TaskProgress> table;
  for (int r = 0; r < 8; ++r) table.push_back(r == 7 ? Rank(7, 182, 182) : Rank(r, 183, 182));
  std::optional<std::string> d = DiagnoseTimeout(Context(8), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d,
            "process 7 is alive (heartbeat 0.4 s ago) but never entered all_reduce #183 "
            "(float32 sum, 4096 elements), which the other 7 processes entered 600 s ago; its "
            "last completed collective is #182");
}

TEST(DiagnoseTimeoutTest, ManyRanksNeverEntered_ListCappedAtThree) {
  std::vector<TaskProgress> table;
  for (int r = 0; r < 10; ++r) table.push_back(r >= 5 ? Rank(r, 100, 100) : Rank(r, 183, 182));
  std::optional<std::string> d = DiagnoseTimeout(Context(10), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_THAT(*d, HasSubstr("5 processes never entered all_reduce #183"));
  EXPECT_THAT(*d, HasSubstr("process 5 is alive"));
  EXPECT_THAT(*d, HasSubstr("and 2 more"));
  EXPECT_THAT(*d, ::testing::Not(HasSubstr("process 9")));
}

TEST(DiagnoseTimeoutTest, RankStoppedReporting_NamedAsStoppedWithWhatItLastDid) {
  std::vector<TaskProgress> table = {Rank(0, 183, 182), Rank(1, 183, 182), Rank(2, 183, 182)};
  table[2].since_report = absl::Seconds(30);  // Frozen: its sidecar still heartbeats.
  std::optional<std::string> d = DiagnoseTimeout(Context(3), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_THAT(*d, HasSubstr("process 2 is alive (heartbeat 0.4 s ago) but its program stopped "
                            "reporting progress 30 s ago, when it had entered #183 and "
                            "completed #182: it is stopped (SIGSTOP, a debugger)"));
}

TEST(DiagnoseTimeoutTest, RankInsideADifferentCall_NamedAsMismatch) {
  std::vector<TaskProgress> table = {Rank(0, 183, 182), Rank(1, 183, 182, /*signature=*/7)};
  table[1].communicators[0].pending = "all_gather #183 (float32, 2048 elements)";
  std::optional<std::string> d = DiagnoseTimeout(Context(2), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d,
            "collective mismatch at #183: process 0 called all_reduce #183 (float32 sum, 4096 "
            "elements), but process 1 called all_gather #183 (float32, 2048 elements)");
}

TEST(DiagnoseTimeoutTest, EveryRankInside_BlamesTheTransportNotAStraggler) {
  std::vector<TaskProgress> table = {Rank(0, 183, 182), Rank(1, 183, 182), Rank(2, 183, 182)};
  std::optional<std::string> d = DiagnoseTimeout(Context(3, /*me=*/1), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_THAT(*d, HasSubstr("every process entered all_reduce #183"));
  EXPECT_THAT(*d, HasSubstr("suspect the transport"));
}

TEST(DiagnoseTimeoutTest, RankThatLeftTheJob_Named) {
  std::vector<TaskProgress> table = {Rank(0, 183, 182), Rank(1, 183, 182)};
  table[1].state = TaskState::kShutDown;
  std::optional<std::string> d = DiagnoseTimeout(Context(2), table);
  ASSERT_TRUE(d.has_value());
  EXPECT_THAT(*d, HasSubstr("process 1 (shut_down) left the job"));
}

TEST(DiagnoseTimeoutTest, SplitCommunicator_NamesJobProcessesNotRanks) {
  // Ranks 0 and 1 of a split are processes 4 and 6.
  TimeoutContext c = Context(2);
  c.names.processes = {4, 6};
  std::vector<TaskProgress> table;
  for (int p = 0; p < 8; ++p) table.push_back(p == 6 ? Rank(6, 182, 182) : Rank(p, 183, 182));
  std::optional<std::string> d = DiagnoseTimeout(c, table);
  ASSERT_TRUE(d.has_value());
  EXPECT_THAT(*d, HasSubstr("process 6 is alive"));
  EXPECT_THAT(*d, HasSubstr("the other 1 process entered"));
}

TEST(DiagnoseTimeoutTest, NothingKnown_NoDiagnosis) {
  EXPECT_FALSE(DiagnoseTimeout(Context(3), {}).has_value());
}

TEST(SignatureHashTest, SameCallSameHash_AnyFieldChangesIt) {
  OpSignature other = kCall;
  other.seq = 9;  // Not part of the signature.
  EXPECT_EQ(SignatureHash(kCall), SignatureHash(other));
  for (auto change : std::vector<void (*)(OpSignature&)>{
           [](OpSignature& s) { s.count++; }, [](OpSignature& s) { s.op = ReduceOp::kMax; },
           [](OpSignature& s) { s.type = DataType::kInt32; },
           [](OpSignature& s) { s.kind = CollectiveKind::kAllGather; },
           [](OpSignature& s) { s.root = 2; }}) {
    OpSignature changed = kCall;
    change(changed);
    EXPECT_NE(SignatureHash(changed), SignatureHash(kCall));
  }
}

}  // namespace
}  // namespace dist::internal
