#include "operator/reconciler/spare_slots.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cohort::op {

SlotPlan PlanSpareSlots(std::vector<LostSlot> lost, const std::vector<ReadySpare>& spares,
                        bool same_domain_required) {
  std::sort(lost.begin(), lost.end(),
            [](const LostSlot& a, const LostSlot& b) { return a.pod_index < b.pod_index; });
  std::vector<bool> taken(spares.size(), false);
  auto find = [&](auto&& fits) -> int {
    for (size_t i = 0; i < spares.size(); ++i) {
      if (!taken[i] && fits(spares[i])) return static_cast<int>(i);
    }
    return -1;
  };
  SlotPlan plan;
  for (const LostSlot& slot : lost) {
    if (slot.pod_index == 0) {
      plan.unassigned.push_back({0,
                                 "rank 0's pod hosts the coordination service and the attempt hub: "
                                 "the gang is recreated"});
      continue;
    }
    int pick = -1;
    if (!slot.domain.empty())
      pick = find([&](const ReadySpare& s) { return s.domain == slot.domain; });
    if (pick < 0 && !same_domain_required) pick = find([](const ReadySpare&) { return true; });
    if (pick < 0) {
      std::string why = "no spare is ready";
      if (std::find(taken.begin(), taken.end(), false) != taken.end()) {
        why = slot.domain.empty()
                  ? "its topology domain is not known, and the job requires one"
                  : absl::StrCat("no ready spare is in its topology domain, ", slot.domain);
      }
      plan.unassigned.push_back({slot.pod_index, why});
      continue;
    }
    taken[static_cast<size_t>(pick)] = true;
    plan.assignments.push_back({slot.pod_index, spares[static_cast<size_t>(pick)].name});
  }
  return plan;
}

}  // namespace cohort::op
