#pragma once

// Hot spares: which ready spare takes the slot of which pod that is gone. A slot is a pod index
// (the pod's ranks, in order): the spare that takes slot k runs pod k's ranks from the next
// attempt on, so ranks keep their order within and across pods whichever pod holds them. Pure:
// the reconciler gives what it observed and carries out what comes back.

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::op {

// A slot whose pod is gone (lost with its node, deleted or evicted) and must be held anew.
struct LostSlot {
  int32_t pod_index = 0;
  // The topology domain the gone pod ran in (the value of the job's topology label on its node),
  // "" when unknown or when the job asks for none.
  std::string domain;
};

// A spare pod that is ready: scheduled, its sidecar following the job's attempt hub.
struct ReadySpare {
  std::string name;
  std::string domain;  // As LostSlot::domain, for the spare's node.
};

struct SlotPlan {
  struct Assignment {
    int32_t pod_index = 0;
    std::string spare;
  };
  std::vector<Assignment> assignments;  // By pod index.
  // The slots no spare takes, by pod index, each with why: a replacement pod is created for
  // them as without spares.
  struct Unassigned {
    int32_t pod_index = 0;
    std::string why;
  };
  std::vector<Unassigned> unassigned;
};

// Gives each lost slot, lowest pod index first, a ready spare: one in the slot's domain when there
// is one (neighbours stay neighbours), else, unless `same_domain_required`, the first spare left
// (`spares` in the order they are preferred, e.g. oldest first). With `same_domain_required`, a
// slot whose domain is not known gets no spare. Slot 0 never goes to a spare:
// rank 0's pod hosts the job's coordination service and attempt hub, which a spare cannot take
// over in place (the gang is recreated instead). A spare is given at most one slot.
SlotPlan PlanSpareSlots(std::vector<LostSlot> lost, const std::vector<ReadySpare>& spares,
                        bool same_domain_required);

}  // namespace cohort::op
