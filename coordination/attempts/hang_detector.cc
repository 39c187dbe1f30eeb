#include "coordination/attempts/hang_detector.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cohort::coordination {
namespace {

constexpr absl::string_view kVariable = "COHORT_HANG_TIMEOUT";

bool LongPhase(const std::string& phase) {
  return phase == "init" || phase == "compile" || phase == "checkpoint";
}

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

absl::StatusOr<HangTimeout> ParseHangTimeout(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  if (value.empty() || value == "auto") return HangTimeout{};
  int64_t seconds = 0;
  absl::Duration d;
  if (absl::SimpleAtoi(value, &seconds) && seconds >= 0) return HangTimeout{absl::Seconds(seconds)};
  if (absl::ParseDuration(value, &d) && d >= absl::ZeroDuration()) return HangTimeout{d};
  return absl::InvalidArgumentError(absl::StrCat(
      kVariable, "=", value,
      " is not a timeout: set it to \"auto\", a number of seconds (0 turns hang detection off) "
      "or a duration such as \"90s\" (the operator sets it from "
      "spec.hangDetection.timeoutSeconds)"));
}

void HangDetector::Update(int32_t pod_index, const attemptspb::ReportHealthRequest& report,
                          absl::Time now) {
  // The pod's report is whole: a rank it no longer names (its processes ended) is not judged.
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    const bool named =
        std::any_of(report.ranks().begin(), report.ranks().end(),
                    [&](const attemptspb::RankHealth& r) { return r.rank() == it->first; });
    it = it->second.pod_index == pod_index && !named ? ranks_.erase(it) : std::next(it);
  }
  for (const attemptspb::RankHealth& r : report.ranks()) {
    Heard& h = ranks_[r.rank()];
    h.pod_index = pod_index;
    h.health = r;
    h.at = now;
  }
}

absl::Duration HangDetector::JobMedianStep() const {
  std::vector<int64_t> medians;
  for (const auto& [rank, h] : ranks_) {
    if (h.health.steps() >= 2 && h.health.median_step_ms() > 0)
      medians.push_back(h.health.median_step_ms());
  }
  return absl::Milliseconds(Median(std::move(medians)));
}

absl::Duration HangDetector::TimeoutOf(const Heard& h, absl::Duration job_median) const {
  if (timeout_.off()) return absl::InfiniteDuration();
  absl::Duration t;
  if (timeout_.fixed) {
    t = *timeout_.fixed;
  } else if (h.health.steps() < 2 || job_median == absl::ZeroDuration()) {
    t = kWarmUpTimeout;
  } else {
    t = std::max(kMinTimeout, kStepsOfTimeout * job_median);
  }
  if (LongPhase(h.health.phase())) t = std::max(t, kWarmUpTimeout);
  return t;
}

absl::Duration HangDetector::TimeoutOf(int32_t rank) const {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return absl::InfiniteDuration();
  return TimeoutOf(it->second, JobMedianStep());
}

std::optional<HangFinding> HangDetector::Check(absl::Time now) const {
  if (timeout_.off() || ranks_.empty()) return std::nullopt;
  const absl::Duration job_median = JobMedianStep();
  struct Seen {
    int32_t rank;
    const Heard* h;
    bool stalled;
    bool frozen;
  };
  std::vector<Seen> seen;
  bool someone_moves = false;  // A rank that computes or stepped within its timeout.
  for (const auto& [rank, h] : ranks_) {
    if (now - h.at > kStaleReport) continue;  // Its sidecar went quiet: nothing known.
    const absl::Duration since_progress =
        (now - h.at) + absl::Milliseconds(h.health.progress_age_ms());
    // A process that stopped reporting (stopped, or C code holding Python's lock) is not busy,
    // whatever its last report said.
    const bool frozen = absl::Milliseconds(h.health.report_age_ms()) > absl::Seconds(10);
    const bool busy = h.health.busy() && !frozen;
    const bool stalled = !busy && since_progress > TimeoutOf(h, job_median);
    if (!stalled) someone_moves = true;
    seen.push_back({rank, &h, stalled, frozen});
  }
  std::vector<const Seen*> stalled;
  for (const Seen& s : seen) {
    if (s.stalled) stalled.push_back(&s);
  }
  if (stalled.empty()) return std::nullopt;
  // Ranks waiting in a collective for one that still computes (a long evaluation on rank 0) wait,
  // they do not hang.
  const bool all_wait = std::all_of(stalled.begin(), stalled.end(),
                                    [](const Seen* s) { return s->h->health.waiting(); });
  if (all_wait && someone_moves) return std::nullopt;

  // The outliers: stalled ranks outside the framework (a sleep, a deadlock in the program's own
  // code), frozen ones first; when every stalled rank waits in the framework, those furthest
  // behind (the fewest steps).
  std::vector<const Seen*> outliers;
  for (const Seen* s : stalled) {
    if (!s->h->health.waiting() || s->frozen) outliers.push_back(s);
  }
  if (outliers.empty()) {
    int64_t fewest = stalled.front()->h->health.steps();
    for (const Seen* s : stalled) fewest = std::min(fewest, s->h->health.steps());
    for (const Seen* s : stalled) {
      if (s->h->health.steps() == fewest) outliers.push_back(s);
    }
    // Everyone at the same step waits in the framework: nobody stands out, all are named.
  }
  std::stable_sort(outliers.begin(), outliers.end(),
                   [](const Seen* a, const Seen* b) { return a->frozen > b->frozen; });

  HangFinding finding;
  std::vector<int32_t> named;
  for (const Seen* s : outliers) {
    attemptspb::HungRank& r = *finding.outliers.Add();
    r.set_rank(s->rank);
    r.set_pod_index(s->h->pod_index);
    r.set_local(s->h->health.local());
    std::string where = s->h->health.where();
    if (where.empty() && !s->h->health.op().empty()) where = absl::StrCat("in ", s->h->health.op());
    if (s->frozen) {
      where = absl::StrCat("stopped reporting ",
                           absl::ToInt64Seconds(absl::Milliseconds(s->h->health.report_age_ms())),
                           " s ago (stopped, or holding Python's lock in C code)",
                           where.empty() ? "" : "; last: ", where);
    }
    r.set_where(where);
    named.push_back(s->rank);
  }
  // The others, grouped by where they are (in rank order, so groups come out in the order of
  // their lowest rank).
  std::vector<std::pair<std::string, std::vector<int32_t>>> groups;
  for (const Seen& s : seen) {
    if (std::find(named.begin(), named.end(), s.rank) != named.end()) continue;
    const attemptspb::RankHealth& h = s.h->health;
    std::string where;
    if (h.waiting() && !h.op().empty()) {
      where = h.where().empty() ? h.op() : absl::StrCat(h.op(), " at ", WhereLine(h.where()));
    } else if (!s.stalled) {
      where = h.where().empty() ? "making progress"
                                : absl::StrCat("making progress at ", WhereLine(h.where()));
    } else {
      where = h.where().empty() ? "no progress, place unknown" : h.where();
    }
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == where; });
    if (it == groups.end()) {
      groups.push_back({where, {s.rank}});
    } else {
      it->second.push_back(s.rank);
    }
  }
  for (auto& [where, ranks] : groups) {
    attemptspb::RankGroup& g = *finding.groups.Add();
    g.set_where(where);
    for (int32_t r : ranks) g.add_ranks(r);
  }
  return finding;
}

std::string WhereLine(absl::string_view where) {
  const size_t in = where.find(" in ");
  return std::string(in == absl::string_view::npos ? where : where.substr(0, in));
}

}  // namespace cohort::coordination
