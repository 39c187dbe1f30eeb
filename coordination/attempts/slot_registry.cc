#include "coordination/attempts/slot_registry.h"

#include "absl/strings/str_cat.h"

namespace cohort::coordination {

SlotRegistry::Admission SlotRegistry::Follow(StreamId stream, int32_t pod_index,
                                             const std::string& spare,
                                             const std::string& pod_name) {
  Admission a;
  auto holder = held_by_spare_.find(pod_index);
  if (!spare.empty() && pod_index == 0) {  // A spare holding no slot.
    if (auto old = spares_.find(spare); old != spares_.end()) {
      a.endings.push_back(
          {old->second, absl::AlreadyExistsError(absl::StrCat("spare ", spare, " follows anew"))});
    }
    spares_[spare] = stream;
    return a;
  }
  if (!spare.empty()) {  // The spare that took the slot, back.
    if (holder == held_by_spare_.end() || holder->second != spare) {
      a.refused = absl::FailedPreconditionError(absl::StrCat(
          "spare ", spare, " does not hold pod index ", pod_index,
          holder == held_by_spare_.end() ? std::string()
                                         : absl::StrCat(" (spare ", holder->second, " does)")));
      return a;
    }
    if (auto other = followers_.find(pod_index); other != followers_.end()) {
      a.endings.push_back(
          {other->second, absl::FailedPreconditionError(
                              absl::StrCat("pod index ", pod_index, " is held by spare ", spare))});
    }
    followers_[pod_index] = stream;
    return a;
  }
  if (auto d = displaced_.find(pod_index);
      d != displaced_.end() && !pod_name.empty() && d->second.contains(pod_name)) {
    a.refused = absl::FailedPreconditionError(absl::StrCat(
        "pod ", pod_name, " no longer holds pod index ", pod_index, ": a spare took its slot"));
    return a;
  }
  if (holder != held_by_spare_.end()) {
    if (followers_.contains(pod_index)) {
      a.refused = absl::FailedPreconditionError(absl::StrCat("pod index ", pod_index,
                                                             " is held by spare ", holder->second,
                                                             ", which took it in a restart"));
      return a;
    }
    held_by_spare_.erase(holder);  // The spare is gone: a pod of its own (a replacement) takes it.
  }
  if (!pod_name.empty()) seen_names_[pod_index].insert(pod_name);
  followers_[pod_index] = stream;  // A pod that follows again replaces its stream.
  return a;
}

bool SlotRegistry::Gone(StreamId stream) {
  bool changed = false;
  for (auto it = followers_.begin(); it != followers_.end();) {
    changed |= it->second == stream;
    it = it->second == stream ? followers_.erase(it) : std::next(it);
  }
  for (auto it = spares_.begin(); it != spares_.end();) {
    changed |= it->second == stream;
    it = it->second == stream ? spares_.erase(it) : std::next(it);
  }
  return changed;
}

void SlotRegistry::DropStreams() {
  followers_.clear();
  spares_.clear();
}

std::string SlotRegistry::CheckAssignments(
    const std::vector<attemptspb::SpareAssignment>& assignments) const {
  std::set<int32_t> pods;
  std::set<std::string> spares;
  for (const attemptspb::SpareAssignment& a : assignments) {
    if (a.pod_index() <= 0) {
      return absl::StrCat("pod index ", a.pod_index(), " cannot go to a spare: ",
                          a.pod_index() == 0
                              ? "rank 0's pod hosts the coordination service and this hub"
                              : "there is no such pod");
    }
    if (!spares_.contains(a.spare())) {
      return absl::StrCat("spare '", a.spare(),
                          "' does not follow the attempt hub (it is not ready, or gone)");
    }
    if (!pods.insert(a.pod_index()).second)
      return absl::StrCat("pod index ", a.pod_index(), " is given twice");
    if (!spares.insert(a.spare()).second)
      return absl::StrCat("spare '", a.spare(), "' is given two slots");
  }
  return "";
}

std::optional<SlotRegistry::StreamId> SlotRegistry::SpareStream(const std::string& spare) const {
  auto it = spares_.find(spare);
  if (it == spares_.end()) return std::nullopt;
  return it->second;
}

std::optional<SlotRegistry::Ending> SlotRegistry::GiveSlot(int32_t pod_index,
                                                           const std::string& spare,
                                                           int32_t attempt) {
  auto it = spares_.find(spare);
  if (it == spares_.end()) return std::nullopt;
  std::optional<Ending> ending;
  if (auto old = followers_.find(pod_index); old != followers_.end() && old->second != it->second) {
    ending = Ending{old->second, absl::FailedPreconditionError(
                                     absl::StrCat("pod index ", pod_index, " was given to spare ",
                                                  spare, " in restart attempt ", attempt))};
  }
  followers_[pod_index] = it->second;
  held_by_spare_[pod_index] = spare;
  displaced_[pod_index].merge(seen_names_[pod_index]);
  spares_.erase(it);
  return ending;
}

std::set<int32_t> SlotRegistry::Following() const {
  std::set<int32_t> following;
  if (rank0_local_) following.insert(0);
  for (const auto& [pod, stream] : followers_) following.insert(pod);
  return following;
}

std::string SlotRegistry::HolderOf(int32_t pod_index) const {
  auto it = held_by_spare_.find(pod_index);
  return it == held_by_spare_.end() ? "" : it->second;
}

}  // namespace cohort::coordination
