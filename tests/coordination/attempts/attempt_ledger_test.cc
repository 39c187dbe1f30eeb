// The attempt hub's ledger (coordination/attempts/attempt_ledger.h) on a fake clock: which orders
// start an attempt, which ends and reports count, and a hang's life from found to cleared.

#include "coordination/attempts/attempt_ledger.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

TEST(AttemptLedger, WhichOrdersStartAnAttempt) {
  struct Case {
    int32_t current;
    int32_t ordered;
    std::optional<bool> may_start;  // nullopt: refused.
  };
  for (const Case& c : std::vector<Case>{
           {0, 1, true},
           {4, 5, true},
           {4, 4, false},  // Repeated: the first order stands.
           {4, 6, std::nullopt},
           {4, 3, std::nullopt},
       }) {
    SCOPED_TRACE(::testing::Message() << "current " << c.current << ", ordered " << c.ordered);
    AttemptLedger ledger(c.current);
    absl::StatusOr<bool> may = ledger.MayStart(c.ordered);
    if (!c.may_start) {
      EXPECT_TRUE(absl::IsFailedPrecondition(may.status())) << may.status();
      EXPECT_THAT(std::string(may.status().message()),
                  ::testing::HasSubstr(absl::StrCat("the next one is ", c.current + 1)));
      continue;
    }
    ASSERT_TRUE(may.ok());
    EXPECT_EQ(*may, *c.may_start);
  }
}

TEST(AttemptLedger, StartForgetsTheOldAttemptsEnds_AConcurrentOrderWins) {
  AttemptLedger ledger(2);
  EXPECT_EQ(ledger.started(), absl::InfinitePast()) << "the first attempt was never ordered";
  attemptspb::AttemptEnd end;
  end.set_pod_index(1);
  end.set_attempt(2);
  end.set_exit_code(1);
  EXPECT_TRUE(ledger.RecordEnd(end));
  end.set_attempt(1);
  end.set_pod_index(3);
  EXPECT_FALSE(ledger.RecordEnd(end)) << "an end of an earlier attempt is dropped";
  ASSERT_EQ(ledger.ends().size(), 1u);
  EXPECT_EQ(ledger.ends().at(1).exit_code(), 1);

  EXPECT_TRUE(ledger.Start(3, kT0));
  EXPECT_EQ(ledger.attempt(), 3);
  EXPECT_EQ(ledger.started(), kT0);
  EXPECT_TRUE(ledger.ends().empty());
  EXPECT_FALSE(ledger.Start(3, kT0 + absl::Seconds(1))) << "ordered twice meanwhile";
  EXPECT_FALSE(ledger.Start(2, kT0 + absl::Seconds(1)));
  EXPECT_EQ(ledger.started(), kT0);
}

// Pod `pod`'s one rank (rank = pod) of attempt `attempt`, `stuck` without progress; `dumped`: the
// hang whose evidence the pod collected.
attemptspb::ReportHealthRequest Report(int32_t pod, int32_t attempt, absl::Duration stuck,
                                       uint64_t dumped = 0) {
  attemptspb::ReportHealthRequest r;
  r.set_pod_index(pod);
  r.set_attempt(attempt);
  r.set_dumped_id(dumped);
  attemptspb::RankHealth& h = *r.add_ranks();
  h.set_rank(pod);
  h.set_steps(20);
  h.set_median_step_ms(1000);
  h.set_progress_age_ms(absl::ToInt64Milliseconds(stuck));
  h.set_where("t.py:40 in <module>: time.sleep(1e9)");
  return r;
}

TEST(AttemptLedger, AHangFromFoundToCompleteEvidenceToCleared) {
  AttemptLedger ledger(0);
  ledger.set_hang_detection(*ParseHangTimeout("60"), "/run/cohort/dumps");
  using Change = AttemptLedger::HangChange;
  using Evidence = AttemptLedger::Evidence;
  EXPECT_EQ(ledger.RecordHealth(Report(1, 0, absl::Seconds(30)), kT0), Evidence::kNone);
  EXPECT_EQ(ledger.CheckHang(kT0, 2), Change::kNone) << "30 s of a 60 s timeout";
  ledger.RecordHealth(Report(1, 0, absl::Seconds(61)), kT0);
  ledger.RecordHealth(Report(2, 7, absl::Seconds(600)), kT0);  // Of another attempt: dropped.
  ASSERT_EQ(ledger.CheckHang(kT0, 2), Change::kFound);
  const attemptspb::HangReport hang = *ledger.hang();
  EXPECT_EQ(hang.id(), static_cast<uint64_t>(absl::ToUnixMillis(kT0)));
  EXPECT_EQ(hang.attempt(), 0);
  EXPECT_EQ(hang.pods_total(), 2);
  EXPECT_EQ(hang.dumps_dir(), "/run/cohort/dumps/attempt-0");
  ASSERT_EQ(hang.outliers_size(), 1);
  EXPECT_EQ(hang.outliers(0).rank(), 1);
  EXPECT_EQ(ledger.wanted_dump(), hang.id());
  EXPECT_EQ(ledger.CheckHang(kT0 + absl::Seconds(1), 2), Change::kNone) << "the same hang";

  struct Step {
    int32_t pod;
    uint64_t dumped;
    Evidence expected;
    int32_t pods_dumped;
  };
  for (const Step& s : std::vector<Step>{
           {1, 0, Evidence::kNone, 0},              // Not collected yet.
           {1, hang.id() - 1, Evidence::kNone, 0},  // An earlier hang's.
           {1, hang.id(), Evidence::kDumped, 1},
           {1, hang.id(), Evidence::kNone, 1},  // Said again.
           {0, hang.id(), Evidence::kComplete, 2},
       }) {
    SCOPED_TRACE(::testing::Message() << "pod " << s.pod << " dumped " << s.dumped);
    EXPECT_EQ(ledger.RecordHealth(Report(s.pod, 0, absl::Seconds(62), s.dumped), kT0), s.expected);
    EXPECT_EQ(ledger.hang()->pods_dumped(), s.pods_dumped);
  }
  EXPECT_TRUE(ledger.hang()->dumps_complete());
  EXPECT_EQ(ledger.wanted_dump(), 0u) << "nobody is asked any more";
  ledger.RecordHealth(Report(1, 0, absl::Minutes(6)), kT0 + absl::Minutes(5));
  EXPECT_EQ(ledger.CheckHang(kT0 + absl::Minutes(5), 2), Change::kNone)
      << "still the same hang, its evidence complete: nothing to give up on";

  ledger.RecordHealth(Report(1, 0, absl::ZeroDuration()), kT0 + absl::Minutes(5));
  EXPECT_EQ(ledger.CheckHang(kT0 + absl::Minutes(5), 2), Change::kCleared);
  EXPECT_FALSE(ledger.hang().has_value());
}

TEST(AttemptLedger, EvidenceCompleteAfterThePatience_ANewAttemptForgetsTheHang) {
  AttemptLedger ledger(4);
  ledger.set_hang_detection(*ParseHangTimeout("60"), "/d");
  using Change = AttemptLedger::HangChange;
  ledger.RecordHealth(Report(1, 4, absl::Minutes(2)), kT0);
  ASSERT_EQ(ledger.CheckHang(kT0, 3), Change::kFound);
  EXPECT_EQ(ledger.CheckHang(kT0 + AttemptLedger::kDumpPatience - absl::Milliseconds(1), 3),
            Change::kNone);
  EXPECT_EQ(ledger.CheckHang(kT0 + AttemptLedger::kDumpPatience, 3), Change::kGaveUp);
  EXPECT_TRUE(ledger.hang()->dumps_complete());
  EXPECT_EQ(ledger.hang()->pods_dumped(), 0);

  ASSERT_TRUE(ledger.Start(5, kT0 + absl::Minutes(1)));
  EXPECT_FALSE(ledger.hang().has_value());
  EXPECT_EQ(ledger.CheckHang(kT0 + absl::Minutes(1), 3), Change::kNone)
      << "what was heard of attempt 4 is not attempt 5's";
}

TEST(AttemptLedger, HangDetectionOff_NothingIsFound) {
  AttemptLedger ledger(0);
  ledger.set_hang_detection(*ParseHangTimeout("0"), "/d");
  ledger.RecordHealth(Report(1, 0, absl::Hours(5)), kT0);
  EXPECT_EQ(ledger.CheckHang(kT0, 2), AttemptLedger::HangChange::kNone);
}

}  // namespace
}  // namespace cohort::coordination
