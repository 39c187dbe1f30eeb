#include "operator/reconciler/spare_policy.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/old_pods_policy.h"
#include "operator/reconciler/spare_slots.h"

namespace cohort::op {
namespace {

using PodPhase = ObservedPod::Phase;

// The number in a spare's name (SparePodName), or -1.
int32_t SpareNumber(const DistributedJob& job, const std::string& name) {
  absl::string_view number = name;
  int32_t n = -1;
  if (!absl::ConsumePrefix(&number, absl::StrCat(job.name, "-spare")) ||
      !absl::SimpleAtoi(number, &n) || n < 0) {
    return -1;
  }
  return n;
}

// Why a spare must go and be replaced ("" when it may stay).
std::string WhyTheSpareGoes(const DecisionPass& pass, const ObservedPod& p) {
  if (p.trainer_exit_code)
    return absl::StrCat("has its trainer container (cohort-launch) ended with code ",
                        *p.trainer_exit_code);
  if (p.phase == PodPhase::kFailed || p.phase == PodPhase::kSucceeded) return "has ended";
  if (p.disruption_target) return "was evicted or preempted";
  // A gang recreated under a gang scheduler is admitted anew, spares with it: one of an earlier
  // attempt's group would hold its group (and quota) alive.
  if (GangScheduled(pass.spec) &&
      pass.status.last_restart_strategy == restart_strategy::kRecreate &&
      p.restart_attempt < pass.status.restart_attempt) {
    return absl::StrCat("belongs to restart attempt ", p.restart_attempt,
                        "'s pod group, and the gang was recreated");
  }
  return "";
}

bool Ready(const DecisionPass& pass, const ObservedPod& p) {
  if (p.terminating || p.phase != PodPhase::kRunning || !p.ready || p.trainer_exit_code)
    return false;
  if (pass.view == nullptr) return true;
  return pass.view->heard && pass.view->connected && pass.view->spares.count(p.name) > 0;
}

}  // namespace

std::vector<const ObservedPod*> ReadySpares(const DecisionPass& pass) {
  std::vector<const ObservedPod*> ready;
  for (const ObservedPod* p : pass.spares) {
    if (Ready(pass, *p) && WhyTheSpareGoes(pass, *p).empty()) ready.push_back(p);
  }
  std::stable_sort(ready.begin(), ready.end(), [](const ObservedPod* a, const ObservedPod* b) {
    return a->started_at != b->started_at ? a->started_at < b->started_at : a->name < b->name;
  });
  return ready;
}

SlotPlan PlanSlotsForSpares(const DecisionPass& pass, const std::vector<int32_t>& lost) {
  const std::optional<TopologyRequest> topology = SpareTopology(pass.job);
  // The gang's domain: where the pods that stay run, rank 0's first.
  std::string domain;
  if (topology) {
    for (const std::vector<const ObservedPod*>* pods : {&pass.waiting, &pass.current}) {
      for (const ObservedPod* p : *pods) {
        if (!p->terminating && !p->domain.empty() && (domain.empty() || p->rank == 0))
          domain = p->domain;
      }
    }
  }
  std::vector<LostSlot> slots;
  for (int32_t index : lost) slots.push_back({index, domain});
  std::vector<ReadySpare> spares;
  for (const ObservedPod* p : ReadySpares(pass))
    spares.push_back({p->name, topology ? p->domain : ""});
  return PlanSpareSlots(slots, spares, topology && topology->required);
}

std::set<int32_t> TakeSlotsWithSpares(DecisionPass& pass, const std::vector<int32_t>& lost) {
  std::set<int32_t> taken;
  if (lost.empty() || ReadySpares(pass).empty()) return taken;
  const SlotPlan plan = PlanSlotsForSpares(pass, lost);
  const int32_t per_pod = ResolvedProcessesPerPod(pass.job);
  for (const SlotPlan::Unassigned& u : plan.unassigned) {
    if (u.pod_index == 0 || u.why == "no spare is ready")
      continue;  // Said elsewhere, or nothing to say.
    const std::optional<TopologyRequest> topology = SpareTopology(pass.job);
    pass.Emit(event_type::kNormal, reason::kNoSpareForSlot,
              absl::StrCat("no ready spare can take the slot of ",
                           Who(u.pod_index, PodName(pass.job, u.pod_index), per_pod), ": ", u.why,
                           topology ? absl::StrCat(" (node label ", topology->node_label, ")") : "",
                           "; a replacement pod is created for it"));
  }
  for (const SlotPlan::Assignment& a : plan.assignments) {
    taken.insert(a.pod_index);
    pass.decision.relabel_spares.emplace_back(a.spare, a.pod_index);
    pass.decision.spare_assignments.emplace_back(a.pod_index, a.spare);
    pass.spares.erase(std::find_if(pass.spares.begin(), pass.spares.end(),
                                   [&](const ObservedPod* p) { return p->name == a.spare; }));
    pass.Emit(event_type::kNormal, reason::kSpareTakesSlot,
              absl::StrCat("spare pod ", a.spare, " takes the slot of ",
                           Who(a.pod_index, PodName(pass.job, a.pod_index), per_pod),
                           " in restart attempt ", pass.status.restart_attempt,
                           ": no pod is scheduled for it; a new spare is created"));
  }
  return taken;
}

void AssignLabelledSpares(DecisionPass& pass) {
  if (pass.view == nullptr) return;
  for (const ObservedPod* p : pass.current) {
    if (p->spare.empty() || p->terminating || !pass.view->spares.count(p->name)) continue;
    const bool already =
        std::any_of(pass.decision.spare_assignments.begin(), pass.decision.spare_assignments.end(),
                    [&](const auto& a) { return a.second == p->name; });
    if (!already) pass.decision.spare_assignments.emplace_back(p->rank, p->name);
  }
}

void DropSparesHoldingSlots(DecisionPass& pass) {
  auto began_as_spare = [](const ObservedPod* p) { return !p->spare.empty(); };
  for (const ObservedPod* p : pass.current) {
    if (began_as_spare(p)) {
      pass.DeleteAll({p});
      pass.old.push_back(p);
    }
  }
  pass.current.erase(std::remove_if(pass.current.begin(), pass.current.end(), began_as_spare),
                     pass.current.end());
}

void CheckLabelledSpares(DecisionPass& pass) {
  if (pass.view == nullptr) return;
  std::vector<const ObservedPod*> gone;
  for (const ObservedPod* p : pass.current) {
    if (p->spare.empty() || p->in_place || p->restart_attempt != pass.status.restart_attempt)
      continue;
    std::string why;
    if (p->terminating) {
      why = "is being deleted";
    } else if (p->disruption_target) {
      why = "was evicted or preempted";
    } else if (!pass.view->spares.count(p->name)) {
      why = "no longer follows the attempt hub";
    }
    if (why.empty()) continue;
    gone.push_back(p);
    pass.DeleteAll({p});
    pass.Emit(
        event_type::kWarning, reason::kReplacingSpare,
        absl::StrCat("spare pod ", p->name, ", given the slot of ",
                     Who(p->rank, PodName(pass.job, p->rank), ResolvedProcessesPerPod(pass.job)),
                     ", ", why, " before restart attempt ", pass.status.restart_attempt,
                     " started: deleting it; the slot goes to another spare or a replacement pod"));
  }
  for (const ObservedPod* p : gone) {
    pass.current.erase(std::find(pass.current.begin(), pass.current.end(), p));
    pass.old.push_back(p);
  }
}

void KeepSpares(DecisionPass& pass) {
  DistributedJobStatus& st = pass.status;
  st.slots.clear();
  for (const std::vector<const ObservedPod*>* pods : {&pass.current, &pass.waiting}) {
    for (const ObservedPod* p : *pods) {
      if (!p->terminating && p->name != PodName(pass.job, p->rank)) st.slots[p->rank] = p->name;
    }
  }
  // A spare stuck terminating on a lost node is force-deleted like a pod of the gang.
  ForceDeleteStuckPods(pass, pass.spares);
  const bool finished =
      st.phase == Phase::kSucceeded || st.phase == Phase::kFailed || st.phase == Phase::kSuspended;
  std::vector<const ObservedPod*> kept;
  for (const ObservedPod* p : pass.spares) {
    if (p->terminating) continue;
    if (finished) {
      pass.DeleteAll({p});  // Nothing left for it to take.
      continue;
    }
    if (std::string why = WhyTheSpareGoes(pass, *p); !why.empty()) {
      pass.DeleteAll({p});
      pass.Emit(event_type::kWarning, reason::kReplacingSpare,
                absl::StrCat("spare pod ", p->name, " ", why, ": deleting it",
                             pass.spec.spares > 0 ? " and creating another" : "",
                             "; the gang is not touched"));
      continue;
    }
    kept.push_back(p);
  }
  st.spares = 0;
  st.ready_spares = 0;
  if (finished) return;
  // spec.spares lowered: the ones not ready go first, then the newest.
  std::stable_sort(kept.begin(), kept.end(), [&](const ObservedPod* a, const ObservedPod* b) {
    const bool ra = Ready(pass, *a), rb = Ready(pass, *b);
    if (ra != rb) return ra;
    return a->started_at != b->started_at ? a->started_at < b->started_at : a->name < b->name;
  });
  while (static_cast<int32_t>(kept.size()) > std::max(pass.spec.spares, 0)) {
    pass.DeleteAll({kept.back()});
    kept.pop_back();
  }
  for (const ObservedPod* p : kept) {
    ++st.spares;
    if (Ready(pass, *p)) ++st.ready_spares;
  }
  // None are created for a spec that is not valid (or no longer allows spares). Under a gang
  // scheduler spares are pods of the gang's group: created with it (the pass that creates the
  // gang's pods), not alone into a group already admitted.
  const Condition* valid = FindCondition(st.conditions, condition::kSpecValid);
  if ((valid != nullptr && valid->status != "True") || !RestartsInPlace(pass.spec)) return;
  if (GangScheduled(pass.spec) && pass.decision.create_ranks.empty()) return;
  // The next number: past every spare seen too (a status write that was lost keeps no name from
  // being used twice).
  for (const std::vector<const ObservedPod*>* pods :
       {&pass.spares, &pass.current, &pass.waiting, &pass.old}) {
    for (const ObservedPod* p : *pods) {
      if (!p->spare.empty())
        st.spares_created = std::max(st.spares_created, SpareNumber(pass.job, p->spare) + 1);
    }
  }
  for (int32_t n = static_cast<int32_t>(kept.size()); n < pass.spec.spares; ++n) {
    pass.decision.create_spares.push_back(st.spares_created++);
  }
}

}  // namespace cohort::op
