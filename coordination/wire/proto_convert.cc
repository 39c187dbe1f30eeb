#include "coordination/wire/proto_convert.h"

namespace cohort::coordination {

pb::FailureCause ToProto(FailureCause cause) {
  switch (cause) {
    case FailureCause::kProcessExited: return pb::FAILURE_CAUSE_PROCESS_EXITED;
    case FailureCause::kHeartbeatTimeout: return pb::FAILURE_CAUSE_HEARTBEAT_TIMEOUT;
    case FailureCause::kPreempted: return pb::FAILURE_CAUSE_PREEMPTED;
    case FailureCause::kRestarted: return pb::FAILURE_CAUSE_RESTARTED;
    case FailureCause::kReportedError: return pb::FAILURE_CAUSE_REPORTED_ERROR;
    case FailureCause::kRegistrationTimeout: return pb::FAILURE_CAUSE_REGISTRATION_TIMEOUT;
    case FailureCause::kShutdownTimeout: return pb::FAILURE_CAUSE_SHUTDOWN_TIMEOUT;
    case FailureCause::kServiceUnreachable: return pb::FAILURE_CAUSE_SERVICE_UNREACHABLE;
    case FailureCause::kCollectiveTimeout: return pb::FAILURE_CAUSE_COLLECTIVE_TIMEOUT;
    case FailureCause::kUnspecified: break;
  }
  return pb::FAILURE_CAUSE_UNSPECIFIED;
}

FailureCause FromProto(pb::FailureCause cause) {
  switch (cause) {
    case pb::FAILURE_CAUSE_PROCESS_EXITED: return FailureCause::kProcessExited;
    case pb::FAILURE_CAUSE_HEARTBEAT_TIMEOUT: return FailureCause::kHeartbeatTimeout;
    case pb::FAILURE_CAUSE_PREEMPTED: return FailureCause::kPreempted;
    case pb::FAILURE_CAUSE_RESTARTED: return FailureCause::kRestarted;
    case pb::FAILURE_CAUSE_REPORTED_ERROR: return FailureCause::kReportedError;
    case pb::FAILURE_CAUSE_REGISTRATION_TIMEOUT: return FailureCause::kRegistrationTimeout;
    case pb::FAILURE_CAUSE_SHUTDOWN_TIMEOUT: return FailureCause::kShutdownTimeout;
    case pb::FAILURE_CAUSE_SERVICE_UNREACHABLE: return FailureCause::kServiceUnreachable;
    case pb::FAILURE_CAUSE_COLLECTIVE_TIMEOUT: return FailureCause::kCollectiveTimeout;
    default: break;
  }
  return FailureCause::kUnspecified;
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

}  // namespace cohort::coordination
