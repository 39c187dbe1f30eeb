#include "kube/conditions.h"

#include <utility>

#include "common/rfc3339.h"
#include "kube/json_fields.h"

namespace cohort::kube {

using json = nlohmann::json;

const json* FindCondition(const json& conditions, absl::string_view type) {
  if (!conditions.is_array()) return nullptr;
  for (const json& c : conditions) {
    if (StringMember(c, "type") == type) return &c;
  }
  return nullptr;
}

std::string ConditionStatus(const json& object, absl::string_view type) {
  const json* c = FindCondition(Member(object, "status", "conditions"), type);
  return c != nullptr ? StringMember(*c, "status") : "";
}

json Condition(absl::string_view type, absl::string_view status, absl::string_view reason,
               absl::string_view message) {
  json condition = {{"type", type}, {"status", status}};
  if (!reason.empty()) condition["reason"] = reason;
  if (!message.empty()) condition["message"] = message;
  return condition;
}

bool SetCondition(json& conditions, json condition, absl::Time now) {
  if (!conditions.is_array()) conditions = json::array();
  const std::string type = StringMember(condition, "type");
  for (json& c : conditions) {
    if (StringMember(c, "type") != type) continue;
    const bool same_status = StringMember(c, "status") == StringMember(condition, "status");
    if (same_status && StringMember(c, "reason") == StringMember(condition, "reason") &&
        StringMember(c, "message") == StringMember(condition, "message")) {
      return false;
    }
    condition["lastTransitionTime"] = same_status && c.contains("lastTransitionTime")
                                          ? c["lastTransitionTime"]
                                          : json(FormatRfc3339(now));
    c = std::move(condition);
    return true;
  }
  condition["lastTransitionTime"] = FormatRfc3339(now);
  conditions.push_back(std::move(condition));
  return true;
}

const StatusCondition* FindCondition(const std::vector<StatusCondition>& conditions,
                                     absl::string_view type) {
  for (const StatusCondition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

void SetCondition(std::vector<StatusCondition>& conditions, StatusCondition condition) {
  for (StatusCondition& c : conditions) {
    if (c.type != condition.type) continue;
    if (c.status == condition.status) condition.last_transition_time = c.last_transition_time;
    c = std::move(condition);
    return;
  }
  conditions.push_back(std::move(condition));
}

}  // namespace cohort::kube
