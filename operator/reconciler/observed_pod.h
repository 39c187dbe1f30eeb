#pragma once

// A job's pod as the reconciler sees it: what the decisions read of the pod the API server
// returns (job_decision.h decides on a list of them), read once per pass.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"

namespace cohort::op {

struct ObservedPod {
  enum class Phase { kPending, kRunning, kSucceeded, kFailed, kUnknown };
  std::string name;
  // Its pod index (the slot it holds); -1 for a spare that holds none.
  int32_t rank = 0;
  // Hot spares: its cohort.dev/spare label, the name it was created under as a spare ("" for a
  // rank's pod). A spare that took a slot keeps it beside the slot's rank.
  std::string spare;
  int32_t restart_attempt = 0;
  Phase phase = Phase::kPending;
  bool ready = false;
  bool terminating = false;  // metadata.deletionTimestamp is set.
  // metadata.deletionTimestamp: when its grace period ends (InfiniteFuture when not set or
  // unreadable).
  absl::Time deletion_deadline = absl::InfiniteFuture();
  std::string node;  // spec.nodeName.
  // Hot spares: the topology domain of its node (the value of the Node label SpareTopology()
  // names), filled by the reconciler only while a spare may take a slot; "" when not known.
  std::string domain;
  std::string ip;  // status.podIP.
  // status.startTime: when its node took it (InfinitePast while not known).
  absl::Time started_at = absl::InfinitePast();
  // Restarting in place: the pod is one of the gang that restarts in place (its trainer container
  // still runs cohort-launch, its restart_attempt is the attempt the hub says its processes run).
  // Set by ApplyAttemptView (in_place_policy.h), never by ObservePod.
  bool in_place = false;
  bool gated = false;  // spec.schedulingGates is not empty (an admission controller holds it).
  // The reason of its PodScheduled=False condition ("Unschedulable", "SchedulingGated"); "" when
  // placed or not yet looked at.
  std::string unscheduled_reason;
  bool force_deleted = false;      // metadata.deletionGracePeriodSeconds is 0.
  bool disruption_target = false;  // The DisruptionTarget condition is True (eviction, preemption).
  std::optional<int> trainer_exit_code;  // The first app container's terminated exit code.
  std::string trainer_message;           // Its termination message or reason.
  std::string trainer_reason;            // Its termination reason ("OOMKilled", "Error", ...).
  absl::Time finished_at = absl::InfinitePast();  // When it terminated, if it did and says.
  // For spec.failurePolicy.rules: every app container's termination, the trainer's name, and
  // the pod's conditions (type, status).
  struct ContainerExit {
    std::string name;
    std::optional<int> exit_code;  // Set when it terminated.
    std::string reason;
  };
  std::vector<ContainerExit> containers;
  std::string trainer_name;
  std::vector<std::pair<std::string, std::string>> conditions;
};

// Reads a pod as the API server returns it, whatever its shape (never throws). nullopt when it
// lacks a name, the job's restart attempt label, or both the rank and the spare label (not one of
// ours); a spare without a rank has rank -1. The trainer is the container named `trainer_name`
// (TrainerName(job)); without one, the first container status that is not the cohort-sidecar's.
std::optional<ObservedPod> ObservePod(const nlohmann::json& pod,
                                      const std::string& trainer_name = "");

}  // namespace cohort::op
