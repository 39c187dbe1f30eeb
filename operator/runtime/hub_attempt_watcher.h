#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordination/attempts/attempt_client.h"
#include "operator/reconciler/attempt_watcher.h"

namespace cohort::op {

// What the operator reads of the hub's `state`; `before`, the view of the last state heard from
// the job's hub, carries who followed it earlier (AttemptView::followed) when it is the same hub.
AttemptView AttemptViewOf(const coordination::attemptspb::AttemptState& state,
                          const std::optional<AttemptView>& before);

// AttemptWatcher over gRPC: an AttemptObserver stream per job to its hub. `on_change(key)` runs
// (on the stream's thread) whenever a job's view changes or its stream breaks.
class HubAttemptWatcher final : public AttemptWatcher {
 public:
  explicit HubAttemptWatcher(std::function<void(const std::string& key)> on_change);
  ~HubAttemptWatcher() override;

  void Watch(const std::string& key, const std::string& address, const std::string& token) override;
  void Close(const std::string& key) override;
  void Forget(const std::string& key) override;
  std::optional<AttemptView> View(const std::string& key) override;
  absl::Status Start(const std::string& key, int32_t attempt,
                     const std::vector<std::pair<int32_t, std::string>>& assignments,
                     const std::optional<AttemptLayout>& layout) override;
  absl::Status Drain(const std::string& key, int32_t attempt, const std::string& reason) override;

 private:
  struct Job {
    std::string address;
    absl::Time since = absl::Now();  // Watched since.
    std::optional<AttemptView> view;
    std::unique_ptr<coordination::AttemptObserver> stream;
  };
  void OnState(const std::string& key, const std::string& address,
               const coordination::attemptspb::AttemptState& state);
  void OnBroken(const std::string& key, const std::string& address);
  // The job's stream, and its Job to keep it alive through a call; null when not watched.
  std::shared_ptr<Job> StreamOf(const std::string& key);

  std::function<void(const std::string&)> on_change_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::op
