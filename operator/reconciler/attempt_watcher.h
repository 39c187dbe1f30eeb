#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/attempt_layout.h"
#include "operator/reconciler/attempt_view.h"

namespace cohort::op {

// The operator's line to every in-place job's attempt hub (rank 0's sidecar): one stream per
// job, kept open by the implementation (operator/runtime/hub_attempt_watcher.h), whose every
// change queues the job for a reconcile pass. The reconciler reads the last view in its pass and
// orders the next attempt through it: no API write per pod, one stream per job.
class AttemptWatcher {
 public:
  virtual ~AttemptWatcher() = default;
  // Keeps a stream to the hub at `address` for job `key` ("<ns>/<name>"), authenticated with
  // `token`; a different address replaces the stream (rank 0's pod was recreated).
  virtual void Watch(const std::string& key, const std::string& address,
                     const std::string& token) = 0;
  // Ends the job's stream but keeps what the hub said last (the job finished: its pods are
  // still counted by it).
  virtual void Close(const std::string& key) = 0;
  // Ends the job's stream and drops its view (the job was deleted, or does not restart in place).
  virtual void Forget(const std::string& key) = 0;
  // What the job's hub said last; `heard` false while watched but silent so far; nullopt when the
  // job is not watched (or after Forget).
  virtual std::optional<AttemptView> View(const std::string& key) = 0;
  // Orders `attempt` from the job's hub, `assignments` giving spares (by pod name) the slots
  // (pod indexes) of pods that are gone, `layout` the pods it runs (an elastic job's; nullopt:
  // every pod). FailedPrecondition when the job is not watched, or the hub cannot carry the
  // assignments out (a spare stopped following).
  virtual absl::Status Start(const std::string& key, int32_t attempt,
                             const std::vector<std::pair<int32_t, std::string>>& assignments,
                             const std::optional<AttemptLayout>& layout) = 0;
  // Asks the processes of `attempt` (the running one) to stop at a common step: an elastic job's
  // resize (the hub's DrainAttempt). FailedPrecondition when the job is not watched or runs
  // another attempt.
  virtual absl::Status Drain(const std::string& key, int32_t attempt,
                             const std::string& reason) = 0;
};

}  // namespace cohort::op
