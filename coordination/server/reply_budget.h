#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cohort::coordination {

// Bounds the bytes of replies that are built but not yet sent, so that 4,096 tasks reading a
// 4,096-key directory at once do not each materialize a large reply at the same moment (2 GB of
// protobuf objects held while the transport drains them). Work that builds a large reply asks
// Admit(); it runs at once while the total is under the cap and nothing is waiting, else in FIFO
// order as sent replies release their bytes. The cap is soft: work admitted concurrently may
// overshoot it, and one reply larger than the cap still goes out.
//
// Always held by a shared_ptr (Charge keeps it alive). Thread-safe.
class ReplyBudget : public std::enable_shared_from_this<ReplyBudget> {
 public:
  static constexpr size_t kDefaultCapBytes = 32 << 20;

  // The bytes of one built reply, held until the transport sent (or dropped) it: destroying or
  // resetting the Charge releases them. Move-only.
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept
        : budget_(std::move(other.budget_)), bytes_(std::exchange(other.bytes_, 0)) {}
    Charge& operator=(Charge&& other) noexcept {
      if (this != &other) {
        Reset();
        budget_ = std::move(other.budget_);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    ~Charge() { Reset(); }
    void Reset() {
      if (budget_ != nullptr) std::exchange(budget_, nullptr)->Release(std::exchange(bytes_, 0));
    }
    size_t bytes() const { return bytes_; }

   private:
    friend class ReplyBudget;
    Charge(std::shared_ptr<ReplyBudget> budget, size_t bytes)
        : budget_(std::move(budget)), bytes_(bytes) {}
    std::shared_ptr<ReplyBudget> budget_;
    size_t bytes_ = 0;
  };

  static std::shared_ptr<ReplyBudget> Create(size_t cap_bytes = kDefaultCapBytes) {
    return std::shared_ptr<ReplyBudget>(new ReplyBudget(cap_bytes));
  }
  ReplyBudget(const ReplyBudget&) = delete;
  ReplyBudget& operator=(const ReplyBudget&) = delete;

  // Runs `start` now (on this thread) or later (on the thread of a release); `start` must Take()
  // the bytes of the reply it builds.
  void Admit(std::function<void()> start) {
    bool run_now = false;
    {
      absl::MutexLock lock(&mu_);
      run_now = in_flight_ < cap_ && waiting_.empty();
      if (!run_now) waiting_.push_back(std::move(start));
    }
    if (run_now) start();
  }

  // Charges `bytes` until the returned Charge is released.
  Charge Take(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      in_flight_ += bytes;
    }
    return Charge(shared_from_this(), bytes);
  }

  size_t in_flight() const {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }
  size_t waiting() const {
    absl::MutexLock lock(&mu_);
    return waiting_.size();
  }
  // For tests and shutdown: wait (real time) until at least `n` pieces of work wait, or until
  // nothing is charged or waiting. False when `timeout` passed first.
  bool AwaitWaiting(size_t n, absl::Duration timeout) const {
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_.size() >= n; };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  bool AwaitIdle(absl::Duration timeout) const {
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_ == 0 && waiting_.empty();
    };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
  }

 private:
  explicit ReplyBudget(size_t cap_bytes) : cap_(cap_bytes) {}

  // A reply was sent (or dropped): its bytes are free again, and waiting work may run.
  void Release(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      in_flight_ -= std::min(bytes, in_flight_);
    }
    while (true) {
      std::function<void()> next;
      {
        absl::MutexLock lock(&mu_);
        if (in_flight_ >= cap_ || waiting_.empty()) return;
        next = std::move(waiting_.front());
        waiting_.pop_front();
      }
      next();
    }
  }

  const size_t cap_;
  mutable absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::coordination
