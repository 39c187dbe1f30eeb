#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace cohort::coordination {

// Collects callbacks while a lock is held and runs them when it goes out of scope. Declare it
// before the lock so that it is destroyed (and the callbacks run) after the lock is released:
// user callbacks never run under the service's mutex.
class Deferred {
 public:
  Deferred() = default;
  Deferred(const Deferred&) = delete;
  Deferred& operator=(const Deferred&) = delete;
  ~Deferred() {
    for (auto& fn : fns_) fn();
  }
  void Add(std::function<void()> fn) { fns_.push_back(std::move(fn)); }

 private:
  std::vector<std::function<void()>> fns_;
};

}  // namespace cohort::coordination
