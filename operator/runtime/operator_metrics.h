#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/reconciler/reconciler.h"

namespace cohort::op {

// cohort-operator's metric families (docs/metrics.md). Thread-safe.
//
// Besides the cluster-wide series, every live DistributedJob has its own (labels job_namespace,
// cohort_job): its phase, whether it is hung and how many hangs it had, its gang restarts by
// cause, how long failures took to detect and to recover from, and an elastic job's replica
// groups. They go when the job is
// deleted, so their number is bounded by the live jobs (at most 6 + 2 + 12 + 3 + 4 histograms per
// job). The recovery clock lives in this replica's memory: a
// failure that straddles a change of leader is counted but not timed.
class OperatorMetrics {
 public:
  explicit OperatorMetrics(prometheus::Registry& registry);

  // One reconcile pass of job `key` ("namespace/name"): counted by result (success, conflict,
  // error), its duration, and what it did (pods created, gang restarts and their causes,
  // the job reaching Running, a hang named and whether the job is hung after it).
  void ObserveReconcile(const std::string& key, absl::Duration duration, const absl::Status& status,
                        const ReconcileReport& report);
  // The phase of job `key` (nullopt when it is gone: its per-job series are removed).
  void SetJobPhase(const std::string& key, std::optional<Phase> phase);
  void SetLeader(bool leader);

 private:
  struct JobSeries {
    std::optional<Phase> phase;
    std::map<Phase, prometheus::Gauge*> phase_gauges;
    std::map<std::string, prometheus::Counter*> restarts;  // By cause.
    prometheus::Gauge* hung = nullptr;                     // 1 while its Hung condition is True.
    // An elastic job's replica groups, running and wanted (null for another job).
    prometheus::Gauge* replica_groups = nullptr;
    prometheus::Gauge* desired_replica_groups = nullptr;
    prometheus::Counter* hangs = nullptr;  // HangDetected Events (one per hang).
    prometheus::Histogram* detect = nullptr;
    prometheus::Histogram* recovery = nullptr;
    prometheus::Histogram* time_to_running = nullptr;
    // Recovery by restart kind ("in_place", "recreate") and stage ("old_processes_gone",
    // "running").
    std::map<std::pair<std::string, std::string>, prometheus::Histogram*> stages;
    std::optional<absl::Time> recovering_since;  // A gang restart is under way since.
    std::string recovering_kind;                 // Its kind: "in_place" or "recreate".
    bool old_gone_seen = false;                  // Its stage "old_processes_gone" was observed.
    bool was_running = false;
  };
  JobSeries& SeriesLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Observes `seconds` into job `key`'s recovery stage `stage` of its restart under way.
  void ObserveStageLocked(const std::string& key, JobSeries& job, const char* stage, double seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Counter& pods_created_;
  prometheus::Counter& restarts_;
  prometheus::Counter& preemptions_;
  prometheus::Gauge& leader_;
  prometheus::Family<prometheus::Gauge>& job_phase_;
  prometheus::Family<prometheus::Counter>& job_restarts_;
  prometheus::Family<prometheus::Gauge>& job_hung_;
  prometheus::Family<prometheus::Gauge>& job_replica_groups_;
  prometheus::Family<prometheus::Gauge>& job_desired_replica_groups_;
  prometheus::Family<prometheus::Counter>& job_hangs_;
  prometheus::Family<prometheus::Histogram>& job_detect_;
  prometheus::Family<prometheus::Histogram>& job_recovery_;
  prometheus::Family<prometheus::Histogram>& job_recovery_stage_;
  prometheus::Family<prometheus::Histogram>& job_time_to_running_;
  absl::Mutex mu_;
  std::map<std::string, JobSeries> jobs_series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::op
