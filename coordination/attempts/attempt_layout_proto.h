#pragma once

#include <optional>

#include "cohort/coordination/v1/attempts.pb.h"
#include "common/attempt_layout.h"

// AttemptLayout (common/attempt_layout.h) to and from its message in the attempt protocol: the
// hub, its followers and the operator's watcher all convert through here.
namespace cohort::coordination {

inline v1::AttemptLayout LayoutToProto(const AttemptLayout& layout) {
  v1::AttemptLayout out;
  out.set_slots(layout.slots);
  for (int32_t pod : layout.absent) out.add_absent(pod);
  out.set_replica_groups(layout.replica_groups);
  out.set_desired_replica_groups(layout.desired_replica_groups);
  return out;
}

// nullopt when the message has no layout (slots 0: every pod of the job).
inline std::optional<AttemptLayout> LayoutFromProto(const v1::AttemptLayout& layout) {
  if (layout.slots() == 0) return std::nullopt;
  AttemptLayout out;
  out.slots = layout.slots();
  out.absent.assign(layout.absent().begin(), layout.absent().end());
  out.replica_groups = layout.replica_groups();
  out.desired_replica_groups = layout.desired_replica_groups();
  return out;
}

}  // namespace cohort::coordination
