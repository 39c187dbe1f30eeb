#include "operator/runtime/operator_metrics.h"

#include <algorithm>

#include "operator/api/distributed_job.h"
#include "operator/reconciler/conditions.h"

namespace cohort::op {

namespace {

constexpr Phase kPhases[] = {Phase::kPending,   Phase::kRunning, Phase::kRestarting,
                             Phase::kSucceeded, Phase::kFailed,  Phase::kSuspended};

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
}

prometheus::Labels JobLabels(const std::string& key) {
  size_t slash = key.find('/');
  return {{"job_namespace", key.substr(0, slash)},
          {"cohort_job", slash == std::string::npos ? key : key.substr(slash + 1)}};
}

}  // namespace

OperatorMetrics::OperatorMetrics(prometheus::Registry& registry)
    : reconciles_(
          prometheus::BuildCounter()
              .Name("cohort_operator_reconciles_total")
              .Help("Reconcile passes of DistributedJobs, by result (success, conflict, error)")
              .Register(registry)),
      reconcile_duration_(
          prometheus::BuildHistogram()
              .Name("cohort_operator_reconcile_duration_seconds")
              .Help("Duration of one reconcile pass, API calls included")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                               0.25, 0.5, 1, 2.5, 5, 10})),
      jobs_(prometheus::BuildGauge()
                .Name("cohort_operator_jobs")
                .Help("DistributedJobs by phase")
                .Register(registry)),
      pods_created_(prometheus::BuildCounter()
                        .Name("cohort_operator_pods_created_total")
                        .Help("Pods the operator created")
                        .Register(registry)
                        .Add({})),
      restarts_(
          prometheus::BuildCounter()
              .Name("cohort_operator_gang_restarts_total")
              .Help("Gang restarts after a rank failed (counted against maxRestarts, unless a "
                    "RestartJobAndIgnoreMaxRestarts rule matched)")
              .Register(registry)
              .Add({})),
      preemptions_(prometheus::BuildCounter()
                       .Name("cohort_operator_preemptions_total")
                       .Help("Gang restarts after a preemption or eviction that no failure rule "
                             "counted (not counted against maxRestarts)")
                       .Register(registry)
                       .Add({})),
      leader_(prometheus::BuildGauge()
                  .Name("cohort_operator_leader")
                  .Help("1 while this replica holds the leader Lease")
                  .Register(registry)
                  .Add({})),
      job_phase_(prometheus::BuildGauge()
                     .Name("cohort_operator_job_phase")
                     .Help("1 for each live DistributedJob's current phase, 0 for its other phases")
                     .Register(registry)),
      job_restarts_(
          prometheus::BuildCounter()
              .Name("cohort_operator_job_restarts_total")
              .Help("Gang restarts of a DistributedJob by cause (cause=\"preempted\": preemptions)")
              .Register(registry)),
      job_hung_(prometheus::BuildGauge()
                    .Name("cohort_operator_job_hung")
                    .Help("1 while a DistributedJob's Hung condition is True (ranks made no "
                          "progress for longer "
                          "than the hang timeout) and it has not finished")
                    .Register(registry)),
      job_replica_groups_(prometheus::BuildGauge()
                              .Name("cohort_operator_job_replica_groups")
                              .Help("An elastic DistributedJob's replica groups that its running "
                                    "restart attempt runs")
                              .Register(registry)),
      job_desired_replica_groups_(
          prometheus::BuildGauge()
              .Name("cohort_operator_job_desired_replica_groups")
              .Help("An elastic DistributedJob's replica groups that spec.replicas asks for")
              .Register(registry)),
      job_hangs_(prometheus::BuildCounter()
                     .Name("cohort_operator_job_hangs_total")
                     .Help("Hangs the job's hang detector found (HangDetected Events)")
                     .Register(registry)),
      job_detect_(
          prometheus::BuildHistogram()
              .Name("cohort_operator_job_failure_detect_seconds")
              .Help("From a rank's container finishing to the operator deciding the gang restart")
              .Register(registry)),
      job_recovery_(
          prometheus::BuildHistogram()
              .Name("cohort_operator_job_recovery_seconds")
              .Help(
                  "From a failure (or a preemption's restart decision) to every rank running again")
              .Register(registry)),
      job_recovery_stage_(
          prometheus::BuildHistogram()
              .Name("cohort_operator_job_recovery_stage_seconds")
              .Help("From a failure (or a preemption's restart decision) to a stage of the gang "
                    "restart (stage: old_processes_gone, running), by restart kind (restart: "
                    "in_place, recreate)")
              .Register(registry)),
      job_time_to_running_(
          prometheus::BuildHistogram()
              .Name("cohort_operator_job_time_to_running_seconds")
              .Help("From a DistributedJob's creation to all its ranks first running")
              .Register(registry)) {
  for (Phase phase : kPhases) jobs_.Add({{"phase", PhaseName(phase)}}).Set(0);
}

OperatorMetrics::JobSeries& OperatorMetrics::SeriesLocked(const std::string& key) {
  auto [it, added] = jobs_series_.try_emplace(key);
  JobSeries& job = it->second;
  if (added) {
    prometheus::Labels labels = JobLabels(key);
    for (Phase phase : kPhases) {
      prometheus::Labels with_phase = labels;
      with_phase["phase"] = PhaseName(phase);
      job.phase_gauges[phase] = &job_phase_.Add(with_phase);
    }
    job.hung = &job_hung_.Add(labels);
    job.hangs = &job_hangs_.Add(labels);
    job.detect = &job_detect_.Add(labels, LatencyBuckets());
    job.recovery = &job_recovery_.Add(labels, LatencyBuckets());
    job.time_to_running = &job_time_to_running_.Add(labels, LatencyBuckets());
  }
  return job;
}

void OperatorMetrics::RemoveLocked(const std::string& key) {
  auto it = jobs_series_.find(key);
  if (it == jobs_series_.end()) return;
  JobSeries& job = it->second;
  for (auto& [phase, gauge] : job.phase_gauges) job_phase_.Remove(gauge);
  for (auto& [cause, counter] : job.restarts) job_restarts_.Remove(counter);
  job_hung_.Remove(job.hung);
  if (job.replica_groups != nullptr) job_replica_groups_.Remove(job.replica_groups);
  if (job.desired_replica_groups != nullptr)
    job_desired_replica_groups_.Remove(job.desired_replica_groups);
  job_hangs_.Remove(job.hangs);
  job_detect_.Remove(job.detect);
  job_recovery_.Remove(job.recovery);
  for (auto& [kind_and_stage, histogram] : job.stages) job_recovery_stage_.Remove(histogram);
  job_time_to_running_.Remove(job.time_to_running);
  jobs_series_.erase(it);
}

void OperatorMetrics::ObserveStageLocked(const std::string& key, JobSeries& job, const char* stage,
                                         double seconds) {
  prometheus::Histogram*& histogram = job.stages[{job.recovering_kind, stage}];
  if (histogram == nullptr) {
    prometheus::Labels labels = JobLabels(key);
    labels["restart"] = job.recovering_kind;
    labels["stage"] = stage;
    histogram = &job_recovery_stage_.Add(labels, LatencyBuckets());
  }
  histogram->Observe(seconds);
}

void OperatorMetrics::ObserveReconcile(const std::string& key, absl::Duration duration,
                                       const absl::Status& status, const ReconcileReport& report) {
  const char* result = status.ok() ? "success" : absl::IsAborted(status) ? "conflict" : "error";
  reconciles_.Add({{"result", result}}).Increment();
  reconcile_duration_.Observe(absl::ToDoubleSeconds(duration));
  pods_created_.Increment(report.pods_created);
  if (report.restart)
    (report.restart->kind == restart_kind::kPreemption ? preemptions_ : restarts_).Increment();
  const bool running = std::find(report.event_reasons.begin(), report.event_reasons.end(),
                                 reason::kRunning) != report.event_reasons.end();
  // The old attempt's processes are gone: in place, the pass that orders the next attempt (every
  // staying pod reported its end); recreating, the pass that creates the next attempt's pods.
  const bool old_gone =
      report.started_attempt || std::find(report.event_reasons.begin(), report.event_reasons.end(),
                                          reason::kStarted) != report.event_reasons.end();
  const bool hang_detected = std::find(report.event_reasons.begin(), report.event_reasons.end(),
                                       reason::kHangDetected) != report.event_reasons.end();
  // A pass that ended without a phase (an error, the job gone) says nothing of the job's state.
  if (!report.phase && !report.restart && !running && !old_gone) return;

  absl::MutexLock lock(&mu_);
  JobSeries& job = SeriesLocked(key);
  if (report.phase) job.hung->Set(report.hung ? 1 : 0);
  if (report.replica_groups) {
    if (job.replica_groups == nullptr) {
      job.replica_groups = &job_replica_groups_.Add(JobLabels(key));
      job.desired_replica_groups = &job_desired_replica_groups_.Add(JobLabels(key));
    }
    job.replica_groups->Set(report.replica_groups->first);
    job.desired_replica_groups->Set(report.replica_groups->second);
  }
  if (hang_detected) job.hangs->Increment();
  if (report.restart) {
    prometheus::Counter*& counter = job.restarts[report.restart->cause_label()];
    if (counter == nullptr) {
      prometheus::Labels labels = JobLabels(key);
      labels["cause"] = report.restart->cause_label();
      counter = &job_restarts_.Add(labels);
    }
    counter->Increment();
    absl::Time failed_at = report.restart->failed_at;
    if (failed_at != absl::InfinitePast() && failed_at <= report.now) {
      job.detect->Observe(absl::ToDoubleSeconds(report.now - failed_at));
    } else {
      failed_at = report.now;  // An eviction says no time: recovery counts from the decision.
    }
    // A second failure before the gang recovered keeps the first one's clock (and the kind of the
    // restart that recovers).
    if (!job.recovering_since) job.recovering_since = failed_at;
    job.recovering_kind = report.restart->in_place ? "in_place" : "recreate";
    job.old_gone_seen = false;
  }
  if (old_gone && job.recovering_since && !job.old_gone_seen) {
    ObserveStageLocked(key, job, "old_processes_gone",
                       absl::ToDoubleSeconds(report.now - *job.recovering_since));
    job.old_gone_seen = true;
  }
  if (running) {
    if (job.recovering_since) {
      const double seconds = absl::ToDoubleSeconds(report.now - *job.recovering_since);
      job.recovery->Observe(seconds);
      ObserveStageLocked(key, job, "running", seconds);
      job.recovering_since.reset();
    } else if (!job.was_running && report.job_created != absl::InfinitePast() &&
               report.job_created <= report.now) {
      job.time_to_running->Observe(absl::ToDoubleSeconds(report.now - report.job_created));
    }
    job.was_running = true;
  }
}

void OperatorMetrics::SetJobPhase(const std::string& key, std::optional<Phase> phase) {
  absl::MutexLock lock(&mu_);
  if (!phase) {
    auto it = jobs_series_.find(key);
    if (it != jobs_series_.end() && it->second.phase)
      jobs_.Add({{"phase", PhaseName(*it->second.phase)}}).Decrement();
    RemoveLocked(key);
    return;
  }
  JobSeries& job = SeriesLocked(key);
  if (job.phase == phase) return;
  if (job.phase) jobs_.Add({{"phase", PhaseName(*job.phase)}}).Decrement();
  jobs_.Add({{"phase", PhaseName(*phase)}}).Increment();
  for (auto& [p, gauge] : job.phase_gauges) gauge->Set(p == *phase ? 1 : 0);
  // A job seen running before this replica led (status says so) is not new: no time to running.
  if (*phase == Phase::kRunning || *phase == Phase::kRestarting || *phase == Phase::kSucceeded ||
      *phase == Phase::kFailed) {
    if (!job.phase) job.was_running = true;
  }
  job.phase = phase;
}

void OperatorMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

}  // namespace cohort::op
