#pragma once

// The job's key-value store and its other calls, blocking: libdist's one place that turns the
// JobClient's callbacks into return values (the collectives, the preemption protocol and the
// public dist:: functions all go through it). Like gloo's Store and c10d's, a Store can be
// scoped: WithPrefix("collectives/world#0") gives a prefix store whose keys live under that
// directory, so a communicator's keys never meet another's.
//
// Every call is bounded (the JobClient bounds each RPC), so none of them can hang. Thread-safe:
// a Store is a small value; copies share the client.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordination/client/job_client.h"
#include "coordination/core/types.h"

namespace dist::internal {

class Store {
 public:
  Store() = default;  // No client: assign one before use.
  // `client` must outlive the Store (the runtime's, which lives as long as the job).
  explicit Store(cohort::coordination::JobClient* client) : client_(client) {}
  // Keeps `client` alive as long as a copy of this Store exists.
  explicit Store(std::shared_ptr<cohort::coordination::JobClient> client)
      : owner_(std::move(client)), client_(owner_.get()) {}

  // A store whose keys are `prefix()/scope/<key>`.
  Store WithPrefix(absl::string_view scope) const;
  const std::string& prefix() const { return prefix_; }

  // ---- Keys (relative to the prefix) ----
  absl::Status Set(absl::string_view key, absl::string_view value, bool allow_overwrite = true);
  // Waits for the key until `deadline`: DeadlineExceeded when it never appeared.
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Time deadline);
  // NotFound when the key is not set now.
  absl::StatusOr<std::string> TryGet(absl::string_view key);
  // Adds `delta` to the integer under `key` (0 when unset) and returns the sum.
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta);
  // Every key under `directory`, with its full name.
  absl::StatusOr<cohort::coordination::KeyValueEntries> Dir(absl::string_view directory);
  absl::Status Delete(absl::string_view key);

  // ---- The job's other calls (not prefixed) ----
  absl::Status Barrier(absl::string_view id, absl::Duration timeout,
                       const std::vector<int>& process_ids);
  absl::Status CancelBarrier(absl::string_view id);
  absl::Status ReportPreemption();
  absl::Status ReportError(cohort::coordination::FailureCause cause, absl::string_view message);
  absl::StatusOr<std::vector<cohort::coordination::TaskProgress>> JobProgress();
  absl::Status Shutdown();

 private:
  std::string Key(absl::string_view key) const;

  std::shared_ptr<cohort::coordination::JobClient> owner_;
  cohort::coordination::JobClient* client_ = nullptr;
  std::string prefix_;  // Empty, or ends without '/'.
};

}  // namespace dist::internal
