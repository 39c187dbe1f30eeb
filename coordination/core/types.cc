#include "coordination/core/types.h"

#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace cohort::coordination {

Incarnation RandomIncarnation() {
  absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen, 1, UINT64_MAX);
}

absl::string_view TaskStateName(TaskState state) {
  switch (state) {
    case TaskState::kDisconnected:
      return "disconnected";
    case TaskState::kConnecting:
      return "connecting";
    case TaskState::kConnected:
      return "connected";
    case TaskState::kFailed:
      return "failed";
    case TaskState::kShutDown:
      return "shut_down";
  }
  return "unknown";
}

absl::string_view FailureCauseName(FailureCause cause) { return InfoOf(cause).label; }

namespace {
constexpr absl::string_view kSupersededUrl = "type.cohort.dev/cohort.coordination.v1.Superseded";
constexpr absl::string_view kAwaitingAttemptUrl =
    "type.cohort.dev/cohort.coordination.v1.AwaitingAttempt";
}  // namespace

absl::Status SupersededError(absl::string_view what) {
  absl::Status s =
      absl::AbortedError(absl::StrCat(what, " superseded by a retry of the same process"));
  s.SetPayload(kSupersededUrl, absl::Cord());
  return s;
}

bool IsSuperseded(const absl::Status& status) {
  return absl::IsAborted(status) && status.GetPayload(kSupersededUrl).has_value();
}

absl::Status AwaitingAttemptError(absl::string_view message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kAwaitingAttemptUrl, absl::Cord());
  return s;
}

bool IsAwaitingAttempt(const absl::Status& status) {
  return absl::IsUnavailable(status) && status.GetPayload(kAwaitingAttemptUrl).has_value();
}

}  // namespace cohort::coordination
