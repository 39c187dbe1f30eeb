// The hang detector of rank 0's attempt hub (coordination/attempts/hang_detector.h), on a fake
// clock: which ranks it calls hung, when, and how it names them.

#include "coordination/attempts/hang_detector.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

struct Rank {
  int32_t rank = 0;
  int64_t steps = 0;
  absl::Duration since_progress;
  absl::Duration step = absl::Seconds(1);
  bool busy = false;
  bool waiting = false;
  std::string op;
  std::string where;
  std::string phase = "run";
  absl::Duration report_age = absl::ZeroDuration();
};

attemptspb::ReportHealthRequest Report(int32_t pod, const std::vector<Rank>& ranks) {
  attemptspb::ReportHealthRequest r;
  r.set_pod_index(pod);
  for (const Rank& x : ranks) {
    attemptspb::RankHealth& h = *r.add_ranks();
    h.set_rank(x.rank);
    h.set_local(0);
    h.set_steps(x.steps);
    h.set_progress_age_ms(absl::ToInt64Milliseconds(x.since_progress));
    h.set_median_step_ms(x.steps >= 2 ? absl::ToInt64Milliseconds(x.step) : 0);
    h.set_busy(x.busy);
    h.set_waiting(x.waiting);
    h.set_op(x.op);
    h.set_where(x.where);
    h.set_phase(x.phase);
    h.set_report_age_ms(absl::ToInt64Milliseconds(x.report_age));
  }
  return r;
}

// The ranks a finding names.
std::vector<int32_t> Named(const std::optional<HangFinding>& f) {
  std::vector<int32_t> ranks;
  if (f) {
    for (const auto& r : f->outliers) ranks.push_back(r.rank());
  }
  return ranks;
}

TEST(ParseHangTimeout, AutoSecondsDurationsAndOff) {
  EXPECT_FALSE(ParseHangTimeout("auto")->fixed.has_value());
  EXPECT_FALSE(ParseHangTimeout("")->fixed.has_value());
  EXPECT_EQ(*ParseHangTimeout("90")->fixed, absl::Seconds(90));
  EXPECT_EQ(*ParseHangTimeout("2m")->fixed, absl::Minutes(2));
  EXPECT_TRUE(ParseHangTimeout("0")->off());
  absl::StatusOr<HangTimeout> bad = ParseHangTimeout("soon");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("COHORT_HANG_TIMEOUT=soon"));
  EXPECT_FALSE(ParseHangTimeout("-5").ok());
}

TEST(HangDetector, AutomaticTimeout_TenMinutesUntilTwoSteps_ThenFiveMediansAtLeastAMinute) {
  HangDetector d{HangTimeout{}};
  d.Update(0, Report(0, {{.rank = 0, .steps = 1}}), kT0);
  EXPECT_EQ(d.TimeoutOf(0), kWarmUpTimeout);
  d.Update(0, Report(0, {{.rank = 0, .steps = 5, .step = absl::Seconds(1)}}), kT0);
  EXPECT_EQ(d.TimeoutOf(0), absl::Seconds(60));
  d.Update(0, Report(0, {{.rank = 0, .steps = 5, .step = absl::Seconds(30)}}), kT0);
  EXPECT_EQ(d.TimeoutOf(0), absl::Seconds(150));
  // A long phase gets the warm-up's ten minutes whatever the steps say.
  d.Update(0, Report(0, {{.rank = 0, .steps = 5, .step = absl::Seconds(1), .phase = "checkpoint"}}),
           kT0);
  EXPECT_EQ(d.TimeoutOf(0), kWarmUpTimeout);
  EXPECT_EQ(HangDetector(*ParseHangTimeout("0")).TimeoutOf(0), absl::InfiniteDuration());
}

TEST(HangDetector, RankSleepsWhileTheOtherWaitsInAllReduce_TheSleeperIsNamedAfterTheTimeout) {
  HangDetector d{HangTimeout{}};
  const std::vector<Rank> ranks = {
      {.rank = 0,
       .steps = 20,
       .since_progress = absl::Seconds(59),
       .waiting = true,
       .op = "all_reduce",
       .where = "train.py:35 in <module>: loss.backward()"},
      {.rank = 1,
       .steps = 20,
       .since_progress = absl::Seconds(59),
       .where = "train.py:40 in <module>: time.sleep(1e9)"},
  };
  d.Update(0, Report(0, {ranks[0]}), kT0);
  d.Update(1, Report(1, {ranks[1]}), kT0);
  EXPECT_FALSE(d.Check(kT0).has_value()) << "59 s of a 60 s timeout";
  std::optional<HangFinding> f = d.Check(kT0 + absl::Seconds(2));
  ASSERT_TRUE(f.has_value());
  EXPECT_THAT(Named(f), ElementsAre(1));
  EXPECT_EQ(f->outliers[0].where(), "train.py:40 in <module>: time.sleep(1e9)");
  EXPECT_EQ(f->outliers[0].pod_index(), 1);
  ASSERT_EQ(f->groups.size(), 1);
  EXPECT_EQ(f->groups[0].where(), "all_reduce at train.py:35");
  EXPECT_THAT(f->groups[0].ranks(), ElementsAre(0));
}

TEST(HangDetector, SlowStepsWithinFiveMedians_NoHang) {
  HangDetector d{HangTimeout{}};
  // 30 s steps: 140 s without a step is within 5 x 30 s.
  d.Update(0,
           Report(0, {{.rank = 0,
                       .steps = 6,
                       .since_progress = absl::Seconds(140),
                       .step = absl::Seconds(30),
                       .waiting = true,
                       .op = "all_reduce"},
                      {.rank = 1,
                       .steps = 6,
                       .since_progress = absl::Seconds(140),
                       .step = absl::Seconds(30)}}),
           kT0);
  EXPECT_FALSE(d.Check(kT0).has_value());
  EXPECT_TRUE(d.Check(kT0 + absl::Seconds(11)).has_value());
}

TEST(HangDetector, OthersWaitForARankThatComputes_NoHang) {
  HangDetector d{*ParseHangTimeout("60")};
  d.Update(0,
           Report(0, {{.rank = 0,
                       .steps = 9,
                       .since_progress = absl::Minutes(5),
                       .busy = true,
                       .where = "eval.py:12 in evaluate: acc += score(batch)"},
                      {.rank = 1,
                       .steps = 9,
                       .since_progress = absl::Minutes(5),
                       .waiting = true,
                       .op = "barrier"}}),
           kT0);
  EXPECT_FALSE(d.Check(kT0).has_value());
}

TEST(HangDetector, AFrozenRankIsNotBusyAndIsNamedFirst) {
  HangDetector d{*ParseHangTimeout("60")};
  d.Update(
      0,
      Report(
          0,
          {{.rank = 0, .steps = 9, .since_progress = absl::Minutes(2), .where = "a.py:1 in f: g()"},
           {.rank = 1,
            .steps = 9,
            .since_progress = absl::Minutes(2),
            .busy = true,
            .report_age = absl::Minutes(2)}}),
      kT0);
  std::optional<HangFinding> f = d.Check(kT0);
  EXPECT_THAT(Named(f), ElementsAre(1, 0));
  EXPECT_EQ(f->outliers[0].where(),
            "stopped reporting 120 s ago (stopped, or holding Python's lock in C code)");
}

// libdist ranks: what they wait in is their collective in flight (no source line); the one
// stopped inside the all-reduce stopped reporting and is named, not those that wait for it.
TEST(HangDetector, LibdistRankStoppedInsideTheAllReduce_ItIsNamed_TheOthersGroupedByTheCall) {
  HangDetector d{*ParseHangTimeout("60")};
  const std::string call = "all_reduce #2 (float32 sum, 65536 elements)";
  d.Update(
      0,
      Report(
          0,
          {{.rank = 0, .steps = 9, .since_progress = absl::Minutes(2), .waiting = true, .op = call},
           {.rank = 1,
            .steps = 9,
            .since_progress = absl::Minutes(2),
            .waiting = true,
            .op = call,
            .report_age = absl::Seconds(90)},
           {.rank = 2,
            .steps = 9,
            .since_progress = absl::Minutes(2),
            .waiting = true,
            .op = call}}),
      kT0);
  std::optional<HangFinding> f = d.Check(kT0);
  EXPECT_THAT(Named(f), ElementsAre(1));
  EXPECT_EQ(f->outliers[0].where(),
            absl::StrCat("stopped reporting 90 s ago (stopped, or holding Python's lock in C "
                         "code); last: in ",
                         call));
  ASSERT_EQ(f->groups.size(), 1);
  EXPECT_EQ(f->groups[0].where(), call);
  EXPECT_THAT(f->groups[0].ranks(), ElementsAre(0, 2));
}

TEST(HangDetector, EveryRankWaitsInTheFramework_TheFewestStepsAreNamed) {
  HangDetector d{*ParseHangTimeout("60")};
  d.Update(0,
           Report(0, {{.rank = 0,
                       .steps = 9,
                       .since_progress = absl::Minutes(2),
                       .waiting = true,
                       .op = "all_reduce",
                       .where = "t.py:5 in step: x.sum()"},
                      {.rank = 1,
                       .steps = 8,
                       .since_progress = absl::Minutes(2),
                       .waiting = true,
                       .op = "all_gather",
                       .where = "t.py:9 in step: y.sum()"},
                      {.rank = 2,
                       .steps = 9,
                       .since_progress = absl::Minutes(2),
                       .waiting = true,
                       .op = "all_reduce",
                       .where = "t.py:5 in step: x.sum()"}}),
           kT0);
  std::optional<HangFinding> f = d.Check(kT0);
  EXPECT_THAT(Named(f), ElementsAre(1));
  ASSERT_EQ(f->groups.size(), 1);
  EXPECT_THAT(f->groups[0].ranks(), ElementsAre(0, 2));
  EXPECT_EQ(f->groups[0].where(), "all_reduce at t.py:5");
}

TEST(HangDetector, OffOrNothingHeardOrAQuietSidecar_NoHang) {
  HangDetector off{*ParseHangTimeout("0")};
  off.Update(0, Report(0, {{.rank = 0, .steps = 9, .since_progress = absl::Hours(1)}}), kT0);
  EXPECT_FALSE(off.Check(kT0).has_value());
  HangDetector d{HangTimeout{}};
  EXPECT_FALSE(d.Check(kT0).has_value());
  d.Update(0, Report(0, {{.rank = 0, .steps = 9, .since_progress = absl::Hours(1)}}), kT0);
  EXPECT_TRUE(d.Check(kT0).has_value());
  // Its sidecar went quiet: heartbeats judge that, not the hang detector.
  EXPECT_FALSE(d.Check(kT0 + kStaleReport + absl::Seconds(1)).has_value());
  d.Reset();
  EXPECT_FALSE(d.Check(kT0).has_value());
}

// A pod whose processes ended reports none of them: what they last said is forgotten.
TEST(HangDetector, APodThatNoLongerNamesARank_ItIsForgotten) {
  HangDetector d{*ParseHangTimeout("60")};
  d.Update(0, Report(0, {{.rank = 0, .steps = 9, .since_progress = absl::Seconds(50)}}), kT0);
  d.Update(1, Report(1, {{.rank = 1, .steps = 9, .since_progress = absl::Seconds(50)}}), kT0);
  d.Update(0, Report(0, {}), kT0 + absl::Seconds(20));
  std::optional<HangFinding> f = d.Check(kT0 + absl::Seconds(20));
  EXPECT_THAT(Named(f), ElementsAre(1)) << "rank 0's process ended; rank 1's is still there";
}

}  // namespace
}  // namespace cohort::coordination
