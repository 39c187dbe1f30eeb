#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op::testing {

// An ObservedPod of job "train", as the reconciler would read it from the API server.
class PodBuilder {
 public:
  PodBuilder(int32_t rank, int32_t restart_attempt = 0) {
    pod_.rank = rank;
    pod_.restart_attempt = restart_attempt;
    pod_.name = absl::StrCat("train-", rank);
    pod_.trainer_name = "trainer";
    pod_.containers.push_back({"trainer", std::nullopt, ""});
  }
  PodBuilder& Running() {
    pod_.phase = ObservedPod::Phase::kRunning;
    pod_.ready = true;
    return *this;
  }
  PodBuilder& NotReady() {
    pod_.ready = false;
    return *this;
  }
  PodBuilder& Pending() {
    pod_.phase = ObservedPod::Phase::kPending;
    return *this;
  }
  PodBuilder& Exited(int code, std::string message = "") {
    pod_.phase = code == 0 ? ObservedPod::Phase::kSucceeded : ObservedPod::Phase::kFailed;
    pod_.ready = false;
    pod_.trainer_exit_code = code;
    pod_.trainer_message = std::move(message);
    pod_.containers[0].exit_code = code;
    pod_.containers[0].reason = code == 0 ? "Completed" : "Error";
    return *this;
  }
  PodBuilder& Reason(std::string reason) {
    pod_.trainer_reason = reason;
    pod_.containers[0].reason = std::move(reason);
    return *this;
  }
  // Another app container, terminated with `code` (and `reason`).
  PodBuilder& Container(std::string name, int code, std::string reason = "Error") {
    pod_.containers.push_back({std::move(name), code, std::move(reason)});
    return *this;
  }
  PodBuilder& Condition(std::string type, std::string status = "True") {
    pod_.conditions.emplace_back(std::move(type), std::move(status));
    return *this;
  }
  PodBuilder& StartedAt(absl::Time t) {  // status.startTime
    pod_.started_at = t;
    return *this;
  }
  PodBuilder& FinishedAt(absl::Time t) {
    pod_.finished_at = t;
    return *this;
  }
  PodBuilder& Evicted() {
    pod_.disruption_target = true;
    pod_.conditions.emplace_back("DisruptionTarget", "True");
    pod_.terminating = true;
    return *this;
  }
  PodBuilder& Terminating() {
    pod_.terminating = true;
    return *this;
  }
  // Being deleted, its grace period ending at `deadline` (metadata.deletionTimestamp), on `node`.
  PodBuilder& TerminatingUntil(absl::Time deadline, std::string node = "node-a") {
    pod_.terminating = true;
    pod_.deletion_deadline = deadline;
    pod_.node = std::move(node);
    return *this;
  }
  // A spare pod named `name` (SparePodName): holding no slot when the builder's rank is -1, else
  // a spare that took that slot (labelled with its rank and attempt).
  PodBuilder& Spare(std::string name) {
    pod_.name = name;
    pod_.spare = std::move(name);
    return *this;
  }
  PodBuilder& Domain(std::string domain) {  // Its node's topology domain.
    pod_.domain = std::move(domain);
    return *this;
  }
  operator ObservedPod() const { return pod_; }

 private:
  ObservedPod pod_;
};

}  // namespace cohort::op::testing
