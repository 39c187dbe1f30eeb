#include "operator/reconciler/preemption_policy.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/failure_policy.h"

namespace cohort::op {

Verdict HandlePreemption(DecisionPass& pass) {
  // The pod that was evicted or deleted comes first: the other ranks then exit 76 after the
  // sync point too, and failure rules (onPodConditions) must see the one the cluster took.
  const ObservedPod* preempted = nullptr;
  for (const ObservedPod* p : pass.current) {
    if (!pass.Runs(p->rank)) continue;  // An elastic job's pod the attempt leaves out.
    bool deleted_by_others =
        p->terminating && p->phase != ObservedPod::Phase::kSucceeded && !Failed(*p);
    if (p->disruption_target || deleted_by_others) {
      preempted = p;
      break;
    }
  }
  // Else a rank that checkpointed and exited 76, unless another one failed by itself: that is
  // the cause (RootCause), and HandleFailure counts it.
  if (preempted == nullptr) {
    const ObservedPod* root = RootCausePod(pass.current);
    if (root != nullptr && ExitKindOf(*root) == ExitKind::kPreempted) preempted = root;
  }
  const int32_t per_pod = ResolvedProcessesPerPod(pass.job);
  std::string why;
  if (preempted != nullptr) {
    why = absl::StrCat(Who(preempted->rank, preempted->name, per_pod), " was preempted or evicted");
  } else if (pass.status.phase == Phase::kRunning) {
    std::set<int32_t> present;
    for (const ObservedPod* p : pass.current) present.insert(p->rank);
    for (int32_t rank = 0; rank < pass.spec.replicas && why.empty(); ++rank) {
      if (!present.count(rank) && pass.Runs(rank))
        why = absl::StrCat(Who(rank, PodName(pass.job, rank), per_pod), " was deleted");
    }
  }
  if (why.empty()) return Verdict::kContinue;

  GangRestart cause{FailureCause::kPreempted,
                    preempted != nullptr ? preempted->finished_at : absl::InfinitePast(), ""};
  if (preempted != nullptr) {
    if (std::optional<RuleMatch> rule = MatchFailureRules(pass.spec.failure_rules, *preempted)) {
      ApplyFailureRule(pass, *rule, why, std::move(cause));
      return Verdict::kDecided;
    }
  }
  ++pass.status.preemptions;
  pass.RestartGang(
      restart_kind::kPreemption, reason::kPreemption, event_type::kNormal, reason::kPreempted, why,
      absl::StrCat("; restarting the gang as restart attempt ", pass.status.restart_attempt + 1,
                   " (preemptions do not count against maxRestarts)"),
      std::move(cause), RestartBackoff(pass.spec, 1));
  return Verdict::kDecided;
}

}  // namespace cohort::op
