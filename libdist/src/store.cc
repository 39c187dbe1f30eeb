#include "libdist/src/store.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/utf8.h"
#include "coordination/client/await.h"

namespace dist::internal {

using cohort::coordination::Await;
using cohort::coordination::KeyValueEntries;
using cohort::coordination::TaskProgress;

namespace {

// Keys and barrier ids travel as proto3 strings: one that is not UTF-8 would make the request
// unparsable on the other side (gRPC's deserialization error, naming nothing). Refused here.
absl::Status CheckUtf8(absl::string_view what, absl::string_view key) {
  if (cohort::IsValidUtf8(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " \"", absl::CHexEscape(key),
      "\" is not UTF-8 text: keys and barrier ids must be UTF-8 strings (store binary data in "
      "the value, or hex- or base64-encode it in the key)"));
}

}  // namespace

Store Store::WithPrefix(absl::string_view scope) const {
  Store s = *this;
  s.prefix_ = Key(scope);
  return s;
}

std::string Store::Key(absl::string_view key) const {
  return prefix_.empty() ? std::string(key) : absl::StrCat(prefix_, "/", key);
}

absl::Status Store::Set(absl::string_view key, absl::string_view value, bool allow_overwrite) {
  if (absl::Status s = CheckUtf8("key", key); !s.ok()) return s;
  return Await<absl::Status>([&](auto done) {
    client_->InsertKeyValue(Key(key), std::string(value), allow_overwrite, std::move(done));
  });
}

absl::StatusOr<std::string> Store::Get(absl::string_view key, absl::Time deadline) {
  if (absl::Status s = CheckUtf8("key", key); !s.ok()) return s;
  const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
  return Await<absl::StatusOr<std::string>>(
      [&](auto done) { client_->GetKeyValue(Key(key), left, std::move(done)); });
}

absl::StatusOr<std::string> Store::TryGet(absl::string_view key) {
  if (absl::Status s = CheckUtf8("key", key); !s.ok()) return s;
  return Await<absl::StatusOr<std::string>>(
      [&](auto done) { client_->TryGetKeyValue(Key(key), std::move(done)); });
}

absl::StatusOr<int64_t> Store::Add(absl::string_view key, int64_t delta) {
  if (absl::Status s = CheckUtf8("key", key); !s.ok()) return s;
  return Await<absl::StatusOr<int64_t>>(
      [&](auto done) { client_->IncrementKeyValue(Key(key), delta, std::move(done)); });
}

absl::StatusOr<KeyValueEntries> Store::Dir(absl::string_view directory) {
  if (absl::Status s = CheckUtf8("directory", directory); !s.ok()) return s;
  return Await<absl::StatusOr<KeyValueEntries>>(
      [&](auto done) { client_->GetKeyValueDir(Key(directory), std::move(done)); });
}

absl::Status Store::Delete(absl::string_view key) {
  if (absl::Status s = CheckUtf8("key", key); !s.ok()) return s;
  return Await<absl::Status>(
      [&](auto done) { client_->DeleteKeyValue(Key(key), std::move(done)); });
}

absl::Status Store::Barrier(absl::string_view id, absl::Duration timeout,
                            const std::vector<int>& process_ids) {
  if (absl::Status s = CheckUtf8("barrier id", id); !s.ok()) return s;
  return Await<absl::Status>([&](auto done) {
    client_->Barrier(std::string(id), timeout, {process_ids.begin(), process_ids.end()},
                     std::move(done));
  });
}

absl::Status Store::CancelBarrier(absl::string_view id) {
  if (absl::Status s = CheckUtf8("barrier id", id); !s.ok()) return s;
  return Await<absl::Status>(
      [&](auto done) { client_->CancelBarrier(std::string(id), std::move(done)); });
}

absl::Status Store::ReportPreemption() {
  return Await<absl::Status>([&](auto done) { client_->ReportPreemption(std::move(done)); });
}

absl::Status Store::ReportError(cohort::coordination::FailureCause cause,
                                absl::string_view message) {
  return Await<absl::Status>(
      [&](auto done) { client_->ReportError(cause, std::string(message), std::move(done)); });
}

absl::StatusOr<std::vector<TaskProgress>> Store::JobProgress() {
  return Await<absl::StatusOr<std::vector<TaskProgress>>>(
      [&](auto done) { client_->GetJobProgress(std::move(done)); });
}

absl::Status Store::Shutdown() {
  return Await<absl::Status>([&](auto done) { client_->Shutdown(std::move(done)); });
}

}  // namespace dist::internal
