#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

// What cohort-launch and its pod's sidecar say to each other on the launch socket
// (COHORT_LAUNCH_SOCKET, set for spec.restartStrategy: InPlace), one line per message:
//
//   sidecar -> cohort-launch:  "attempt <n>"    run restart attempt n (sent on connect, then at
//   each new one)
//                              "attempt <n> pod <k>"  run it as pod index k from now on (a spare
//                              pod that took the slot of a pod that is gone: its processes' ranks
//                              are pod k's)
//   cohort-launch -> sidecar:  "ended <attempt> <exit code> <finished unix ms> <reason> <message>"
//                              the pod's processes of that attempt are gone, and how they ended
//
// The message is C-escaped (no newline in it); the reason is one word ("Error", "OOMKilled").
namespace cohort::launch {

struct AttemptEnded {
  int32_t attempt = 0;
  int32_t exit_code = 0;
  int64_t finished_unix_ms = 0;
  std::string reason = "Error";
  std::string message;
};

struct AttemptOrder {
  int32_t attempt = 0;
  std::optional<int32_t> pod_index;  // Set: the pod holds this slot from `attempt` on.
};

std::string FormatOrder(const AttemptOrder& order);
std::string FormatEnded(const AttemptEnded& ended);
// nullopt when `line` is not such a message.
std::optional<AttemptOrder> ParseOrder(absl::string_view line);
std::optional<AttemptEnded> ParseEnded(absl::string_view line);

}  // namespace cohort::launch
