#include "coordination/wire/proto_convert.h"

namespace cohort::coordination {

// The wire numbers of common/failure_cause.h's table are the proto's.
static_assert(InfoOf(FailureCause::kUnspecified).wire == pb::FAILURE_CAUSE_UNSPECIFIED);
static_assert(InfoOf(FailureCause::kProcessExited).wire == pb::FAILURE_CAUSE_PROCESS_EXITED);
static_assert(InfoOf(FailureCause::kHeartbeatTimeout).wire == pb::FAILURE_CAUSE_HEARTBEAT_TIMEOUT);
static_assert(InfoOf(FailureCause::kPreempted).wire == pb::FAILURE_CAUSE_PREEMPTED);
static_assert(InfoOf(FailureCause::kRestarted).wire == pb::FAILURE_CAUSE_RESTARTED);
static_assert(InfoOf(FailureCause::kReportedError).wire == pb::FAILURE_CAUSE_REPORTED_ERROR);
static_assert(InfoOf(FailureCause::kRegistrationTimeout).wire ==
              pb::FAILURE_CAUSE_REGISTRATION_TIMEOUT);
static_assert(InfoOf(FailureCause::kShutdownTimeout).wire == pb::FAILURE_CAUSE_SHUTDOWN_TIMEOUT);
static_assert(InfoOf(FailureCause::kServiceUnreachable).wire ==
              pb::FAILURE_CAUSE_SERVICE_UNREACHABLE);
static_assert(InfoOf(FailureCause::kCollectiveTimeout).wire ==
              pb::FAILURE_CAUSE_COLLECTIVE_TIMEOUT);
static_assert(InfoOf(FailureCause::kOutOfMemory).wire == pb::FAILURE_CAUSE_OUT_OF_MEMORY);
static_assert(InfoOf(FailureCause::kKilledBySignal).wire == pb::FAILURE_CAUSE_KILLED_BY_SIGNAL);
static_assert(InfoOf(FailureCause::kHung).wire == pb::FAILURE_CAUSE_HUNG);
static_assert(std::size(kFailureCauses) == 13, "a new cause needs its proto number checked here");

pb::FailureCause ToProto(FailureCause cause) {
  return static_cast<pb::FailureCause>(InfoOf(cause).wire);
}

FailureCause FromProto(pb::FailureCause cause) {
  return FailureCauseFromWire(static_cast<int32_t>(cause)).value_or(FailureCause::kUnspecified);
}

pb::JobEvent ToProto(const JobEvent& event) {
  pb::JobEvent out;
  if (const auto* f = std::get_if<TaskFailure>(&event)) {
    pb::TaskFailure* tf = out.mutable_task_failure();
    tf->set_task_id(f->task);
    tf->set_cause(ToProto(f->cause));
    tf->set_message(f->message);
  } else if (const auto* p = std::get_if<PreemptionNotice>(&event)) {
    pb::PreemptionNotice* pn = out.mutable_preemption();
    pn->set_task_id(p->task);
    pn->set_notice_unix_ms(absl::ToUnixMillis(p->time));
  }
  return out;
}

JobEvent FromProto(const pb::JobEvent& event) {
  if (event.has_preemption()) {
    return PreemptionNotice{event.preemption().task_id(),
                            absl::FromUnixMillis(event.preemption().notice_unix_ms())};
  }
  return TaskFailure{event.task_failure().task_id(), FromProto(event.task_failure().cause()),
                     event.task_failure().message()};
}

void ToProto(KeyValueEntries entries, google::protobuf::RepeatedPtrField<pb::KeyValue>* out) {
  out->Reserve(out->size() + static_cast<int>(entries.size()));
  for (auto& [key, value] : entries) {
    pb::KeyValue* kv = out->Add();
    kv->set_key(std::move(key));
    kv->set_value(std::move(value));
  }
}

KeyValueEntries FromProto(const google::protobuf::RepeatedPtrField<pb::KeyValue>& kvs) {
  KeyValueEntries out;
  out.reserve(kvs.size());
  for (const pb::KeyValue& kv : kvs) out.emplace_back(kv.key(), kv.value());
  return out;
}

void ToProto(const std::vector<CollectiveProgress>& progress,
             google::protobuf::RepeatedPtrField<pb::CollectiveProgress>* out) {
  for (const CollectiveProgress& c : progress) {
    pb::CollectiveProgress* p = out->Add();
    p->set_communicator(c.communicator);
    p->set_last_started(c.last_started);
    p->set_last_completed(c.last_completed);
    p->set_pending(c.pending);
    p->set_pending_signature(c.pending_signature);
    p->set_pending_ms(absl::ToInt64Milliseconds(c.pending_for));
  }
}

std::vector<CollectiveProgress> FromProto(
    const google::protobuf::RepeatedPtrField<pb::CollectiveProgress>& progress) {
  std::vector<CollectiveProgress> out;
  out.reserve(progress.size());
  for (const pb::CollectiveProgress& p : progress) {
    out.push_back(CollectiveProgress{p.communicator(), p.last_started(), p.last_completed(),
                                     p.pending(), p.pending_signature(),
                                     absl::Milliseconds(p.pending_ms())});
  }
  return out;
}

void ToProto(const std::vector<TaskProgress>& tasks, pb::GetJobProgressResponse* out) {
  for (const TaskProgress& t : tasks) {
    pb::TaskProgress* p = out->add_tasks();
    p->set_task_id(t.task);
    p->set_state(std::string(TaskStateName(t.state)));
    if (t.since_heartbeat) p->set_heartbeat_age_ms(absl::ToInt64Milliseconds(*t.since_heartbeat));
    if (t.since_report) p->set_report_age_ms(absl::ToInt64Milliseconds(*t.since_report));
    ToProto(t.communicators, p->mutable_progress());
  }
}

std::vector<TaskProgress> FromProto(const pb::GetJobProgressResponse& response) {
  std::vector<TaskProgress> out;
  for (const pb::TaskProgress& p : response.tasks()) {
    TaskProgress t;
    t.task = p.task_id();
    for (TaskState s : {TaskState::kDisconnected, TaskState::kConnecting, TaskState::kConnected,
                        TaskState::kFailed, TaskState::kShutDown}) {
      if (TaskStateName(s) == p.state()) t.state = s;
    }
    if (p.has_heartbeat_age_ms()) t.since_heartbeat = absl::Milliseconds(p.heartbeat_age_ms());
    if (p.has_report_age_ms()) t.since_report = absl::Milliseconds(p.report_age_ms());
    t.communicators = FromProto(p.progress());
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace cohort::coordination
