#include "libdist/src/failure_handlers.h"

#include <pthread.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "common/log.h"

namespace dist::internal {

FailureHandlers::Id FailureHandlers::Add(std::string name, absl::Duration bound, Handler handler) {
  absl::MutexLock lock(&mu_);
  Id id = ++last_id_;
  entries_.push_back(Entry{id, std::move(name), bound, std::move(handler)});
  return id;
}

void FailureHandlers::Remove(Id id) {
  absl::MutexLock lock(&mu_);
  entries_.erase(
      std::remove_if(entries_.begin(), entries_.end(), [id](const Entry& e) { return e.id == id; }),
      entries_.end());
}

void FailureHandlers::RunAll(const PeerFailure& failure) {
  std::vector<Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    entries = entries_;
  }
  for (Entry& entry : entries) {
    // Shared with the handler's thread, which outlives this call when the handler overruns.
    auto finished = std::make_shared<absl::Notification>();
    std::thread([finished, handler = std::move(entry.handler), failure] {
      pthread_setname_np(pthread_self(), "dist-on-failure");
      handler(failure);
      finished->Notify();
    }).detach();
    if (!clock_->WaitFor(*finished, entry.bound)) {
      cohort::LogWarning("libdist's failure handler '", entry.name, "' did not finish within ",
                         absl::FormatDuration(entry.bound),
                         " after the job failed; going on without it");
    }
  }
}

}  // namespace dist::internal
