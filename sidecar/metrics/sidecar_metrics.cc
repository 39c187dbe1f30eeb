#include "sidecar/metrics/sidecar_metrics.h"

#include <prometheus/metric_family.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"


namespace cohort::sidecar {
namespace {

std::string CodeLabel(const absl::Status& status) {
  std::string name = absl::StatusCodeToString(status.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

prometheus::ClientMetric GaugeSample(double value, std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

}  // namespace

SidecarMetrics::SidecarMetrics(prometheus::Registry& registry, int32_t rank)
    : kv_operations_(prometheus::BuildCounter()
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
                              .Add({})),
      agent_connected_(prometheus::BuildGauge()
                           .Name("cohort_agent_connected")
                           .Help("1 while this rank's agent is registered with the coordinator")
                           .Register(registry)
                           .Add({})),
      trainer_attached_(prometheus::BuildGauge()
                            .Name("cohort_trainer_attached")
                            .Help("1 while a trainer process is attached to this sidecar")
                            .Register(registry)
                            .Add({})) {
  // Known series start at zero, so rate() and alerts work before the first event.
  for (const char* op : {"set", "get", "try_get", "dir", "delete", "increment"}) {
    kv_operations_.Add({{"operation", op}, {"result", "ok"}});
  }
  ObserveBarrierBuckets({{"result", "ok"}});
  for (auto cause : {coordination::FailureCause::kProcessExited,
                     coordination::FailureCause::kHeartbeatTimeout,
                     coordination::FailureCause::kPreempted, coordination::FailureCause::kRestarted,
                     coordination::FailureCause::kReportedError,
                     coordination::FailureCause::kServiceUnreachable,
                     coordination::FailureCause::kCollectiveTimeout}) {
    failures_.Add({{"cause", std::string(coordination::FailureCauseName(cause))}});
  }
  prometheus::BuildGauge()
      .Name("cohort_rank")
      .Help("The rank (process id) this sidecar serves")
      .Register(registry)
      .Add({})
      .Set(rank);
}

void SidecarMetrics::CountKeyValue(absl::string_view operation, const absl::Status& status) {
  kv_operations_.Add({{"operation", std::string(operation)}, {"result", CodeLabel(status)}})
      .Increment();
}

prometheus::Histogram& SidecarMetrics::ObserveBarrierBuckets(
    const std::map<std::string, std::string>& labels) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800};
  return barrier_wait_.Add(labels, kBuckets);
}

void SidecarMetrics::ObserveBarrier(absl::Duration wait, const absl::Status& status) {
  ObserveBarrierBuckets({{"result", CodeLabel(status)}}).Observe(absl::ToDoubleSeconds(wait));
}

void SidecarMetrics::CountFailure(coordination::FailureCause cause) {
  failures_.Add({{"cause", std::string(coordination::FailureCauseName(cause))}}).Increment();
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
        h = &waits_.Add({{"protocol", std::string(protocol)}, {"method", std::string(method)}},
                        prometheus::Histogram::BucketBoundaries{0.001, 0.01, 0.1, 1, 10, 60, 300, 1800});
      }
      histogram = h;
    }
  }
  counter->Increment();
  if (histogram != nullptr) histogram->Observe(absl::ToDoubleSeconds(*waited));
}

std::vector<prometheus::MetricFamily> CoordinatorCollector::Collect() const {
  coordination::CoordinationService::Snapshot snap = service_->GetSnapshot();
  std::vector<prometheus::MetricFamily> out;

  prometheus::MetricFamily by_state{"cohort_tasks", "Tasks by state, as the coordinator sees them",
                                    prometheus::MetricType::Gauge, {}};
  std::map<std::string, int> counts;
  for (auto state : {coordination::TaskState::kDisconnected, coordination::TaskState::kConnecting,
                     coordination::TaskState::kConnected, coordination::TaskState::kFailed,
                     coordination::TaskState::kShutDown}) {
    counts[std::string(coordination::TaskStateName(state))] = 0;
  }
  for (const auto& t : snap.tasks) ++counts[std::string(coordination::TaskStateName(t.state))];
  for (const auto& [state, n] : counts) by_state.metric.push_back(GaugeSample(n, {{"state", state}}));
  out.push_back(std::move(by_state));

  if (snap.tasks.size() <= per_rank_limit_) {
    prometheus::MetricFamily up{"cohort_task_up",
                                "1 if the rank is connected and heartbeating, else 0",
                                prometheus::MetricType::Gauge, {}};
    prometheus::MetricFamily age{"cohort_task_heartbeat_age_seconds",
                                 "Seconds since the coordinator last heard from the rank",
                                 prometheus::MetricType::Gauge, {}};
    prometheus::MetricFamily state{"cohort_task_state",
                                   "1 for each rank's current state, labelled with the protocol "
                                   "it registered with",
                                   prometheus::MetricType::Gauge, {}};
    for (size_t i = 0; i < snap.tasks.size(); ++i) {
      const auto& t = snap.tasks[i];
      std::string rank = absl::StrCat(i);
      up.metric.push_back(
          GaugeSample(t.state == coordination::TaskState::kConnected ? 1 : 0, {{"rank", rank}}));
      state.metric.push_back(
          GaugeSample(1, {{"rank", rank},
                          {"state", std::string(coordination::TaskStateName(t.state))},
                          {"protocol", t.state == coordination::TaskState::kDisconnected
                                           ? std::string("none")
                                           : t.protocol}}));
      if (t.state == coordination::TaskState::kConnected) {
        age.metric.push_back(GaugeSample(absl::ToDoubleSeconds(snap.now - t.last_heartbeat),
                                         {{"rank", rank}}));
      }
    }
    out.push_back(std::move(up));
    out.push_back(std::move(age));
    out.push_back(std::move(state));
  }
  out.push_back({"cohort_job_failed", "1 once any rank failed and the job is failing",
                 prometheus::MetricType::Gauge, {GaugeSample(snap.job_failed ? 1 : 0, {})}});
  out.push_back({"cohort_kv_entries", "Entries in the coordinator's key-value store",
                 prometheus::MetricType::Gauge, {GaugeSample(snap.kv_entries, {})}});
  out.push_back({"cohort_kv_blocking_gets", "Blocking gets waiting for a key",
                 prometheus::MetricType::Gauge, {GaugeSample(snap.kv_waiters, {})}});
  out.push_back({"cohort_barriers_in_progress", "Barriers waiting for participants",
                 prometheus::MetricType::Gauge, {GaugeSample(snap.barriers_in_progress, {})}});
  out.push_back({"cohort_event_streams",
                 "Open event streams: libdist agents' WatchJob and JAX processes' PollForError",
                 prometheus::MetricType::Gauge, {GaugeSample(snap.event_watchers, {})}});
  return out;
}


}  // namespace cohort::sidecar
