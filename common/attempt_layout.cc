#include "common/attempt_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cohort {

std::optional<int32_t> AttemptLayout::Position(int32_t pod_index) const {
  if (pod_index < 0 || pod_index >= slots) return std::nullopt;
  auto below = std::lower_bound(absent.begin(), absent.end(), pod_index);
  if (below != absent.end() && *below == pod_index) return std::nullopt;
  return pod_index - static_cast<int32_t>(below - absent.begin());
}

std::optional<int32_t> AttemptLayout::PodAt(int32_t position) const {
  if (position < 0 || position >= pods()) return std::nullopt;
  // Every absent index at or below the candidate moves it one further.
  int32_t pod = position;
  for (int32_t a : absent) {
    if (a > pod) break;
    ++pod;
  }
  return pod;
}

std::string AttemptLayout::Problem() const {
  if (slots < 1) return absl::StrCat("an attempt needs at least one pod (slots ", slots, ")");
  for (size_t i = 0; i < absent.size(); ++i) {
    if (absent[i] <= 0 || absent[i] >= slots) {
      return absl::StrCat("absent pod index ", absent[i], " is not one of 1..", slots - 1,
                          " (pod 0 hosts the coordination service)");
    }
    if (i > 0 && absent[i] <= absent[i - 1])
      return absl::StrCat("absent pod indexes must be sorted and distinct (", absent[i], ")");
  }
  if (replica_groups < 0 || desired_replica_groups < 0 ||
      (replica_groups > 0 && pods() % replica_groups != 0)) {
    return absl::StrCat(replica_groups, " replica groups do not divide ", pods(), " pods");
  }
  return "";
}

std::string AttemptLayout::Describe() const {
  std::string ranges;
  int32_t start = -1;
  auto close = [&](int32_t end) {
    absl::StrAppend(&ranges, ranges.empty() ? "" : ", ", start,
                    end > start ? absl::StrCat("-", end) : "");
    start = -1;
  };
  for (int32_t pod = 0; pod < slots; ++pod) {
    const bool present = Position(pod).has_value();
    if (present && start < 0) start = pod;
    if (!present && start >= 0) close(pod - 1);
  }
  if (start >= 0) close(slots - 1);
  std::string out = absl::StrCat("pods ", ranges, " (", pods(), " of ", slots);
  if (replica_groups > 0) {
    absl::StrAppend(&out, "; ", replica_groups, " of ", desired_replica_groups, " replica groups");
  }
  return out + ")";
}

AttemptLayout LayoutWithout(int32_t slots, int32_t pods_per_group, const std::set<int32_t>& dropped,
                            int32_t desired_groups) {
  AttemptLayout layout;
  layout.slots = slots;
  const int32_t per_group = std::max(pods_per_group, 1);
  for (int32_t group : dropped) {
    for (int32_t pod = group * per_group; pod < (group + 1) * per_group && pod < slots; ++pod)
      layout.absent.push_back(pod);
  }
  layout.replica_groups = slots / per_group - static_cast<int32_t>(dropped.size());
  layout.desired_replica_groups = desired_groups;
  return layout;
}

}  // namespace cohort
