#include "coordination/core/key_value_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordination/core/error_details.h"

namespace cohort::coordination {

std::string KeyValueStore::NormalizeKey(absl::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    if (c == '/' && (out.empty() || out.back() == '/')) continue;
    out.push_back(c);
  }
  while (!out.empty() && out.back() == '/') out.pop_back();
  return out;
}

namespace {
absl::Status ValidateKey(absl::string_view raw, const std::string& key,
                         KeyValueStore::Limits limits) {
  if (key.empty() && !limits.empty_key) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", raw,
                     "' is empty after normalization; use a non-empty key such as "
                     "'config/lr'"));
  }
  if (key.size() > limits.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key of ", key.size(), " bytes is longer than the limit of ",
                     limits.max_key_bytes, " bytes; use a shorter key"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status KeyValueStore::Insert(absl::string_view raw_key, std::string value,
                                   bool allow_overwrite, Deferred* deferred, Limits limits) {
  std::string key = NormalizeKey(raw_key);
  if (absl::Status s = ValidateKey(raw_key, key, limits); !s.ok()) return s;
  if (value.size() > limits.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "value for key '%s' is %d bytes, over the limit of %d bytes (1 MiB); the key-value store "
        "is for coordination data: put large data in shared storage and store its path here",
        key, value.size(), limits.max_value_bytes));
  }
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    if (!allow_overwrite) {
      return WithDetails(absl::AlreadyExistsError(absl::StrCat(
                             "key '", key, "' already exists; set allow_overwrite to replace it")),
                         ErrorDetails{.kind = ErrorKind::kKeyExists, .key = key});
    }
    it->second = std::move(value);
  } else {
    it = entries_.emplace(key, std::move(value)).first;
  }
  WakeWaitersLocked(key, it->second, deferred);
  return absl::OkStatus();
}

std::optional<std::string> KeyValueStore::Get(absl::string_view raw_key) const {
  auto it = entries_.find(NormalizeKey(raw_key));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

KeyValueStore::Entries KeyValueStore::GetDir(absl::string_view directory) const {
  Entries out;
  ForEachInDir(directory, [&](const std::string& key, const std::string& value) {
    out.emplace_back(key, value);
  });
  return out;
}

void KeyValueStore::ForEachInDir(
    absl::string_view directory,
    absl::FunctionRef<void(const std::string&, const std::string&)> fn) const {
  std::string prefix = NormalizeKey(directory);
  if (!prefix.empty()) prefix.push_back('/');
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    fn(it->first, it->second);
  }
}

size_t KeyValueStore::Delete(absl::string_view raw_key, Limits limits) {
  std::string key = NormalizeKey(raw_key);
  if (key.empty()) return limits.empty_key ? entries_.erase(key) : 0;
  size_t erased = entries_.erase(key);
  std::string prefix = key + "/";
  auto it = entries_.lower_bound(prefix);
  while (it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    it = entries_.erase(it);
    ++erased;
  }
  return erased;
}

absl::StatusOr<int64_t> KeyValueStore::Increment(absl::string_view raw_key, int64_t delta,
                                                 Deferred* deferred, Limits limits) {
  std::string key = NormalizeKey(raw_key);
  if (absl::Status s = ValidateKey(raw_key, key, limits); !s.ok()) return s;
  int64_t current = 0;
  auto it = entries_.find(key);
  if (it != entries_.end() && !absl::SimpleAtoi(it->second, &current)) {
    return WithDetails(
        absl::InvalidArgumentError(
            absl::StrCat("key '", key,
                         "' holds a value that is not a decimal integer, so it "
                         "cannot be incremented; use a separate key for counters")),
        ErrorDetails{.kind = ErrorKind::kNotAnInteger, .key = key, .value = it->second});
  }
  int64_t next;
  if (__builtin_add_overflow(current, delta, &next)) {
    return absl::InvalidArgumentError(
        absl::StrCat("incrementing key '", key, "' (", current, ") by ", delta,
                     " overflows a 64-bit integer; the value is unchanged"));
  }
  std::string text = absl::StrCat(next);
  if (it == entries_.end()) {
    it = entries_.emplace(key, std::move(text)).first;
  } else {
    it->second = std::move(text);
  }
  WakeWaitersLocked(key, it->second, deferred);
  return next;
}

void KeyValueStore::AddWaiter(OpId op, std::string key, absl::Time deadline, ValueCallback done) {
  waiters_by_key_[key].push_back(op);
  waiters_.emplace(op, Waiter{std::move(key), deadline, std::move(done)});
}

KeyValueStore::ValueCallback KeyValueStore::RemoveWaiter(OpId op) {
  auto it = waiters_.find(op);
  if (it == waiters_.end()) return nullptr;
  ValueCallback done = std::move(it->second.done);
  auto by_key = waiters_by_key_.find(it->second.key);
  if (by_key != waiters_by_key_.end()) {
    auto& ops = by_key->second;
    ops.erase(std::remove(ops.begin(), ops.end(), op), ops.end());
    if (ops.empty()) waiters_by_key_.erase(by_key);
  }
  waiters_.erase(it);
  return done;
}

void KeyValueStore::WakeWaitersLocked(const std::string& key, const std::string& value,
                                      Deferred* deferred) {
  auto by_key = waiters_by_key_.find(key);
  if (by_key == waiters_by_key_.end()) return;
  std::vector<ValueCallback> callbacks;
  callbacks.reserve(by_key->second.size());
  for (OpId op : by_key->second) {
    auto it = waiters_.find(op);
    if (it == waiters_.end()) continue;
    callbacks.push_back(std::move(it->second.done));
    waiters_.erase(it);
  }
  waiters_by_key_.erase(by_key);
  // One deferred closure for all waiters of the key: a fan-out to 4,095 waiters shares one copy
  // of the value.
  deferred->Add([callbacks = std::move(callbacks), value]() mutable {
    for (auto& done : callbacks) done(value);
  });
}

void KeyValueStore::ExpireWaiters(absl::Time now, Deferred* deferred) {
  std::vector<OpId> expired;
  for (const auto& [op, waiter] : waiters_) {
    if (waiter.deadline <= now) expired.push_back(op);
  }
  for (OpId op : expired) {
    std::string key = waiters_.at(op).key;
    ValueCallback done = RemoveWaiter(op);
    deferred->Add([done = std::move(done), key] {
      done(absl::DeadlineExceededError(absl::StrCat(
          "timed out waiting for key '", key,
          "': no process set it in time; check the key name and that the process expected to "
          "set it is running")));
    });
  }
}

void KeyValueStore::FailAllWaiters(const absl::Status& status, Deferred* deferred) {
  for (auto& [op, waiter] : waiters_) {
    deferred->Add([done = std::move(waiter.done), status] { done(status); });
  }
  waiters_.clear();
  waiters_by_key_.clear();
}

}  // namespace cohort::coordination
