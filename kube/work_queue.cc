#include "kube/work_queue.h"

#include <algorithm>
#include <utility>

namespace cohort::kube {

void WorkQueue::AddLocked(const std::string& key) {
  if (processing_.contains(key)) {
    dirty_.insert(key);
    return;
  }
  if (queued_.insert(key).second) ready_.push_back(key);
}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  delayed_.erase(key);  // Due now supersedes due later.
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  if (delay <= absl::ZeroDuration()) {
    Add(key);
    return;
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_ || queued_.contains(key)) return;
  absl::Time at = clock_->Now() + delay;
  auto [it, inserted] = delayed_.try_emplace(key, at);
  if (!inserted) it->second = std::min(it->second, at);
}

void WorkQueue::PromoteDueLocked() {
  absl::Time now = clock_->Now();
  std::vector<std::pair<absl::Time, std::string>> due;  // Earliest first, then by key.
  for (const auto& [key, at] : delayed_) {
    if (at <= now) due.emplace_back(at, key);
  }
  std::sort(due.begin(), due.end());
  for (const auto& [at, key] : due) {
    delayed_.erase(key);
    AddLocked(key);
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  absl::MutexLock lock(&mu_);
  PromoteDueLocked();
  if (ready_.empty()) return std::nullopt;
  std::string key = std::move(ready_.front());
  ready_.pop_front();
  queued_.erase(key);
  processing_.insert(key);
  return key;
}

std::optional<std::string> WorkQueue::Get() {
  while (true) {
    if (std::optional<std::string> key = TryGet()) return key;
    absl::MutexLock lock(&mu_);
    if (shut_down_) return std::nullopt;
    // Sleep until the earliest delayed key is due, or an Add/ShutDown.
    absl::Time wake = absl::InfiniteFuture();
    for (const auto& [key, at] : delayed_) wake = std::min(wake, at);
    auto woken = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !ready_.empty() || shut_down_; };
    mu_.AwaitWithDeadline(absl::Condition(&woken), wake == absl::InfiniteFuture()
                                                       ? absl::InfiniteFuture()
                                                       : absl::Now() + (wake - clock_->Now()));
  }
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  if (dirty_.erase(key) > 0 && !shut_down_) AddLocked(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

size_t WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  return ready_.size() + delayed_.size();
}

}  // namespace cohort::kube
