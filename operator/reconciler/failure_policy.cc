#include "operator/reconciler/failure_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/reconciler/conditions.h"

namespace cohort::op {
namespace {

// When every failed rank only followed a peer's failure (libdist's exit code 75), the rank that
// caused it is usually still being reported: its kubelet writes a moment later. Wait this long
// after the first follower finished, so the restart's reason names the cause.
constexpr absl::Duration kRootCauseWait = absl::Seconds(3);
// With spec.failurePolicy.rules the decision depends on the root cause's exit code or reason,
// so the wait for it is longer (kubelets write finishedAt in whole seconds).
constexpr absl::Duration kRootCauseWaitWithRules = absl::Seconds(10);

// The terminated container a rule looks at: the one onExitCodes names, else the trainer.
const ObservedPod::ContainerExit* Target(const FailureRule& rule, const ObservedPod& pod) {
  const std::string& name = rule.on_exit_codes && !rule.on_exit_codes->container_name.empty()
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
    const bool present =
        std::any_of(pod.conditions.begin(), pod.conditions.end(),
                    [&](const auto& c) { return c.first == m.type && c.second == m.status; });
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
  if (Follower(pod)) return std::nullopt;
  for (size_t i = 0; i < rules.size(); ++i) {
    std::string matched = Matched(rules[i], pod);
    if (!matched.empty()) return RuleMatch{i, rules[i].action, std::move(matched)};
  }
  return std::nullopt;
}

void ApplyFailureRule(DecisionPass& pass, const RuleMatch& rule, const std::string& why,
                      GangRestart cause) {
  const std::string message = absl::StrCat(why, "; ", rule.Describe());
  switch (rule.action) {
    case FailureAction::kFailJob:
      pass.DeleteAll(pass.current);
      pass.decision.create_ranks.clear();
      pass.Finish(Phase::kFailed, reason::kFailurePolicy, absl::StrCat(message, ": the job fails"));
      return;
    case FailureAction::kRestartJob:
      pass.CountedRestart(message, reason::kFailurePolicy, std::move(cause));
      return;
    case FailureAction::kRestartJobAndIgnoreMaxRestarts:
      ++pass.status.uncounted_restarts;
      pass.RestartGang(
          restart_kind::kUncountedFailure, reason::kFailurePolicy, event_type::kWarning,
          reason::kGangRestart, message,
          absl::StrCat(": restarting the gang as restart attempt ", pass.status.restart_attempt + 1,
                       " (not counted against maxRestarts; uncounted restart ",
                       pass.status.uncounted_restarts, ")"),
          std::move(cause), RestartBackoff(pass.spec, 1));
      return;
  }
}

Verdict HandleFailure(DecisionPass& pass) {
  // Of the pods the attempt runs: an elastic job's pod it leaves out ends nothing of it.
  std::vector<const ObservedPod*> running;
  for (const ObservedPod* p : pass.current) {
    if (pass.Runs(p->rank)) running.push_back(p);
  }
  const ObservedPod* root = RootCausePod(running);
  if (root == nullptr) return Verdict::kContinue;
  if (Follower(*root)) {
    absl::Time first = absl::InfiniteFuture();
    bool cause_may_come = false;
    for (const ObservedPod* p : running) {
      if (Follower(*p)) first = std::min(first, p->finished_at);
      if (!p->trainer_exit_code && p->phase != ObservedPod::Phase::kFailed) cause_may_come = true;
    }
    const absl::Duration wait =
        pass.spec.failure_rules.empty() ? kRootCauseWait : kRootCauseWaitWithRules;
    if (cause_may_come && pass.now < first + wait) {
      pass.Requeue(first + wait - pass.now);
      return Verdict::kDecided;
    }
  }
  std::string why = Describe(*root, ResolvedProcessesPerPod(pass.job));
  GangRestart cause{RestartCause(*root), root->finished_at, ""};  // kind: set by the restart
  if (std::optional<RuleMatch> rule = MatchFailureRules(pass.spec.failure_rules, *root)) {
    ApplyFailureRule(pass, *rule, why, std::move(cause));
  } else {
    pass.CountedRestart(why, reason::kFailure, std::move(cause));
  }
  return Verdict::kDecided;
}

}  // namespace cohort::op
