#pragma once

// status.conditions of any kind (Pod, Node, Deployment, CRD), kept the way apimachinery's meta
// helpers keep them: one entry per type, lastTransitionTime moving only when the status does. As
// JSON (objects of any kind) or typed (StatusCondition, as a typed status such as the
// DistributedJob's holds them).

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cohort::kube {

// The condition of `type` in `conditions` (a status.conditions array; anything else holds none),
// or nullptr.
const nlohmann::json* FindCondition(const nlohmann::json& conditions, absl::string_view type);

// The status ("True", "False", "Unknown") of the condition of `type` in `object`'s
// status.conditions; "" when it has none.
std::string ConditionStatus(const nlohmann::json& object, absl::string_view type);

// A condition: {type, status, reason, message}, without a reason or message that is empty;
// `status` is "True", "False" or "Unknown".
nlohmann::json Condition(absl::string_view type, absl::string_view status, absl::string_view reason,
                         absl::string_view message);
inline const char* TrueOrFalse(bool value) { return value ? "True" : "False"; }

// Sets `condition` (an object with a "type") in `conditions` (made an array when it is not one)
// and returns whether anything changed, as apimachinery's meta.SetStatusCondition: a new type is
// appended with lastTransitionTime `now`; an existing one is replaced when its status, reason or
// message differs, keeping its lastTransitionTime unless the status changed. Other fields
// (lastUpdateTime, lastProbeTime) are written only with a change.
bool SetCondition(nlohmann::json& conditions, nlohmann::json condition, absl::Time now);

// A condition of a typed status (metav1.Condition).
struct StatusCondition {
  std::string type;
  std::string status;  // "True", "False", "Unknown".
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339.
  int64_t observed_generation = 0;

  bool operator==(const StatusCondition&) const = default;
};

// The condition of `type` in `conditions`, or nullptr.
const StatusCondition* FindCondition(const std::vector<StatusCondition>& conditions,
                                     absl::string_view type);
// Sets `condition` in `conditions`: a new type is appended as given; an existing one is replaced,
// keeping its lastTransitionTime when the status did not change.
void SetCondition(std::vector<StatusCondition>& conditions, StatusCondition condition);

}  // namespace cohort::kube
