#include "operator/reconciler/hang_policy.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/failure_cause.h"
#include "common/rfc3339.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/failure_policy.h"

namespace cohort::op {
namespace {

// A 10,000-rank hang stays one readable line: the first few of each list, then how many more.
constexpr size_t kMaxOutliersNamed = 3;
constexpr size_t kMaxGroupsNamed = 4;
constexpr size_t kMaxRangesNamed = 8;
constexpr size_t kMaxWhere = 200;  // Bytes of one stack line.
// An Event's message is cut at 1 KiB by events.k8s.io; the condition says the same.
constexpr size_t kMaxHangMessage = 1024;

std::string Where(const std::string& where) {
  return where.empty() ? "(stack unknown)" : std::string(TruncateUtf8(where, kMaxWhere));
}

// The pod of index `pod_index` among the attempt's (null when it has none).
const ObservedPod* PodOf(const DecisionPass& pass, int32_t pod_index) {
  for (const ObservedPod* p : pass.current) {
    if (p->rank == pod_index && !p->terminating) return p;
  }
  for (const ObservedPod* p : pass.current) {
    if (p->rank == pod_index) return p;
  }
  return nullptr;
}

std::string PodNameOf(const DecisionPass& pass, int32_t pod_index) {
  const ObservedPod* p = PodOf(pass, pod_index);
  return p != nullptr ? p->name : PodName(pass.job, pod_index);
}

// The pod spec.failurePolicy.rules judge for a hang: the first hung rank's (else a waiting
// rank's), as if its trainer container had ended with reason Hung, without an exit code (an
// onExitCodes matcher does not match it).
ObservedPod HungPod(const DecisionPass& pass, const AttemptView::Hang& hang) {
  int32_t pod_index = 0;
  if (!hang.outliers.empty()) {
    pod_index = hang.outliers[0].pod_index;
  } else if (!hang.groups.empty() && !hang.groups[0].ranks.empty()) {
    pod_index = hang.groups[0].ranks[0] / std::max(1, ResolvedProcessesPerPod(pass.job));
  }
  ObservedPod pod;
  if (const ObservedPod* seen = PodOf(pass, pod_index)) {
    pod = *seen;
  } else {
    pod.name = PodName(pass.job, pod_index);
    pod.rank = pod_index;
    pod.restart_attempt = pass.status.restart_attempt;
    pod.phase = ObservedPod::Phase::kRunning;
  }
  if (pod.trainer_name.empty()) pod.trainer_name = TrainerName(pass.job);
  pod.trainer_exit_code.reset();
  pod.trainer_reason = reason::kHung;
  bool found = false;
  for (ObservedPod::ContainerExit& c : pod.containers) {
    if (c.name != pod.trainer_name) continue;
    c.exit_code.reset();
    c.reason = reason::kHung;
    found = true;
  }
  if (!found) pod.containers.push_back({pod.trainer_name, std::nullopt, reason::kHung});
  return pod;
}

// Hung=True, or null.
const Condition* HungCondition(const DecisionPass& pass) {
  const Condition* hung = FindCondition(pass.status.conditions, condition::kHung);
  return hung != nullptr && hung->status == "True" ? hung : nullptr;
}

// Hung=False once no rank of the running attempt hangs; a job that never hung gets no condition.
void ClearHung(DecisionPass& pass) {
  if (HungCondition(pass) == nullptr) return;
  pass.SetCondition(
      condition::kHung, false, reason::kRecovered,
      absl::StrCat("no rank of restart attempt ", pass.status.restart_attempt, " is hung"));
}

// A later attempt than the hung one runs: Running turned True after Hung did (a restart turns
// Running False, the next attempt True again).
bool LaterAttemptRuns(const DecisionPass& pass) {
  const Condition* hung = HungCondition(pass);
  const Condition* running = FindCondition(pass.status.conditions, condition::kRunning);
  if (hung == nullptr || running == nullptr || running->status != "True") return false;
  std::optional<absl::Time> hung_since = ParseRfc3339(hung->last_transition_time);
  std::optional<absl::Time> running_since = ParseRfc3339(running->last_transition_time);
  return hung_since && running_since && *running_since > *hung_since;
}

}  // namespace

std::string RankRanges(std::vector<int32_t> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<std::string> ranges;
  size_t more = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (ranges.size() < kMaxRangesNamed) {
      ranges.push_back(i == j ? absl::StrCat(ranks[i]) : absl::StrCat(ranks[i], "-", ranks[j]));
    } else {
      more += j - i + 1;
    }
    i = j + 1;
  }
  std::string out = absl::StrJoin(ranges, ", ");
  if (more > 0) absl::StrAppend(&out, " and ", more, " more");
  return out;
}

std::string HangMessage(const DecisionPass& pass, const AttemptView::Hang& hang) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < hang.outliers.size() && i < kMaxOutliersNamed; ++i) {
    const AttemptView::Hang::Rank& r = hang.outliers[i];
    parts.push_back(absl::StrCat("rank ", r.rank, " (pod ", PodNameOf(pass, r.pod_index),
                                 ", local ", r.local, "): ", Where(r.where)));
  }
  if (hang.outliers.size() > kMaxOutliersNamed) {
    parts.push_back(
        absl::StrCat("and ", hang.outliers.size() - kMaxOutliersNamed, " more hung ranks"));
  }
  for (size_t i = 0; i < hang.groups.size() && i < kMaxGroupsNamed; ++i) {
    const AttemptView::Hang::Group& g = hang.groups[i];
    parts.push_back(absl::StrCat(g.ranks.size() == 1 ? "rank " : "ranks ", RankRanges(g.ranks),
                                 ": ", Where(g.where)));
  }
  if (hang.groups.size() > kMaxGroupsNamed) {
    parts.push_back(absl::StrCat("and ", hang.groups.size() - kMaxGroupsNamed,
                                 " more groups of waiting ranks"));
  }
  if (parts.empty()) parts.push_back("the hang detector named no rank");
  return std::string(TruncateUtf8(absl::StrJoin(parts, "; "), kMaxHangMessage));
}

Verdict HandleHang(DecisionPass& pass) {
  const AttemptView* view = pass.view;
  // Nothing heard from the hub (yet, or a recreated gang's): whether a rank hangs is not known, and
  // the condition stays, unless a later attempt than the hung one runs.
  if (view == nullptr || !view->heard) {
    if (LaterAttemptRuns(pass)) ClearHung(pass);
    return Verdict::kContinue;
  }
  const std::optional<AttemptView::Hang>& hang = view->hang;
  if (!hang || hang->attempt != pass.status.restart_attempt ||
      pass.status.phase != Phase::kRunning) {
    ClearHung(pass);
    return Verdict::kContinue;
  }
  const std::string message = HangMessage(pass, *hang);
  // Told once per hang: status.lastHangId keeps it so across passes and operator restarts.
  const bool told =
      HungCondition(pass) != nullptr && static_cast<int64_t>(hang->id) == pass.status.last_hang_id;
  pass.SetCondition(condition::kHung, true, reason::kHangDetected, message);
  if (!told) {
    pass.status.last_hang_id = static_cast<int64_t>(hang->id);
    pass.Emit(event_type::kWarning, reason::kHangDetected, message);
  }
  if (pass.spec.hang_policy == HangPolicy::kAlert) return Verdict::kContinue;

  // The stacks every pod dumps are the evidence: acting stops the processes that hold them. The
  // hub says when it is complete (the one wait: common/hang_evidence.h), and its next state
  // queues this job again; a hub gone says nothing more.
  if (!hang->dumps_complete && view->connected) return Verdict::kDecided;
  const std::string why = absl::StrCat("the job hung: ", message);
  if (pass.spec.hang_policy == HangPolicy::kFail) {
    pass.DeleteAll(pass.current);
    pass.decision.create_ranks.clear();
    pass.Finish(Phase::kFailed, reason::kHung,
                absl::StrCat(why, "; spec.hangPolicy is Fail: the job fails"));
    return Verdict::kDecided;
  }
  GangRestart cause{FailureCause::kHung, hang->detected_at, ""};  // kind: set by the restart
  if (std::optional<RuleMatch> rule =
          MatchFailureRules(pass.spec.failure_rules, HungPod(pass, *hang))) {
    ApplyFailureRule(pass, *rule, why, std::move(cause));
  } else {
    pass.CountedRestart(why, reason::kHung, std::move(cause));
  }
  return Verdict::kDecided;
}

}  // namespace cohort::op
