#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordination/core/deferred.h"
#include "coordination/core/types.h"

namespace cohort::coordination {

// The coordination service's key-value store: an ordered map plus the blocking gets waiting on
// keys that do not exist yet. Keys are normalized ("//a//b/" -> "a/b"). Meant for cluster
// configuration data (addresses, NCCL ids, small metadata), hence the size limits below.
//
// Not thread-safe: the CoordinationService owns it under its mutex. Waiter callbacks are never
// run inline; they are queued on the Deferred passed in, to run after the lock is released.
class KeyValueStore {
 public:
  static constexpr size_t kMaxKeyBytes = 4 << 10;
  static constexpr size_t kMaxValueBytes = 1 << 20;
  // What a caller's keys and values are held to: Cohort's protocol keeps to the limits above and
  // refuses an empty key (docs/protocol.md); the JAX port to none, as XLA's service (a GPU job's
  // topology value grows with the job).
  struct Limits {
    size_t max_key_bytes;
    size_t max_value_bytes;
    bool empty_key;  // "" (or "/") is a key like any other.
  };
  static constexpr Limits kCohortLimits{kMaxKeyBytes, kMaxValueBytes, false};
  static constexpr Limits kNoLimits{SIZE_MAX, SIZE_MAX, true};

  using ValueCallback = std::function<void(absl::StatusOr<std::string>)>;
  using Entries = KeyValueEntries;

  KeyValueStore() = default;
  KeyValueStore(const KeyValueStore&) = delete;
  KeyValueStore& operator=(const KeyValueStore&) = delete;

  // Strips leading/trailing slashes and collapses runs of '/'.
  static std::string NormalizeKey(absl::string_view key);

  // InvalidArgument for an empty key, an over-long key or an over-size value; AlreadyExists
  // (ErrorKind::kKeyExists) when the key exists and !allow_overwrite. Wakes every waiter of the
  // key.
  absl::Status Insert(absl::string_view key, std::string value, bool allow_overwrite,
                      Deferred* deferred, Limits limits = kCohortLimits);
  std::optional<std::string> Get(absl::string_view key) const;
  // Every entry below `directory/` (full keys), in key order.
  Entries GetDir(absl::string_view directory) const;
  // Calls fn(key, value) for each entry under `directory`, in key order, without copying them.
  void ForEachInDir(absl::string_view directory,
                    absl::FunctionRef<void(const std::string&, const std::string&)> fn) const;
  // Deletes the key and everything below `key/`. Returns how many entries went. The empty key
  // (which only `limits.empty_key` stores) is deleted alone, never everything below the root.
  size_t Delete(absl::string_view key, Limits limits = kCohortLimits);
  // Adds `delta` to the decimal integer stored at the key (a missing key counts as 0) and stores
  // the result as decimal text. InvalidArgument when the stored value is not an integer
  // (ErrorKind::kNotAnInteger) or the sum overflows int64 (the value is then unchanged).
  absl::StatusOr<int64_t> Increment(absl::string_view key, int64_t delta, Deferred* deferred,
                                    Limits limits = kCohortLimits);

  // Parks a blocking get until the key is inserted (callback gets the value), its deadline passes
  // (DeadlineExceeded) or it is cancelled. The key must be normalized and absent.
  void AddWaiter(OpId op, std::string key, absl::Time deadline, ValueCallback done);
  // Removes a waiter, handing back its callback (nullptr when it already completed).
  ValueCallback RemoveWaiter(OpId op);
  // Completes every waiter whose deadline is at or before `now`.
  void ExpireWaiters(absl::Time now, Deferred* deferred);
  // Completes every waiter with `status`.
  void FailAllWaiters(const absl::Status& status, Deferred* deferred);

  size_t size() const { return entries_.size(); }
  size_t num_waiters() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string key;
    absl::Time deadline;
    ValueCallback done;
  };
  void WakeWaitersLocked(const std::string& key, const std::string& value, Deferred* deferred);

  std::map<std::string, std::string, std::less<>> entries_;
  absl::flat_hash_map<OpId, Waiter> waiters_;
  absl::flat_hash_map<std::string, std::vector<OpId>> waiters_by_key_;
};

}  // namespace cohort::coordination
