#pragma once

// spec.failurePolicy.rules, applied to the pod whose failure ended a restart attempt (the root
// cause, or the pod that was preempted): the first rule that matches decides (FailJob,
// RestartJob, RestartJobAndIgnoreMaxRestarts). Without a match, Decide() applies the default
// table of docs/operator.md (a preemption restarts without counting, a failure restarts counted
// until maxRestarts).

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/distributed_job.h"
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

}  // namespace cohort::op
