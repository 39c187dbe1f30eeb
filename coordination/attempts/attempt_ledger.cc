#include "coordination/attempts/attempt_ledger.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::coordination {

void AttemptLedger::set_hang_detection(HangTimeout timeout, std::string dumps_base) {
  detector_ = HangDetector(timeout);
  dumps_base_ = std::move(dumps_base);
}

uint64_t AttemptLedger::wanted_dump() const {
  return hang_ && !hang_->dumps_complete() ? hang_->id() : 0;
}

absl::StatusOr<bool> AttemptLedger::MayStart(int32_t attempt) const {
  if (attempt == attempt_) return false;
  if (attempt != attempt_ + 1) {
    return absl::FailedPreconditionError(absl::StrCat("the job's processes run attempt ", attempt_,
                                                      ": the next one is ", attempt_ + 1, ", not ",
                                                      attempt));
  }
  return true;
}

bool AttemptLedger::Start(int32_t attempt, absl::Time now, std::optional<AttemptLayout> layout) {
  if (attempt <= attempt_) return false;
  attempt_ = attempt;
  started_ = now;
  layout_ = std::move(layout);
  ends_.clear();
  detector_.Reset();  // The new processes start from nothing.
  hang_.reset();
  dumped_.clear();
  return true;
}

bool AttemptLedger::RecordEnd(const attemptspb::AttemptEnd& end) {
  if (end.attempt() != attempt_) return false;
  ends_[end.pod_index()] = end;
  return true;
}

AttemptLedger::Evidence AttemptLedger::RecordHealth(const attemptspb::ReportHealthRequest& report,
                                                    absl::Time now) {
  if (report.attempt() != attempt_) return Evidence::kNone;
  detector_.Update(report.pod_index(), report, now);
  if (!hang_ || report.dumped_id() != hang_->id() || !dumped_.insert(report.pod_index()).second)
    return Evidence::kNone;
  hang_->set_pods_dumped(static_cast<int32_t>(dumped_.size()));
  if (hang_->dumps_complete() || hang_->pods_dumped() < hang_->pods_total())
    return Evidence::kDumped;
  hang_->set_dumps_complete(true);
  return Evidence::kComplete;
}

AttemptLedger::HangChange AttemptLedger::CheckHang(absl::Time now, int32_t pods_following) {
  std::optional<HangFinding> finding = detector_.Check(now);
  if (!finding) {
    if (!hang_) return HangChange::kNone;
    hang_.reset();
    return HangChange::kCleared;
  }
  if (hang_) {
    if (hang_->dumps_complete() || now - hang_found_ < kDumpPatience) return HangChange::kNone;
    hang_->set_dumps_complete(true);
    return HangChange::kGaveUp;
  }
  hang_.emplace();
  hang_found_ = now;
  dumped_.clear();
  // Unique and increasing across hubs of the job (a restarted rank 0 pod starts a new hub).
  hang_->set_id(static_cast<uint64_t>(absl::ToUnixMillis(now)));
  hang_->set_attempt(attempt_);
  hang_->set_detected_unix_ms(absl::ToUnixMillis(now));
  *hang_->mutable_outliers() = std::move(finding->outliers);
  *hang_->mutable_groups() = std::move(finding->groups);
  hang_->set_pods_total(pods_following);
  hang_->set_dumps_dir(absl::StrCat(dumps_base_, "/attempt-", attempt_));
  return HangChange::kFound;
}

}  // namespace cohort::coordination
