#include "operator/reconciler/failure_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort::op {
namespace {

// The terminated container a rule looks at: the one onExitCodes names, else the trainer.
const ObservedPod::ContainerExit* Target(const FailureRule& rule, const ObservedPod& pod) {
  const std::string& name =
      rule.on_exit_codes && !rule.on_exit_codes->container_name.empty()
          ? rule.on_exit_codes->container_name
          : pod.trainer_name;
  for (const ObservedPod::ContainerExit& c : pod.containers) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

// What `rule` matched in `pod` ("" when it does not match).
std::string Matched(const FailureRule& rule, const ObservedPod& pod) {
  std::vector<std::string> what;
  const ObservedPod::ContainerExit* target = Target(rule, pod);
  if (rule.on_exit_codes) {
    if (target == nullptr || !target->exit_code) return "";
    const std::vector<int32_t>& v = rule.on_exit_codes->values;
    const bool listed = std::find(v.begin(), v.end(), *target->exit_code) != v.end();
    if (listed != rule.on_exit_codes->in) return "";
    what.push_back(absl::StrCat("exit code ", *target->exit_code, " of container ", target->name));
  }
  if (!rule.on_termination_reasons.empty()) {
    const std::vector<std::string>& r = rule.on_termination_reasons;
    if (target == nullptr || std::find(r.begin(), r.end(), target->reason) == r.end()) return "";
    what.push_back(absl::StrCat("reason ", target->reason, " of container ", target->name));
  }
  for (const PodConditionMatcher& m : rule.on_pod_conditions) {
    const bool present = std::any_of(pod.conditions.begin(), pod.conditions.end(), [&](const auto& c) {
      return c.first == m.type && c.second == m.status;
    });
    if (!present) return "";
    what.push_back(absl::StrCat("condition ", m.type, "=", m.status));
  }
  return absl::StrJoin(what, ", ");
}

}  // namespace

std::string RuleMatch::Describe() const {
  return absl::StrCat("rule ", index, " (", FailureActionName(action), ", ", matched, ")");
}

std::optional<RuleMatch> MatchFailureRules(const std::vector<FailureRule>& rules,
                                           const ObservedPod& pod) {
  if (pod.trainer_exit_code && *pod.trainer_exit_code == kPeerFailureExitCode) return std::nullopt;
  for (size_t i = 0; i < rules.size(); ++i) {
    std::string matched = Matched(rules[i], pod);
    if (!matched.empty()) return RuleMatch{i, rules[i].action, std::move(matched)};
  }
  return std::nullopt;
}

}  // namespace cohort::op
