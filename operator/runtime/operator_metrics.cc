#include "operator/runtime/operator_metrics.h"

#include "operator/api/distributed_job.h"

namespace cohort::op {

OperatorMetrics::OperatorMetrics(prometheus::Registry& registry)
    : reconciles_(prometheus::BuildCounter()
                      .Name("cohort_operator_reconciles_total")
                      .Help("Reconcile passes of DistributedJobs, by result (success, conflict, error)")
                      .Register(registry)),
      reconcile_duration_(prometheus::BuildHistogram()
                              .Name("cohort_operator_reconcile_duration_seconds")
                              .Help("Duration of one reconcile pass, API calls included")
                              .Register(registry)
                              .Add({}, prometheus::Histogram::BucketBoundaries{
                                           0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})),
      jobs_(prometheus::BuildGauge()
                .Name("cohort_operator_jobs")
                .Help("DistributedJobs by phase")
                .Register(registry)),
      pods_created_(prometheus::BuildCounter()
                        .Name("cohort_operator_pods_created_total")
                        .Help("Pods the operator created")
                        .Register(registry)
                        .Add({})),
      restarts_(prometheus::BuildCounter()
                    .Name("cohort_operator_gang_restarts_total")
                    .Help("Gang restarts after a rank failed (counted against maxRestarts)")
                    .Register(registry)
                    .Add({})),
      preemptions_(prometheus::BuildCounter()
                       .Name("cohort_operator_preemptions_total")
                       .Help("Gang restarts after a preemption or eviction (not counted against maxRestarts)")
                       .Register(registry)
                       .Add({})),
      leader_(prometheus::BuildGauge()
                  .Name("cohort_operator_leader")
                  .Help("1 while this replica holds the leader Lease")
                  .Register(registry)
                  .Add({})) {
  for (Phase phase : {Phase::kPending, Phase::kRunning, Phase::kRestarting, Phase::kSucceeded, Phase::kFailed,
                      Phase::kSuspended}) {
    jobs_.Add({{"phase", PhaseName(phase)}}).Set(0);
  }
}

void OperatorMetrics::ObserveReconcile(absl::Duration duration, const absl::Status& status,
                                       const ReconcileReport& report) {
  const char* result = status.ok() ? "success" : absl::IsAborted(status) ? "conflict" : "error";
  reconciles_.Add({{"result", result}}).Increment();
  reconcile_duration_.Observe(absl::ToDoubleSeconds(duration));
  pods_created_.Increment(report.pods_created);
  for (const std::string& reason : report.event_reasons) {
    if (reason == "GangRestart") restarts_.Increment();
    if (reason == "Preempted") preemptions_.Increment();
  }
}

void OperatorMetrics::SetJobPhase(const std::string& key, const std::string& phase) {
  absl::MutexLock lock(&mu_);
  std::string& current = phases_[key];
  if (current == phase) return;
  if (!current.empty()) jobs_.Add({{"phase", current}}).Decrement();
  if (!phase.empty()) jobs_.Add({{"phase", phase}}).Increment();
  current = phase;
  if (phase.empty()) phases_.erase(key);
}

void OperatorMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

}  // namespace cohort::op
