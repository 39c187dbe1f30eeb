#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cohort/coordination/v1/attempts.pb.h"
#include "common/attempt_layout.h"
#include "common/hang_evidence.h"
#include "coordination/attempts/hang_detector.h"

// What rank 0's attempt hub (attempt_hub.h) knows of the job's processes: the attempt they run,
// how each pod's processes ended in it, and the hang found in it with how far its evidence got.
// Pure and clock-injected, like HangDetector, whose host it is: the hub passes the time and does
// the talking (orders, the state it publishes, the log).
namespace cohort::coordination {

class AttemptLedger {
 public:
  // How long the evidence of a hang is waited for: then it is complete with what came (the one
  // wait, common/hang_evidence.h).
  static constexpr absl::Duration kDumpPatience = hang_evidence::kEvidencePatience;

  explicit AttemptLedger(int32_t first_attempt) : attempt_(first_attempt) {}

  // Hang detection's timeout, and where each pod keeps a hang's evidence (`dumps_base`/attempt-N).
  void set_hang_detection(HangTimeout timeout, std::string dumps_base);

  int32_t attempt() const { return attempt_; }
  // When the current attempt was ordered (InfinitePast: the pods' first, never ordered).
  absl::Time started() const { return started_; }
  const std::map<int32_t, attemptspb::AttemptEnd>& ends() const { return ends_; }
  const std::optional<attemptspb::HangReport>& hang() const { return hang_; }
  // The hang whose evidence every pod is asked for (0: none).
  uint64_t wanted_dump() const;

  // Whether `attempt` may be ordered now: true when it is the next one, false when it is the
  // current one (a repeated order: the first one stands); FailedPrecondition otherwise.
  absl::StatusOr<bool> MayStart(int32_t attempt) const;
  // Starts `attempt` at `now` unless it is not after the current one (false: a concurrent order
  // won). The ends, the detector's reports and the hang were of the old processes: all go.
  // `layout`: the pods it runs (an elastic job's resize), nullopt for every pod of the job.
  bool Start(int32_t attempt, absl::Time now, std::optional<AttemptLayout> layout = std::nullopt);
  // The current attempt's layout (nullopt: every pod of the job).
  const std::optional<AttemptLayout>& layout() const { return layout_; }

  // A pod's processes ended; false (dropped) when of another attempt.
  bool RecordEnd(const attemptspb::AttemptEnd& end);

  // What a pod's sidecar said at `now` (dropped when of another attempt).
  enum class Evidence {
    kNone,      // Nothing changed of the hang's evidence.
    kDumped,    // The pod collected it (pods_dumped grew).
    kComplete,  // ... and with it every pod has: the evidence is complete.
  };
  Evidence RecordHealth(const attemptspb::ReportHealthRequest& report, absl::Time now);

  // Runs the detector at `now`, with `pods_following` pods that will be asked for evidence.
  enum class HangChange {
    kNone,
    kFound,    // A new hang (hang() has it, its evidence wanted).
    kCleared,  // The hung ranks moved again (hang() is empty).
    kGaveUp,   // kDumpPatience passed: the evidence is complete with the pods that collected it.
  };
  HangChange CheckHang(absl::Time now, int32_t pods_following);

 private:
  int32_t attempt_;
  absl::Time started_ = absl::InfinitePast();
  std::optional<AttemptLayout> layout_;
  std::map<int32_t, attemptspb::AttemptEnd> ends_;
  HangDetector detector_{HangTimeout{}};
  std::string dumps_base_;
  std::optional<attemptspb::HangReport> hang_;
  absl::Time hang_found_;
  std::set<int32_t> dumped_;  // Pods that collected hang_'s evidence.
};

}  // namespace cohort::coordination
