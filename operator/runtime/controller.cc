#include "operator/runtime/controller.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "common/log.h"
#include "kube/json_fields.h"
#include "operator/reconciler/children.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

absl::Duration FailureBackoff(int failures) {
  return DoublingDelay(absl::Milliseconds(5), absl::Minutes(5), failures);
}

}  // namespace

Controller::Controller(kube::KubeClient* client, Clock* clock, Reconciler* reconciler,
                       OperatorMetrics* metrics, ControllerOptions options)
    : client_(client),
      reconciler_(reconciler),
      metrics_(metrics),
      options_(std::move(options)),
      queue_(clock) {
  jobs_ = std::make_unique<kube::Informer>(
      client_, kDistributedJobs, options_.ns, "",
      [this](const std::string& type, const json& job) {
        std::string key = kube::ObjectKey(job);
        if (type == "DELETED") {
          metrics_->SetJobPhase(key, std::nullopt);
        } else if (std::optional<Phase> phase =
                       ParsePhase(kube::StringMember(kube::Member(job, "status"), "phase"))) {
          metrics_->SetJobPhase(key, phase);
        }
        queue_.Add(key);
      },
      options_.watch_timeout);
  pods_ = std::make_unique<kube::Informer>(
      client_, kube::kPods, options_.ns, kJobNameLabel,
      [this](const std::string&, const json& pod) {
        const json& meta = kube::Member(pod, "metadata");
        std::string job = kube::StringMember(kube::Member(meta, "labels"), kJobNameLabel);
        if (job.empty()) {
          // A DELETED from a relist: the name only, a rank's (or replacement's) or a spare's.
          const std::string name = kube::StringMember(meta, "name");
          for (const std::string& owner : {JobOfPodName(name), JobOfSparePodName(name)}) {
            if (!owner.empty())
              queue_.Add(absl::StrCat(kube::StringMember(meta, "namespace"), "/", owner));
          }
          return;
        }
        queue_.Add(absl::StrCat(kube::StringMember(meta, "namespace"), "/", job));
      },
      options_.watch_timeout);
}

Controller::~Controller() { Stop(); }

void Controller::Start() {
  jobs_->Start();
  pods_->Start();
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
}

bool Controller::WaitForSync(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  return jobs_->WaitForSync(timeout) &&
         pods_->WaitForSync(std::max(absl::ZeroDuration(), deadline - absl::Now()));
}

void Controller::Stop() {
  queue_.ShutDown();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  if (jobs_) jobs_->Stop();
  if (pods_) pods_->Stop();
}

void Controller::Work() {
  while (std::optional<std::string> key = queue_.Get()) {
    Process(*key);
    queue_.Done(*key);
  }
}

void Controller::Process(const std::string& key) {
  size_t slash = key.find('/');
  std::string ns = key.substr(0, slash);
  std::string name = key.substr(slash + 1);
  absl::Time start = absl::Now();
  ReconcileReport report;
  absl::StatusOr<std::optional<absl::Duration>> result = reconciler_->Reconcile(ns, name, &report);
  metrics_->ObserveReconcile(key, absl::Now() - start, result.status(), report);
  if (LogEnabled(
          LogLevel::kDebug)) {  // --log-level debug: one line per pass, to follow a job's timeline.
    LogDebug("reconcile ", key, " took ", absl::FormatDuration(absl::Now() - start), ": ",
             result.ok() ? "ok" : result.status().ToString(),
             report.phase ? absl::StrCat(", phase ", PhaseName(*report.phase)) : "",
             ", pods created ", report.pods_created, ", deleted ", report.pods_deleted,
             report.started_attempt ? ", next attempt ordered" : "",
             report.event_reasons.empty()
                 ? ""
                 : absl::StrCat(", events ", absl::StrJoin(report.event_reasons, " ")),
             result.ok() && result->has_value()
                 ? absl::StrCat(", again in ", absl::FormatDuration(**result))
                 : "");
  }
  if (report.phase) metrics_->SetJobPhase(key, report.phase);
  int failures = 0;
  {
    absl::MutexLock lock(&mu_);
    if (result.ok()) {
      failures_.erase(key);
    } else if (!absl::IsAborted(result.status())) {
      failures = ++failures_[key];
    }
  }
  if (result.ok()) {
    if (result->has_value()) queue_.AddAfter(key, **result);
    return;
  }
  if (absl::IsAborted(result.status())) {
    queue_.Add(key);  // A conflicting write: read the job again now.
    return;
  }
  absl::Duration wait = FailureBackoff(failures);
  LogWarning("reconcile ", key, " failed (attempt ", failures, "): ", result.status().message(),
             "; retrying in ", absl::FormatDuration(wait));
  queue_.AddAfter(key, wait);
}

}  // namespace cohort::op
