#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "operator/reconciler/attempt_watcher.h"

namespace cohort::op::testing {

// The job's attempt hub as the operator sees it, for unit tests of the reconciler: the view the
// test sets; the orders it was given. `on_start`, when set, runs inside Start (to look at the API
// objects at the moment of the order) and its status is what Start returns.
class FakeAttemptWatcher : public AttemptWatcher {
 public:
  void Watch(const std::string& key, const std::string& address, const std::string&) override {
    watched[key] = address;
  }
  void Close(const std::string& key) override { closed.push_back(key); }
  void Forget(const std::string& key) override {
    forgotten.push_back(key);
    watched.erase(key);
  }
  std::optional<AttemptView> View(const std::string&) override { return view; }
  absl::Status Start(const std::string&, int32_t attempt,
                     const std::vector<std::pair<int32_t, std::string>>& given,
                     const std::optional<AttemptLayout>& with) override {
    if (on_start) {
      if (absl::Status s = on_start(attempt); !s.ok()) return s;
    }
    started = attempt;
    assignments = given;
    layout = with;
    return absl::OkStatus();
  }
  absl::Status Drain(const std::string&, int32_t attempt, const std::string& reason) override {
    drained.emplace_back(attempt, reason);
    return absl::OkStatus();
  }

  std::optional<AttemptView> view;
  std::optional<int32_t> started;
  std::optional<AttemptLayout> layout;                   // Of the order started last.
  std::vector<std::pair<int32_t, std::string>> drained;  // Attempt, reason.
  std::vector<std::pair<int32_t, std::string>> assignments;
  std::function<absl::Status(int32_t attempt)> on_start;
  std::map<std::string, std::string> watched;  // Key -> the hub's address.
  std::vector<std::string> closed, forgotten;
};

}  // namespace cohort::op::testing
