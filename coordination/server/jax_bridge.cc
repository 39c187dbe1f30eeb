#include "coordination/server/jax_bridge.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "coordination/core/key_value_store.h"

namespace cohort::coordination {
namespace {

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_full, t, absl::UTCTimeZone());
}

}  // namespace

JaxBridge::JaxBridge(CoordinationService* service, JaxPortOptions options)
    : service_(service), options_(std::move(options)) {
  options_.heartbeat_timeout =
      std::max(options_.heartbeat_timeout, service_->config().heartbeat_timeout);
  if (options_.reply_budget == nullptr) options_.reply_budget = ReplyBudget::Create();
}

RegisterArgs JaxBridge::RegisterArgsFor(TaskId task, Incarnation incarnation,
                                        absl::string_view protocol, absl::string_view peer) const {
  RegisterArgs args;
  args.task = task;
  args.incarnation = incarnation;
  args.num_tasks = service_->config().num_tasks;  // JAX's request does not say; no mismatch.
  // gRPC names the peer "ipv4:10.0.0.7:41234"; JAX sends no host name or pid.
  absl::ConsumePrefix(&peer, "ipv4:");
  absl::ConsumePrefix(&peer, "ipv6:");
  args.hostname = absl::StrCat("JAX process at ", peer);
  args.heartbeat_timeout = options_.heartbeat_timeout;
  args.protocol = std::string(protocol);
  args.watch_broke =
      "its JAX process died or was killed: its PollForError call to the JAX port broke before "
      "the process shut down";
  return args;
}

OpId JaxBridge::Register(TaskId task, Incarnation incarnation, absl::string_view protocol,
                         absl::string_view peer, std::function<void(absl::Status)> done) {
  return service_->RegisterTask(
      RegisterArgsFor(task, incarnation, protocol, peer),
      // The service may answer after the port's services are gone (it fails what still
      // waits when it stops): the callback keeps the bridge.
      [self = shared_from_this(), task, incarnation, done = std::move(done)](absl::Status s) {
        if (s.ok()) self->Remember(task, incarnation);
        done(s);
      });
}

void JaxBridge::Remember(TaskId task, Incarnation incarnation) {
  absl::MutexLock lock(&mu_);
  incarnation_of_[task] = incarnation;
  task_of_[incarnation] = task;
}

Incarnation JaxBridge::IncarnationOf(TaskId task) const {
  absl::MutexLock lock(&mu_);
  auto it = incarnation_of_.find(task);
  return it == incarnation_of_.end() ? 0 : it->second;
}

TaskId JaxBridge::TaskOf(Incarnation incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = task_of_.find(incarnation);
  return it == task_of_.end() ? kUnidentifiedTask : it->second;
}

void JaxBridge::PublishPreemptionNotice(const PreemptionNotice& notice) {
  absl::Status s = service_->InsertKeyValue(kUnidentifiedTask, 0, kJaxPreemptionNoticeKey,
                                            Rfc3339(notice.time), /*allow_overwrite=*/false);
  if (s.ok()) {
    LogInfo("JAX port: preemption notice from rank ", notice.task, " published as ",
            kJaxPreemptionNoticeKey);
  }
}

void JaxBridge::AfterInsert(TaskId task, absl::string_view key) {
  if (KeyValueStore::NormalizeKey(key) != kJaxPreemptionNoticeKey) return;
  absl::Status s = service_->ReportPreemption(task < 0 ? 0 : task, kObserverIncarnation);
  if (!s.ok()) {
    LogDebug("JAX port: preemption notice from rank ", task, " not recorded: ", s.message());
  }
}

void JaxBridge::Count(absl::string_view protocol, absl::string_view method, absl::StatusCode code,
                      std::optional<absl::Duration> waited) const {
  if (options_.on_rpc) options_.on_rpc(protocol, method, code, waited);
}

void JaxBridge::RememberReportedError(TaskId task, absl::Status error) {
  absl::MutexLock lock(&mu_);
  reported_.try_emplace(task, std::move(error));
}

void JaxBridge::ForgetReportedError(TaskId task) {
  absl::MutexLock lock(&mu_);
  reported_.erase(task);
}

std::optional<absl::Status> JaxBridge::ReportedError(TaskId task) const {
  absl::MutexLock lock(&mu_);
  auto it = reported_.find(task);
  if (it == reported_.end()) return std::nullopt;
  return it->second;
}

XlaError JaxBridge::FailureError(const TaskFailure& failure) const {
  return JobFailureError(failure, service_->service_incarnation(), ReportedError(failure.task));
}

std::vector<WatchedTask> JaxBridge::WatchedTasks(
    const CoordinationService::TaskStates& states) const {
  std::vector<WatchedTask> out;
  for (TaskId t = 0; t < static_cast<TaskId>(states.tasks.size()); ++t) {
    const CoordinationService::TaskStates::Entry& e = states.tasks[t];
    WatchedTask w;
    w.task = t;
    w.incarnation = e.incarnation;
    if (e.state == TaskState::kConnecting || e.state == TaskState::kConnected)
      w.state = WatchedTask::State::kConnected;
    if (e.state == TaskState::kFailed) {
      w.state = WatchedTask::State::kError;
      if (e.failure) {
        w.error = TaskStateError(*e.failure, service_->service_incarnation(), ReportedError(t));
        w.reported = e.failure->cause == FailureCause::kReportedError;
      } else {
        w.error =
            absl::AbortedError(absl::StrCat("Cohort coordination service: task ", t, " failed"));
      }
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace cohort::coordination
