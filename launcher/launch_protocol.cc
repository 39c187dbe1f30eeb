#include "launcher/launch_protocol.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort::launch {

std::string FormatAttempt(int32_t attempt) { return absl::StrCat("attempt ", attempt, "\n"); }

std::string FormatEnded(const AttemptEnded& e) {
  std::string reason = e.reason.empty() || e.reason.find_first_of(" \n") != std::string::npos ? "Error" : e.reason;
  return absl::StrCat("ended ", e.attempt, " ", e.exit_code, " ", e.finished_unix_ms, " ", reason, " ",
                      absl::CEscape(e.message), "\n");
}

std::optional<int32_t> ParseAttempt(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  int32_t n = 0;
  if (!absl::ConsumePrefix(&line, "attempt ") || !absl::SimpleAtoi(line, &n) || n < 0) return std::nullopt;
  return n;
}

std::optional<AttemptEnded> ParseEnded(absl::string_view line) {
  absl::ConsumeSuffix(&line, "\n");
  if (!absl::ConsumePrefix(&line, "ended ")) return std::nullopt;
  std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(' ', 4));
  AttemptEnded e;
  if (f.size() < 4 || !absl::SimpleAtoi(f[0], &e.attempt) || !absl::SimpleAtoi(f[1], &e.exit_code) ||
      !absl::SimpleAtoi(f[2], &e.finished_unix_ms) || f[3].empty()) {
    return std::nullopt;
  }
  e.reason = std::string(f[3]);
  if (f.size() == 5 && !absl::CUnescape(f[4], &e.message)) return std::nullopt;
  return e;
}

}  // namespace cohort::launch
