#include "common/process/launch_protocol.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort::launch {

std::string FormatOrder(const AttemptOrder& order) {
  if (!order.pod_index) return absl::StrCat("attempt ", order.attempt, "\n");
  return absl::StrCat("attempt ", order.attempt, " pod ", *order.pod_index, "\n");
}

std::string FormatEnded(const AttemptEnded& e) {
  std::string reason =
      e.reason.empty() || e.reason.find_first_of(" \n") != std::string::npos ? "Error" : e.reason;
  return absl::StrCat("ended ", e.attempt, " ", e.exit_code, " ", e.finished_unix_ms, " ", reason,
                      " ", absl::CEscape(e.message), "\n");
}

std::optional<AttemptOrder> ParseOrder(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  if (!absl::ConsumePrefix(&line, "attempt ")) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
  AttemptOrder order;
  if (!absl::SimpleAtoi(f[0], &order.attempt) || order.attempt < 0) return std::nullopt;
  if (f.size() == 1) return order;
  int32_t pod = 0;
  if (f.size() != 3 || f[1] != "pod" || !absl::SimpleAtoi(f[2], &pod) || pod < 0)
    return std::nullopt;
  order.pod_index = pod;
  return order;
}

std::optional<AttemptEnded> ParseEnded(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  if (!absl::ConsumePrefix(&line, "ended ")) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(' ', 4));
  AttemptEnded e;
  if (f.size() < 4 || !absl::SimpleAtoi(f[0], &e.attempt) ||
      !absl::SimpleAtoi(f[1], &e.exit_code) || !absl::SimpleAtoi(f[2], &e.finished_unix_ms) ||
      f[3].empty()) {
    return std::nullopt;
  }
  e.reason = std::string(f[3]);
  if (f.size() == 5 && !absl::CUnescape(f[4], &e.message)) return std::nullopt;
  return e;
}

}  // namespace cohort::launch
