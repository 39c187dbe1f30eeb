#include "coordination/core/error_details.h"

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cohort::coordination {
namespace {

// One "name=value" line per field, values C-escaped: read by this file alone, within one process
// (the payload also crosses Cohort's own wire with the status, where nobody reads it).
constexpr absl::string_view kDetailsUrl = "type.cohort.dev/cohort.coordination.v1.ErrorDetails";

void Field(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, name, "=", absl::CEscape(value), "\n");
}

template <typename Int>
bool ParseInt(absl::string_view text, Int* out) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return false;
  *out = static_cast<Int>(v);
  return true;
}

}  // namespace

absl::Status WithDetails(absl::Status status, const ErrorDetails& details) {
  std::string text;
  Field(&text, "kind", absl::StrCat(static_cast<int>(details.kind)));
  Field(&text, "barrier_id", details.barrier.id);
  Field(&text, "barrier_counter", absl::StrCat(details.barrier.counter));
  Field(&text, "first_task", absl::StrCat(details.barrier.first_task));
  Field(&text, "arrived", absl::StrCat(details.barrier.arrived));
  Field(&text, "participants", absl::StrCat(details.barrier.participants));
  Field(&text, "missing", absl::StrJoin(details.barrier.missing, ","));
  Field(&text, "task", absl::StrCat(details.task));
  Field(&text, "key", details.key);
  Field(&text, "value", details.value);
  Field(&text, "counter", absl::StrCat(details.counter));
  Field(&text, "code", absl::StrCat(details.code));
  Field(&text, "caller_named_every_task", details.caller_named_every_task ? "1" : "0");
  status.SetPayload(kDetailsUrl, absl::Cord(text));
  return status;
}

std::optional<ErrorDetails> DetailsOf(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kDetailsUrl);
  if (!payload) return std::nullopt;
  ErrorDetails d;
  for (absl::string_view line : absl::StrSplit(std::string(*payload), '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> field =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    std::string value;
    if (!absl::CUnescape(field.second, &value)) return std::nullopt;
    const absl::string_view name = field.first;
    bool ok = true;
    if (name == "kind") {
      int kind = 0;
      ok = ParseInt(value, &kind);
      d.kind = static_cast<ErrorKind>(kind);
    } else if (name == "barrier_id") {
      d.barrier.id = value;
    } else if (name == "barrier_counter") {
      ok = ParseInt(value, &d.barrier.counter);
    } else if (name == "first_task") {
      ok = ParseInt(value, &d.barrier.first_task);
    } else if (name == "arrived") {
      ok = ParseInt(value, &d.barrier.arrived);
    } else if (name == "participants") {
      ok = ParseInt(value, &d.barrier.participants);
    } else if (name == "missing") {
      for (absl::string_view t : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        TaskId task = 0;
        ok = ok && ParseInt(t, &task);
        d.barrier.missing.push_back(task);
      }
    } else if (name == "task") {
      ok = ParseInt(value, &d.task);
    } else if (name == "key") {
      d.key = value;
    } else if (name == "value") {
      d.value = value;
    } else if (name == "counter") {
      ok = ParseInt(value, &d.counter);
    } else if (name == "code") {
      ok = ParseInt(value, &d.code);
    } else if (name == "caller_named_every_task") {
      d.caller_named_every_task = value == "1";
    }
    if (!ok) return std::nullopt;
  }
  return d;
}

}  // namespace cohort::coordination
