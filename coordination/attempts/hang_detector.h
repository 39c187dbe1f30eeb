#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/attempts.pb.h"

// Finding a hung job (docs/faults.md, "Hung ranks"): rank 0's attempt hub keeps what every pod's
// sidecar last said of its ranks' progress (RankHealth) and asks, once a second, whether some
// rank stopped for longer than its timeout. Pure and clock-injected: the hub passes the time.
namespace cohort::coordination {

namespace attemptspb = ::cohort::coordination::v1;

// spec.hangDetection.timeoutSeconds as the sidecar gets it (COHORT_HANG_TIMEOUT): nullopt for the
// automatic timeout, zero for off.
struct HangTimeout {
  std::optional<absl::Duration> fixed;
  bool off() const { return fixed && *fixed == absl::ZeroDuration(); }
};
// "auto" (or empty), a number of seconds, or a duration ("90s"). InvalidArgument naming the
// variable and what it takes otherwise.
absl::StatusOr<HangTimeout> ParseHangTimeout(absl::string_view value);

// The automatic timeout: kWarmUpTimeout until a rank has made two steps in this attempt (a first
// compile or a load may take long), then max(kMinTimeout, kStepsOfTimeout x the job's median
// step). A rank in a phase that legitimately takes long (init, compile, checkpoint) gets at least
// kWarmUpTimeout whatever the setting.
inline constexpr absl::Duration kWarmUpTimeout = absl::Minutes(10);
inline constexpr absl::Duration kMinTimeout = absl::Seconds(60);
inline constexpr int kStepsOfTimeout = 5;
// A pod whose sidecar has not reported for this long tells nothing of its ranks (the sidecar or
// its node is gone: heartbeats find that).
inline constexpr absl::Duration kStaleReport = absl::Seconds(30);

struct HangFinding {
  google::protobuf::RepeatedPtrField<attemptspb::HungRank> outliers;  // The likeliest cause first.
  google::protobuf::RepeatedPtrField<attemptspb::RankGroup>
      groups;  // Every other rank that reported, by where.
};

class HangDetector {
 public:
  explicit HangDetector(HangTimeout timeout) : timeout_(timeout) {}

  // What pod `pod_index`'s sidecar said of its ranks at `now` (all it knows of: a rank of the pod
  // it does not name any more is forgotten).
  void Update(int32_t pod_index, const attemptspb::ReportHealthRequest& report, absl::Time now);
  // A new attempt: everything heard before was of the old processes.
  void Reset() { ranks_.clear(); }

  // The hang at `now`, if any: some rank made no progress (no step) for longer than its timeout
  // while not busy, and it is not only ranks waiting in a collective for one that still computes.
  std::optional<HangFinding> Check(absl::Time now) const;

  // The timeout that applies to `rank` now (InfiniteDuration: off, or nothing heard of it).
  absl::Duration TimeoutOf(int32_t rank) const;

 private:
  struct Heard {
    int32_t pod_index = 0;
    attemptspb::RankHealth health;
    absl::Time at;
  };
  absl::Duration TimeoutOf(const Heard& h, absl::Duration job_median) const;
  absl::Duration JobMedianStep() const;

  HangTimeout timeout_;
  std::map<int32_t, Heard> ranks_;
};

// "train.py:88" of a where ("train.py:88 in step: time.sleep(3600)").
std::string WhereLine(absl::string_view where);

}  // namespace cohort::coordination
