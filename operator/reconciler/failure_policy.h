#pragma once

// Failures: the root cause of a failed restart attempt, and spec.failurePolicy.rules applied to
// the pod whose failure ended it (the root cause, or the pod that was preempted): the first rule
// that matches decides (FailJob, RestartJob, RestartJobAndIgnoreMaxRestarts). Without a match
// the default table of docs/operator.md applies (a preemption restarts without counting, a
// failure restarts counted until maxRestarts).

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/distributed_job.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

struct RuleMatch {
  size_t index = 0;  // In spec.failurePolicy.rules.
  FailureAction action = FailureAction::kRestartJob;
  std::string matched;  // What matched, e.g. "exit code 3 of container trainer".

  // "rule 0 (FailJob, exit code 3 of container trainer)".
  std::string Describe() const;
};

// The first rule every matcher of which matches `pod`; nullopt when none does, and always for a
// pod whose trainer exited kPeerFailureExitCode (75): it only followed another rank's failure,
// and rules match the root cause.
std::optional<RuleMatch> MatchFailureRules(const std::vector<FailureRule>& rules,
                                           const ObservedPod& pod);

// Does what `rule` says about the pod that ended the attempt; `why` describes that pod.
void ApplyFailureRule(DecisionPass& pass, const RuleMatch& rule, const std::string& why,
                      GangRestart cause);

// A failed rank ends the attempt. The root cause is the lowest rank that did not merely follow a
// peer's failure (exit 75); while only followers have failed and the rank that caused it may
// still report, the pass waits (3 s after the first follower finished, 10 s with rules) so the
// restart names the cause. Then the first matching rule, else a counted restart. Decides when a
// rank failed.
Verdict HandleFailure(DecisionPass& pass);

}  // namespace cohort::op
