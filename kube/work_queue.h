#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace cohort::kube {

// The reconciler's queue of job keys ("namespace/name"), with client-go's workqueue semantics:
// a key waits at most once however often it is added; a key is never handed to two workers at
// once, and one added while being processed is queued again when Done() is called; AddAfter
// keeps the earliest of several delays. Level-triggered reconcile needs nothing more.
// Thread-safe.
class WorkQueue {
 public:
  explicit WorkQueue(Clock* clock) : clock_(clock) {}

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  // The next key ready now, marked in progress; nullopt when none is ready.
  std::optional<std::string> TryGet();
  // Blocks (in real time) until a key is ready; nullopt once ShutDown() was called.
  std::optional<std::string> Get();
  // Processing of `key` finished; it is queued again if it was added meanwhile.
  void Done(const std::string& key);
  void ShutDown();
  size_t Len() const;  // Keys ready or waiting to be.

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  mutable absl::Mutex mu_;
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> delayed_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::kube
