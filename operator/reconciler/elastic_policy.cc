#include "operator/reconciler/elastic_policy.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rfc3339.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/decision_pass.h"
#include "operator/reconciler/in_place_policy.h"

namespace cohort::op {
namespace {

using PodPhase = ObservedPod::Phase;

int32_t PodsPerGroup(const DecisionPass& pass) {
  return std::max(pass.spec.elastic->pods_per_group, 1);
}

// "group 2 (pods train-4, train-5)"
std::string DescribeGroups(const DecisionPass& pass, const std::set<int32_t>& groups) {
  std::vector<std::string> out;
  const int32_t per_group = PodsPerGroup(pass);
  for (int32_t g : groups) {
    std::vector<std::string> pods;
    for (int32_t k = g * per_group; k < (g + 1) * per_group; ++k)
      pods.push_back(PodName(pass.job, k));
    out.push_back(absl::StrCat("group ", g, " (pods ", absl::StrJoin(pods, ", "), ")"));
  }
  return absl::StrJoin(out, ", ");
}

// The pods that can run an attempt now, by pod index: of the gang (staying or new), not being
// deleted, and following the attempt hub (its order reaches them).
std::map<int32_t, const ObservedPod*> ReadyToRun(const DecisionPass& pass) {
  std::map<int32_t, const ObservedPod*> ready;
  for (const std::vector<const ObservedPod*>* pods : {&pass.current, &pass.waiting}) {
    for (const ObservedPod* p : *pods) {
      if (p->terminating || p->rank < 0 || p->rank >= pass.spec.replicas) continue;
      if (pass.view != nullptr && pass.view->following.count(p->rank)) ready[p->rank] = p;
    }
  }
  return ready;
}

// The replica groups (of spec.replicas) with a pod that cannot run an attempt now, and why for
// the first of their pods ("pod train-5 is Pending").
std::set<int32_t> GroupsNotReady(const DecisionPass& pass, std::string* why) {
  const std::map<int32_t, const ObservedPod*> ready = ReadyToRun(pass);
  std::map<int32_t, const ObservedPod*> any;
  for (const std::vector<const ObservedPod*>* pods : {&pass.current, &pass.waiting}) {
    for (const ObservedPod* p : *pods) {
      if (!p->terminating) any[p->rank] = p;
    }
  }
  std::set<int32_t> groups;
  const int32_t per_group = PodsPerGroup(pass);
  for (int32_t k = 0; k < pass.spec.replicas; ++k) {
    if (ready.count(k)) continue;
    if (groups.insert(k / per_group).second && why != nullptr && why->empty()) {
      auto it = any.find(k);
      *why = it == any.end() ? absl::StrCat("pod ", PodName(pass.job, k), " is gone")
             : it->second->phase == PodPhase::kPending
                 ? absl::StrCat("pod ", it->second->name, " is Pending",
                                it->second->unscheduled_reason.empty()
                                    ? ""
                                    : absl::StrCat(" (", it->second->unscheduled_reason, ")"))
                 : absl::StrCat("pod ", it->second->name, "'s sidecar does not follow the hub");
    }
  }
  return groups;
}

// The layout the running attempt has (nullopt: every pod of spec.replicas, or not known).
const AttemptLayout* RunningLayout(const DecisionPass& pass) {
  if (pass.view == nullptr || !pass.view->heard || !pass.view->layout ||
      pass.view->attempt != pass.status.restart_attempt) {
    return nullptr;
  }
  return &*pass.view->layout;
}

// When the attempt before the one being started broke: its first process's end the hub heard of
// (a lost pod's group waits shrinkAfterSeconds from the loss), else when the restart began (the
// Restarting condition turned False when the backoff ended, and the backoff was its length).
absl::Time RestartBegan(const DecisionPass& pass) {
  absl::Time began = pass.now;
  if (const Condition* restarting = FindCondition(pass.status.conditions, condition::kRestarting)) {
    const absl::Time ended = ParseRfc3339(restarting->last_transition_time).value_or(pass.now);
    const bool counted = pass.status.last_restart_kind == restart_kind::kFailure;
    began = ended - RestartBackoff(pass.spec, counted ? pass.status.restarts : 1);
  }
  if (pass.view != nullptr) {
    for (const auto& [pod, end] : pass.view->ends) {
      if (end.finished_at > absl::UnixEpoch()) began = std::min(began, end.finished_at);
    }
  }
  return began;
}

// The groups of the running attempt's layout that it runs without, below its slots.
std::set<int32_t> DroppedGroups(const DecisionPass& pass, const AttemptLayout& layout) {
  std::set<int32_t> groups;
  for (int32_t k : layout.absent) groups.insert(k / PodsPerGroup(pass));
  return groups;
}

}  // namespace

bool ElasticStart(DecisionPass& pass) {
  if (!pass.spec.elastic) return true;
  const int32_t per_group = PodsPerGroup(pass);
  const int32_t desired = DesiredReplicaGroups(pass.spec);
  std::string why;
  const std::set<int32_t> not_ready = GroupsNotReady(pass, &why);
  // A scale down: the pods beyond spec.replicas go now.
  for (const std::vector<const ObservedPod*>* pods : {&pass.current, &pass.waiting}) {
    for (const ObservedPod* p : *pods) {
      if (p->rank >= pass.spec.replicas) pass.DeleteAll({p});
    }
  }
  if (not_ready.empty()) {
    pass.decision.start_layout = LayoutWithout(pass.spec.replicas, per_group, {}, desired);
    return true;
  }
  const int32_t running = desired - static_cast<int32_t>(not_ready.size());
  const absl::Time shrink_at =
      RestartBegan(pass) + absl::Seconds(pass.spec.elastic->shrink_after_seconds);
  const bool holds_rank_zero = not_ready.count(0) > 0;
  if (pass.now < shrink_at || holds_rank_zero ||
      running * per_group < pass.spec.elastic->min_replicas) {
    // Waiting: for the group's pods (a spare, a replacement that gets a node), or, when it cannot
    // shrink, for as long as they take.
    const std::string message =
        pass.now < shrink_at
            ? absl::StrCat("restart attempt ", pass.status.restart_attempt, " waits up to ",
                           absl::FormatDuration(shrink_at - pass.now), " for ",
                           DescribeGroups(pass, not_ready), ": ", why,
                           "; then it runs without them (spec.elastic.shrinkAfterSeconds)")
            : absl::StrCat(
                  "restart attempt ", pass.status.restart_attempt, " waits for ",
                  DescribeGroups(pass, not_ready), ": ", why, "; ",
                  holds_rank_zero
                      ? "group 0 holds rank 0 and is never left out"
                      : absl::StrCat("without them the job would have ", running * per_group,
                                     " pods, fewer than spec.elastic.minReplicas (",
                                     pass.spec.elastic->min_replicas, ")"));
    pass.SetCondition(condition::kShrunk, true, reason::kWaitingForPods, message);
    pass.Requeue(pass.now < shrink_at ? std::min(absl::Seconds(1), shrink_at - pass.now)
                                      : absl::Seconds(1));
    return false;
  }
  pass.decision.start_layout = LayoutWithout(pass.spec.replicas, per_group, not_ready, desired);
  return true;
}

Verdict ResizeElastic(DecisionPass& pass) {
  if (!pass.spec.elastic || pass.status.phase != Phase::kRunning) return Verdict::kContinue;
  const AttemptLayout* layout = RunningLayout(pass);
  if (layout == nullptr) return Verdict::kContinue;
  const Condition* resizing = FindCondition(pass.status.conditions, condition::kResizing);
  if (resizing != nullptr && resizing->status == "True") {
    // Drained: once every pod the attempt runs ended (at the sync point, 76), or the patience ran
    // out, the gang restarts at the new size. A rank that failed otherwise is a failure.
    bool all_ended = true, all_preempted = true;
    for (int32_t k = 0; k < layout->slots; ++k) {
      if (!layout->Position(k)) continue;
      auto end = pass.view->ends.find(k);
      all_ended &= end != pass.view->ends.end();
      all_preempted &= end == pass.view->ends.end() || end->second.exit_code == kPreemptedExitCode;
    }
    if (!all_preempted) return Verdict::kContinue;
    const absl::Time since = ParseRfc3339(resizing->last_transition_time).value_or(pass.now);
    if (!all_ended && pass.now < since + kDrainPatience) {
      pass.Requeue(std::min(absl::Seconds(1), since + kDrainPatience - pass.now));
      return Verdict::kDecided;
    }
    const std::string why =
        all_ended
            ? absl::StrCat("every rank stopped at the preemption sync point: ", resizing->message)
            : absl::StrCat(
                  "the ranks did not all stop at the preemption sync point within ",
                  absl::FormatDuration(kDrainPatience),
                  " (the steps since their last checkpoint are lost): ", resizing->message);
    pass.SetCondition(condition::kResizing, false, reason::kResized, why);
    pass.RestartGang(
        restart_kind::kResize, reason::kResize, event_type::kNormal, reason::kRestartedInPlace, why,
        absl::StrCat("; restarting the gang as restart attempt ", pass.status.restart_attempt + 1,
                     " (a resize does not count against maxRestarts)"),
        GangRestart{FailureCause::kPreempted}, absl::ZeroDuration());
    return Verdict::kDecided;
  }
  // Grow: a dropped group's pods all follow again; scale: spec.replicas is not what runs.
  const std::map<int32_t, const ObservedPod*> ready = ReadyToRun(pass);
  const int32_t per_group = PodsPerGroup(pass);
  std::set<int32_t> back;
  for (int32_t g = 0; g < DesiredReplicaGroups(pass.spec); ++g) {
    bool whole = true, absent = false;
    for (int32_t k = g * per_group; k < (g + 1) * per_group; ++k) {
      whole &= ready.count(k) > 0 && ready.at(k)->ready;
      absent |= !layout->Position(k).has_value();
    }
    if (whole && absent) back.insert(g);
  }
  std::string reason_text;
  if (!back.empty()) {
    reason_text = absl::StrCat("grow to ", layout->replica_groups + back.size(), " of ",
                               DesiredReplicaGroups(pass.spec),
                               " replica groups: ", DescribeGroups(pass, back),
                               back.size() == 1 ? " is" : " are", " ready again");
  } else if (pass.spec.replicas < layout->slots) {
    reason_text = absl::StrCat("scale down to ", pass.spec.replicas, " pods (spec.replicas)");
  }
  if (reason_text.empty()) return Verdict::kContinue;
  pass.SetCondition(condition::kResizing, true, reason::kDraining,
                    absl::StrCat("restart attempt ", pass.status.restart_attempt,
                                 " stops at the next preemption sync point to ", reason_text));
  if (resizing == nullptr || resizing->status != "True") {
    pass.Emit(event_type::kNormal, reason::kResizing,
              absl::StrCat("restart attempt ", pass.status.restart_attempt,
                           " stops at the next preemption sync point (every rank checkpoints "
                           "at the same step) to ",
                           reason_text));
  }
  pass.decision.drain_attempt = {pass.status.restart_attempt, reason_text};
  pass.Requeue(absl::Seconds(1));
  return Verdict::kDecided;
}

void KeepElastic(DecisionPass& pass) {
  if (!pass.spec.elastic) return;
  DistributedJobStatus& st = pass.status;
  if (const AttemptLayout* layout = RunningLayout(pass)) {
    st.replicas = layout->pods();
    st.replica_groups = layout->replica_groups;
    const std::set<int32_t> dropped = DroppedGroups(pass, *layout);
    const std::vector<int32_t> now(dropped.begin(), dropped.end());
    const std::vector<int32_t>& before = pass.job.status.dropped_replica_groups;
    st.dropped_replica_groups = now;
    const int32_t desired = DesiredReplicaGroups(pass.spec);
    if (!dropped.empty() && now != before) {
      const std::string message =
          absl::StrCat("restart attempt ", st.restart_attempt, " runs ", layout->replica_groups,
                       " of ", desired, " replica groups, without ", DescribeGroups(pass, dropped),
                       ": their pods did not run within spec.elastic.shrinkAfterSeconds (",
                       pass.spec.elastic->shrink_after_seconds, "s); ranks renumbered to 0-",
                       layout->pods() * ResolvedProcessesPerPod(pass.job) - 1,
                       "; they rejoin at a common step once their pods run");
      pass.SetCondition(condition::kShrunk, true, reason::kPodsLost, message);
      pass.Emit(event_type::kWarning, reason::kShrunk, message);
    } else if (dropped.empty() && layout->replica_groups == desired) {
      const Condition* shrunk = FindCondition(st.conditions, condition::kShrunk);
      if (shrunk == nullptr || shrunk->status != "False") {
        const std::string message = absl::StrCat("restart attempt ", st.restart_attempt,
                                                 " runs all ", desired, " replica groups");
        pass.SetCondition(condition::kShrunk, false, reason::kFullSize, message);
        if (!before.empty() || shrunk != nullptr)
          pass.Emit(event_type::kNormal, reason::kGrew, message);
      }
    } else if (!dropped.empty() && now == before &&
               layout->replica_groups > pass.job.status.replica_groups) {
      // Some groups came back, others are still out.
      pass.Emit(event_type::kNormal, reason::kGrew,
                absl::StrCat("restart attempt ", st.restart_attempt, " runs ",
                             layout->replica_groups, " of ", desired, " replica groups"));
    }
  } else if (st.replica_groups == 0) {
    st.replicas = pass.spec.replicas;
    st.replica_groups = DesiredReplicaGroups(pass.spec);
  }
  // Every slot has a pod while the job runs: a dropped group's (Pending, asking for capacity) and,
  // after a scale up, the new ones (idle until the attempt is resized).
  if (st.phase != Phase::kRunning) return;
  std::set<int32_t> present;
  for (const std::vector<const ObservedPod*>* pods : {&pass.current, &pass.waiting}) {
    for (const ObservedPod* p : *pods) {
      if (!p->terminating) present.insert(p->rank);
    }
  }
  for (int32_t k = 1; k < pass.spec.replicas; ++k) {
    if (!present.count(k) &&
        std::find(pass.decision.replace_ranks.begin(), pass.decision.replace_ranks.end(), k) ==
            pass.decision.replace_ranks.end()) {
      pass.decision.replace_ranks.push_back(k);
    }
  }
}

}  // namespace cohort::op
