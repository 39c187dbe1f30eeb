#include "sidecar/metrics/sidecar_metrics.h"

#include <prometheus/metric_family.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cohort::sidecar {
namespace {

std::string CodeLabel(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

prometheus::ClientMetric GaugeSample(double value,
                                     std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

}  // namespace

SidecarMetrics::SidecarMetrics(prometheus::Registry& registry, int32_t rank)
    : rank_(absl::StrCat(rank)),
      kv_operations_(prometheus::BuildCounter()
                         .Name("cohort_kv_operations_total")
                         .Help("Key-value operations made by this rank, by operation and result")
                         .Register(registry)),
      barrier_wait_(prometheus::BuildHistogram()
                        .Name("cohort_barrier_wait_seconds")
                        .Help("Time this rank waited in barriers, by result")
                        .Register(registry)),
      failures_(prometheus::BuildCounter()
                    .Name("cohort_task_failures_total")
                    .Help("Job failures this rank was told of, by cause")
                    .Register(registry)),
      preemption_notices_(prometheus::BuildCounter()
                              .Name("cohort_preemption_notices_total")
                              .Help("Preemption notices this rank was told of")
                              .Register(registry)
                              .Add({{"rank", rank_}})),
      agent_connected_(prometheus::BuildGauge()
                           .Name("cohort_agent_connected")
                           .Help("1 while this rank's agent is registered with the coordinator")
                           .Register(registry)
                           .Add({{"rank", rank_}})),
      trainer_attached_(prometheus::BuildGauge()
                            .Name("cohort_trainer_attached")
                            .Help("1 while this rank's trainer process is attached to the sidecar")
                            .Register(registry)
                            .Add({{"rank", rank_}})),
      world_size_(prometheus::BuildGauge()
                      .Name("cohort_world_size")
                      .Help("Ranks in the job")
                      .Register(registry)),
      heartbeat_timeout_(
          prometheus::BuildGauge()
              .Name("cohort_heartbeat_timeout_seconds")
              .Help("The job's heartbeat timeout: a rank silent this long has failed")
              .Register(registry)),
      step_(prometheus::BuildGauge()
                .Name("cohort_trainer_step")
                .Help("The last training step the program reported (dist::ReportProgress)")
                .Register(registry)),
      step_timestamp_(prometheus::BuildGauge()
                          .Name("cohort_trainer_last_progress_timestamp_seconds")
                          .Help("Unix time of the program's last step report")
                          .Register(registry)),
      step_seconds_(
          prometheus::BuildHistogram()
              .Name("cohort_trainer_step_seconds")
              .Help("Wall time per training step, between successive step reports")
              .Register(registry)
              .Add({{"rank", rank_}},
                   prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5,
                                                           1, 2.5, 5, 10, 30, 60, 300})),
      productive_seconds_(
          prometheus::BuildCounter()
              .Name("cohort_trainer_productive_seconds_total")
              .Help("Wall time covered by steps that advanced (goodput's numerator)")
              .Register(registry)
              .Add({{"rank", rank_}})) {
  // Known series start at zero, so rate() and alerts work before the first event.
  for (const char* op : {"set", "get", "try_get", "dir", "delete", "increment"}) {
    kv_operations_.Add({{"operation", op}, {"result", "ok"}, {"rank", rank_}});
  }
  ObserveBarrierBuckets({{"result", "ok"}});
  for (const FailureCauseInfo& cause : kFailureCauses) {
    failures_.Add({{"cause", cause.label}, {"rank", rank_}});
  }
  prometheus::BuildGauge()
      .Name("cohort_rank")
      .Help("A rank (process id) this sidecar serves: one series per rank of the pod")
      .Register(registry)
      .Add({{"rank", rank_}})
      .Set(rank);
}

void SidecarMetrics::CountKeyValue(absl::string_view operation, const absl::Status& status) {
  kv_operations_
      .Add({{"operation", std::string(operation)}, {"result", CodeLabel(status)}, {"rank", rank_}})
      .Increment();
}

prometheus::Histogram& SidecarMetrics::ObserveBarrierBuckets(
    std::map<std::string, std::string> labels) {
  labels["rank"] = rank_;
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800};
  return barrier_wait_.Add(labels, kBuckets);
}

void SidecarMetrics::ObserveBarrier(absl::Duration wait, const absl::Status& status) {
  ObserveBarrierBuckets({{"result", CodeLabel(status)}}).Observe(absl::ToDoubleSeconds(wait));
}

void SidecarMetrics::CountFailure(coordination::FailureCause cause) {
  failures_.Add({{"cause", InfoOf(cause).label}, {"rank", rank_}}).Increment();
}

void SidecarMetrics::SetJob(int32_t world_size, absl::Duration heartbeat_timeout) {
  world_size_.Add({}).Set(world_size);
  heartbeat_timeout_.Add({}).Set(absl::ToDoubleSeconds(heartbeat_timeout));
}

void SidecarMetrics::ObserveStep(int64_t step, absl::Time now) {
  absl::MutexLock lock(&step_mu_);
  if (last_step_ && step > *last_step_ && now > last_step_at_) {
    double seconds = absl::ToDoubleSeconds(now - last_step_at_);
    productive_seconds_.Increment(seconds);
    step_seconds_.Observe(seconds / static_cast<double>(step - *last_step_));
    recent_step_times_.push_back((now - last_step_at_) / static_cast<double>(step - *last_step_));
    if (recent_step_times_.size() > 32) recent_step_times_.pop_front();
  }
  if (!last_step_ || step != *last_step_) ++step_advances_;
  if (last_step_ && step == *last_step_)
    return;  // A repeat: the step's time stays its first report's.
  last_step_ = step;
  last_step_at_ = now;
  step_.Add({{"rank", rank_}}).Set(static_cast<double>(step));
  step_timestamp_.Add({{"rank", rank_}}).Set(absl::ToDoubleSeconds(now - absl::UnixEpoch()));
}

SidecarMetrics::StepSummary SidecarMetrics::Steps() {
  absl::MutexLock lock(&step_mu_);
  StepSummary s;
  s.advances = step_advances_;
  if (last_step_) s.last_at = last_step_at_;
  s.reported_at = reported_at_;
  s.pending = pending_;
  if (recent_step_times_.size() >= 2) {
    std::vector<absl::Duration> sorted(recent_step_times_.begin(), recent_step_times_.end());
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    s.median = sorted[sorted.size() / 2];
  }
  return s;
}

void SidecarMetrics::ObserveCollectives(
    const std::vector<coordination::CollectiveProgress>& progress, absl::Time now) {
  absl::MutexLock lock(&step_mu_);
  reported_at_ = now;
  pending_.clear();
  for (const coordination::CollectiveProgress& c : progress) {
    if (!c.pending.empty()) {
      pending_ = c.pending;
      break;
    }
  }
}

void SidecarMetrics::CountPreemptionNotice() { preemption_notices_.Increment(); }
void SidecarMetrics::SetAgentConnected(bool connected) { agent_connected_.Set(connected ? 1 : 0); }
void SidecarMetrics::SetTrainerAttached(bool attached) { trainer_attached_.Set(attached ? 1 : 0); }

JaxPortMetrics::JaxPortMetrics(prometheus::Registry& registry)
    : rpcs_(prometheus::BuildCounter()
                .Name("cohort_jax_rpcs_total")
                .Help("Calls answered on the JAX port, by protocol, method and status code")
                .Register(registry)),
      waits_(prometheus::BuildHistogram()
                 .Name("cohort_jax_wait_seconds")
                 .Help("How long JAX processes' waiting calls (barriers, blocking gets, "
                       "registration, shutdown) waited in the service, by protocol and method")
                 .Register(registry)) {}

void JaxPortMetrics::Count(absl::string_view protocol, absl::string_view method,
                           absl::StatusCode code, std::optional<absl::Duration> waited) {
  std::string key = absl::StrCat(protocol, "/", method, "/", static_cast<int>(code));
  prometheus::Counter* counter;
  prometheus::Histogram* histogram = nullptr;
  {
    absl::MutexLock lock(&mu_);
    prometheus::Counter*& c = counters_[key];
    if (c == nullptr) {
      c = &rpcs_.Add({{"protocol", std::string(protocol)},
                      {"method", std::string(method)},
                      {"code", CodeLabel(absl::Status(code, ""))}});
    }
    counter = c;
    if (waited) {
      prometheus::Histogram*& h = histograms_[absl::StrCat(protocol, "/", method)];
      if (h == nullptr) {
        h = &waits_.Add(
            {{"protocol", std::string(protocol)}, {"method", std::string(method)}},
            prometheus::Histogram::BucketBoundaries{0.001, 0.01, 0.1, 1, 10, 60, 300, 1800});
      }
      histogram = h;
    }
  }
  counter->Increment();
  if (histogram != nullptr) histogram->Observe(absl::ToDoubleSeconds(*waited));
}

std::vector<prometheus::MetricFamily> CoordinatorCollector::Collect() const {
  coordination::CoordinationService::Snapshot snap;
  {
    absl::MutexLock lock(&mu_);
    if (service_ == nullptr) return {};
    snap = service_->GetSnapshot();
  }
  std::vector<prometheus::MetricFamily> out;

  prometheus::MetricFamily by_state{"cohort_tasks",
                                    "Tasks by state, as the coordinator sees them",
                                    prometheus::MetricType::Gauge,
                                    {}};
  std::map<std::string, int> counts;
  for (auto state : {coordination::TaskState::kDisconnected, coordination::TaskState::kConnecting,
                     coordination::TaskState::kConnected, coordination::TaskState::kFailed,
                     coordination::TaskState::kShutDown}) {
    counts[std::string(coordination::TaskStateName(state))] = 0;
  }
  for (const auto& t : snap.tasks) ++counts[std::string(coordination::TaskStateName(t.state))];
  for (const auto& [state, n] : counts)
    by_state.metric.push_back(GaugeSample(n, {{"state", state}}));
  out.push_back(std::move(by_state));

  if (snap.tasks.size() <= per_rank_limit_) {
    prometheus::MetricFamily up{"cohort_task_up",
                                "1 if the rank is connected and heartbeating, else 0",
                                prometheus::MetricType::Gauge,
                                {}};
    prometheus::MetricFamily age{"cohort_task_heartbeat_age_seconds",
                                 "Seconds since the coordinator last heard from the rank",
                                 prometheus::MetricType::Gauge,
                                 {}};
    prometheus::MetricFamily step{"cohort_task_step",
                                  "Each rank's last reported training step (dist::ReportProgress)",
                                  prometheus::MetricType::Gauge,
                                  {}};
    prometheus::MetricFamily progress_age{
        "cohort_task_progress_age_seconds",
        "Seconds since the connected rank's program last reported a new step",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily report_age{
        "cohort_task_program_report_age_seconds",
        "Seconds since the connected rank's program last reported collective progress",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily in_barrier{
        "cohort_task_in_oldest_barrier",
        "1 if the rank has arrived at the oldest open barrier, else 0",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::MetricFamily state{"cohort_task_state",
                                   "1 for each rank's current state, labelled with the protocol "
                                   "it registered with",
                                   prometheus::MetricType::Gauge,
                                   {}};
    for (size_t i = 0; i < snap.tasks.size(); ++i) {
      const auto& t = snap.tasks[i];
      std::string rank = absl::StrCat(i);
      up.metric.push_back(
          GaugeSample(t.state == coordination::TaskState::kConnected ? 1 : 0, {{"rank", rank}}));
      state.metric.push_back(GaugeSample(
          1, {{"rank", rank},
              {"state", std::string(coordination::TaskStateName(t.state))},
              {"protocol", t.state == coordination::TaskState::kDisconnected ? std::string("none")
                                                                             : t.protocol}}));
      if (t.state == coordination::TaskState::kConnected) {
        age.metric.push_back(
            GaugeSample(absl::ToDoubleSeconds(snap.now - t.last_heartbeat), {{"rank", rank}}));
      }
      if (t.step)
        step.metric.push_back(GaugeSample(static_cast<double>(*t.step), {{"rank", rank}}));
      if (t.step &&
          t.state == coordination::TaskState::kConnected) {  // A finished rank is not stuck.
        progress_age.metric.push_back(
            GaugeSample(absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), snap.now - t.step_at)),
                        {{"rank", rank}}));
      }
      if (t.report_at != absl::InfinitePast() && t.state == coordination::TaskState::kConnected) {
        report_age.metric.push_back(GaugeSample(
            absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), snap.now - t.report_at)),
            {{"rank", rank}}));
      }
      in_barrier.metric.push_back(GaugeSample(t.in_oldest_barrier ? 1 : 0, {{"rank", rank}}));
    }
    out.push_back(std::move(up));
    out.push_back(std::move(age));
    out.push_back(std::move(state));
    out.push_back(std::move(step));
    out.push_back(std::move(progress_age));
    out.push_back(std::move(report_age));
    out.push_back(std::move(in_barrier));
  }
  out.push_back({"cohort_job_failed",
                 "1 once any rank failed and the job is failing",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(snap.job_failed ? 1 : 0, {})}});
  out.push_back({"cohort_kv_entries",
                 "Entries in the coordinator's key-value store",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(snap.kv_entries, {})}});
  out.push_back({"cohort_kv_blocking_gets",
                 "Blocking gets waiting for a key",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(snap.kv_waiters, {})}});
  out.push_back({"cohort_barriers_in_progress",
                 "Barriers waiting for participants",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(snap.barriers_in_progress, {})}});
  double oldest = snap.oldest_barrier_since == absl::InfiniteFuture()
                      ? 0
                      : absl::ToDoubleSeconds(
                            std::max(absl::ZeroDuration(), snap.now - snap.oldest_barrier_since));
  out.push_back({"cohort_barrier_oldest_open_seconds",
                 "Age of the oldest open barrier; 0 when none is open",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(oldest, {})}});
  out.push_back({"cohort_event_streams",
                 "Open event streams: libdist agents' WatchJob and JAX processes' PollForError",
                 prometheus::MetricType::Gauge,
                 {GaugeSample(snap.event_watchers, {})}});
  return out;
}

}  // namespace cohort::sidecar
