#include "common/process/launch_protocol.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cohort::launch {

std::string FormatOrder(const AttemptOrder& order) {
  std::string line = absl::StrCat("attempt ", order.attempt);
  if (order.pod_index) absl::StrAppend(&line, " pod ", *order.pod_index);
  if (order.idle) {
    absl::StrAppend(&line, " idle");
  } else if (const std::optional<Placement>& p = order.placement) {
    absl::StrAppend(&line, " place ", p->position, " of ", p->pods, " groups ", p->replica_groups,
                    " of ", p->desired_replica_groups);
  }
  return line + "\n";
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
  size_t i = 1;
  auto number = [&f](size_t at, int32_t* out) {
    return at < f.size() && absl::SimpleAtoi(f[at], out) && *out >= 0;
  };
  if (i < f.size() && f[i] == "pod") {
    int32_t pod = 0;
    if (!number(i + 1, &pod)) return std::nullopt;
    order.pod_index = pod;
    i += 2;
  }
  if (i < f.size() && f[i] == "idle") {
    order.idle = true;
    ++i;
  } else if (i < f.size() && f[i] == "place") {
    Placement p;
    if (f.size() < i + 8 || !number(i + 1, &p.position) || f[i + 2] != "of" ||
        !number(i + 3, &p.pods) || f[i + 4] != "groups" || !number(i + 5, &p.replica_groups) ||
        f[i + 6] != "of" || !number(i + 7, &p.desired_replica_groups) || p.position >= p.pods) {
      return std::nullopt;
    }
    order.placement = p;
    i += 8;
  }
  if (i != f.size()) return std::nullopt;
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
