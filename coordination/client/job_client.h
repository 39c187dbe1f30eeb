#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

// How long a call that does not wait on peers (a set, a try-get, an error report) may take
// before the client gives up on the transport.
inline constexpr absl::Duration kShortCallTimeout = absl::Seconds(30);
// Added to the timeout of a call that waits on peers (a blocking get, a barrier), which the
// service enforces itself, for the client's own transport deadline: the service's answer, not
// the transport's, should end the call.
inline constexpr absl::Duration kWaitingCallSlack = absl::Seconds(10);

// The calls a process makes on its job once it has joined: the key-value store, barriers,
// preemption notices, error reports and the shutdown barrier, in Cohort's own types. It hides
// how the job is reached: Agent talks to the coordination service itself (the sidecar, and
// libdist's standalone mode); libdist's SidecarClient goes through the pod's sidecar; tests use
// a fake (tests/coordination/client/fake_job_client.h).
//
// Each call is asynchronous: `done` runs exactly once, on an arbitrary thread, possibly before
// the call returns. Every call is bounded (by its own timeout or kShortCallTimeout). Status codes
// keep the meanings of docs/protocol.md: InvalidArgument the caller's mistake, FailedPrecondition
// wrong state, AlreadyExists, NotFound, DeadlineExceeded (naming who was missing), Cancelled,
// Aborted (the job failed), Unavailable (the service or the sidecar is unreachable).
//
// Implementations are thread-safe.
class JobClient {
 public:
  using DoneCallback = std::function<void(absl::Status)>;
  using ValueCallback = std::function<void(absl::StatusOr<std::string>)>;
  using EntriesCallback = std::function<void(absl::StatusOr<KeyValueEntries>)>;
  using IntCallback = std::function<void(absl::StatusOr<int64_t>)>;
  using ProgressCallback = std::function<void(absl::StatusOr<std::vector<TaskProgress>>)>;

  virtual ~JobClient() = default;

  // AlreadyExists when the key exists and !allow_overwrite.
  virtual void InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                              DoneCallback done) = 0;
  // Waits up to `timeout` for the key to be set (DeadlineExceeded naming the key).
  virtual void GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) = 0;
  // NotFound when the key is not set.
  virtual void TryGetKeyValue(std::string key, ValueCallback done) = 0;
  // Every entry below `directory/`, in key order.
  virtual void GetKeyValueDir(std::string directory, EntriesCallback done) = 0;
  // The key and everything below `key/`.
  virtual void DeleteKeyValue(std::string key, DoneCallback done) = 0;
  // Atomic add (a missing key counts as 0); the new value.
  virtual void IncrementKeyValue(std::string key, int64_t increment, IntCallback done) = 0;
  // Waits until every participant (all tasks when empty) reached the barrier `id`; this process's
  // k-th call of an id joins the k-th instance. FailedPrecondition when this process already
  // waits in `id`.
  virtual void Barrier(std::string id, absl::Duration timeout, std::vector<TaskId> participants,
                       DoneCallback done) = 0;
  // Fails this process's ongoing barrier `id` for every participant (Cancelled).
  virtual void CancelBarrier(std::string id, DoneCallback done) = 0;
  // Tells the job that this process will be preempted.
  virtual void ReportPreemption(DoneCallback done) = 0;
  // Fails the job with `message`: every process is told.
  virtual void ReportError(FailureCause cause, std::string message, DoneCallback done) = 0;
  // This process's collective progress (libdist's communicators), which the agent carries to
  // the service on its next heartbeats. Replaces the previous report; never waits on peers.
  virtual void ReportProgress(std::vector<CollectiveProgress> progress, DoneCallback done) = 0;
  // This process's training step (dist::ReportProgress), which the agent carries to the service
  // on its next heartbeats. Replaces the previous report; never waits on peers.
  virtual void ReportStep(int64_t step, DoneCallback done) = 0;
  // Every task's state, heartbeat age and collective progress as the service holds them.
  virtual void GetJobProgress(ProgressCallback done) = 0;
  // The shutdown barrier: returns once every live process called it (or the shutdown timeout
  // passed). Afterwards the client is disconnected.
  virtual void Shutdown(DoneCallback done) = 0;
};

}  // namespace cohort::coordination
