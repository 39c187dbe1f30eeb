#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

// Which of a job's pods run one restart attempt, and where each stands in it: the job's shape
// once an elastic job (spec.elastic; docs/operator.md, "Elastic replica groups") runs without some
// of its replica groups. The operator decides it, rank 0's attempt hub sends it with the attempt,
// and every pod's sidecar and cohort-launch give the pod's processes the ranks it says: dense,
// in pod-index order, so that the ranks of an attempt are 0..world-1 whatever pods it leaves out.
namespace cohort {

struct AttemptLayout {
  // The pod indexes the attempt spans: 0..slots-1, less `absent` (sorted; never 0, whose pod
  // hosts the coordination service and the attempt hub).
  int32_t slots = 0;
  std::vector<int32_t> absent;
  // The data-parallel replica groups the attempt runs, and those the job wants (spec.replicas /
  // spec.elastic.podsPerGroup): COHORT_REPLICA_GROUPS and COHORT_DESIRED_REPLICA_GROUPS.
  int32_t replica_groups = 0;
  int32_t desired_replica_groups = 0;

  // The pods the attempt runs.
  int32_t pods() const { return slots - static_cast<int32_t>(absent.size()); }
  // Pod `pod_index`'s position among them (its processes' ranks start at position x processes
  // per pod; its NODE_RANK), nullopt when the attempt runs without it.
  std::optional<int32_t> Position(int32_t pod_index) const;
  // The pod at `position` (the inverse of Position), nullopt past the last.
  std::optional<int32_t> PodAt(int32_t position) const;
  // Why the layout cannot be run ("" when it can): no slot, an absent index out of range, twice,
  // unsorted or 0, groups that do not divide the pods.
  std::string Problem() const;
  // "pods 0-3, 6-7 (6 of 8; 3 of 4 replica groups)".
  std::string Describe() const;

  bool operator==(const AttemptLayout&) const = default;
};

// A job of `slots` pods in replica groups of `pods_per_group` pods (group g is pods
// g x pods_per_group onwards), running every group but `dropped` (group indexes; never 0), with
// `desired_groups` wanted.
AttemptLayout LayoutWithout(int32_t slots, int32_t pods_per_group, const std::set<int32_t>& dropped,
                            int32_t desired_groups);

}  // namespace cohort
