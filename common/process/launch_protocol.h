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
//                              "attempt <n> place <p> of <pods> groups <g> of <d>"  an elastic
//                              job's attempt (common/attempt_layout.h): the pod is at position p
//                              of the attempt's pods (its ranks start at p x processes per pod), g
//                              of the d replica groups the job wants run; "pod <k>" may come first
//                              "attempt <n> idle"  the attempt runs without this pod: its
//                              processes stop and none start until a later attempt
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

// Where an elastic job's attempt puts the pod (AttemptLayout::Position and its counts).
struct Placement {
  int32_t position = 0;
  int32_t pods = 0;
  int32_t replica_groups = 0;
  int32_t desired_replica_groups = 0;
  bool operator==(const Placement&) const = default;
};

struct AttemptOrder {
  int32_t attempt = 0;
  std::optional<int32_t> pod_index;  // Set: the pod holds this slot from `attempt` on.
  // Set: the attempt's shape, which the pod's environment (the job's full size) no longer says.
  std::optional<Placement> placement;
  bool idle = false;  // The attempt runs without this pod.
};

std::string FormatOrder(const AttemptOrder& order);
std::string FormatEnded(const AttemptEnded& ended);
// nullopt when `line` is not such a message.
std::optional<AttemptOrder> ParseOrder(absl::string_view line);
std::optional<AttemptEnded> ParseEnded(absl::string_view line);

}  // namespace cohort::launch
