#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordination/core/coordination_service.h"

namespace cohort::sidecar {

// The series of one rank the sidecar serves, each labelled with the rank (a sidecar serving the
// several processes of a pod has one SidecarMetrics per rank, over one registry). Names follow
// docs/metrics.md.
class SidecarMetrics {
 public:
  SidecarMetrics(prometheus::Registry& registry, int32_t rank);

  // operation: set|get|try_get|dir|delete|increment; result: a status code name.
  void CountKeyValue(absl::string_view operation, const absl::Status& status);
  void ObserveBarrier(absl::Duration wait, const absl::Status& status);
  void CountFailure(coordination::FailureCause cause);
  void CountPreemptionNotice();
  void SetAgentConnected(bool connected);
  void SetTrainerAttached(bool attached);
  // The job's shape, exported as gauges (cohort_world_size, cohort_heartbeat_timeout_seconds).
  void SetJob(int32_t world_size, absl::Duration heartbeat_timeout);
  // The trainer reported training step `step` at `now` (dist::ReportProgress): the step gauge,
  // its timestamp and, when the step advanced since the last report, the time per step and the
  // productive time (the goodput numerator). A step that goes back (a restore) starts afresh.
  void ObserveStep(int64_t step, absl::Time now);
  // The steps ObserveStep saw advance, for the hang detector (sidecar/progress_watch.h): how many
  // since the sidecar started, when the last one was, and the median time per step of the last
  // ones (zero with fewer than two).
  // With the trainer's last collective report (ObserveCollectives): when it came and the call it
  // had in flight then ("" for none).
  struct StepSummary {
    int64_t advances = 0;
    absl::Time last_at = absl::InfinitePast();
    absl::Duration median = absl::ZeroDuration();
    absl::Time reported_at = absl::InfinitePast();
    std::string pending;
  };
  StepSummary Steps();
  // The trainer's collectives, as libdist reports them every 500 ms (dist's ProgressReporter).
  void ObserveCollectives(const std::vector<coordination::CollectiveProgress>& progress,
                          absl::Time now);

 private:
  prometheus::Histogram& ObserveBarrierBuckets(std::map<std::string, std::string> labels);

  const std::string rank_;

  prometheus::Family<prometheus::Counter>& kv_operations_;
  prometheus::Family<prometheus::Histogram>& barrier_wait_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Counter& preemption_notices_;
  prometheus::Gauge& agent_connected_;
  prometheus::Gauge& trainer_attached_;
  prometheus::Family<prometheus::Gauge>& world_size_;
  prometheus::Family<prometheus::Gauge>& heartbeat_timeout_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& step_timestamp_;
  prometheus::Histogram& step_seconds_;
  prometheus::Counter& productive_seconds_;
  absl::Mutex step_mu_;
  std::optional<int64_t> last_step_ ABSL_GUARDED_BY(step_mu_);
  absl::Time last_step_at_ ABSL_GUARDED_BY(step_mu_);
  int64_t step_advances_ ABSL_GUARDED_BY(step_mu_) = 0;
  std::deque<absl::Duration> recent_step_times_ ABSL_GUARDED_BY(step_mu_);  // The last 32.
  absl::Time reported_at_ ABSL_GUARDED_BY(step_mu_) = absl::InfinitePast();
  std::string pending_ ABSL_GUARDED_BY(step_mu_);
};

// Calls answered on rank 0's JAX port (cohort_jax_rpcs_total), by protocol generation, method
// and status code: which jaxlib generation the job's processes speak and what they ask; and how
// long the calls that wait in the service waited (cohort_jax_wait_seconds: barriers, blocking
// gets, registration, shutdown).
class JaxPortMetrics {
 public:
  explicit JaxPortMetrics(prometheus::Registry& registry);
  void Count(absl::string_view protocol, absl::string_view method, absl::StatusCode code,
             std::optional<absl::Duration> waited);

 private:
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& waits_;
  // The series already made, so that a call costs a lookup, not a label map and a family lookup.
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, prometheus::Counter*> counters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, prometheus::Histogram*> histograms_ ABSL_GUARDED_BY(mu_);
};

// Per-task health as the coordinator sees it, computed at scrape time from the service's
// snapshot: task states, heartbeat age per rank (the "which rank is sick" view), key-value and
// barrier gauges. Per-rank series are emitted up to `per_rank_limit` ranks.
class CoordinatorCollector final : public prometheus::Collectable {
 public:
  CoordinatorCollector(const coordination::CoordinationService* service, size_t per_rank_limit)
      : service_(service), per_rank_limit_(per_rank_limit) {}
  std::vector<prometheus::MetricFamily> Collect() const override;
  // The service to look at from now on (a restart in place starts a new one); null: none, the
  // scrape has no coordinator series. Returns once no scrape reads the old one.
  void SetService(const coordination::CoordinationService* service) {
    absl::MutexLock lock(&mu_);
    service_ = service;
  }

 private:
  mutable absl::Mutex mu_;
  const coordination::CoordinationService* service_ ABSL_GUARDED_BY(mu_);
  size_t per_rank_limit_;
};

}  // namespace cohort::sidecar
