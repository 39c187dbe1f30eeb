#pragma once

#include <map>
#include <string>

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
class OperatorMetrics {
 public:
  explicit OperatorMetrics(prometheus::Registry& registry);

  // One reconcile pass: counted by result (success, conflict, error), its duration, and what
  // it did (pods created, gang restarts, preemptions).
  void ObserveReconcile(absl::Duration duration, const absl::Status& status, const ReconcileReport& report);
  // The phase of job `key` ("" when it is gone), for cohort_operator_jobs{phase}.
  void SetJobPhase(const std::string& key, const std::string& phase);
  void SetLeader(bool leader);

 private:
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Counter& pods_created_;
  prometheus::Counter& restarts_;
  prometheus::Counter& preemptions_;
  prometheus::Gauge& leader_;
  absl::Mutex mu_;
  std::map<std::string, std::string> phases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::op
