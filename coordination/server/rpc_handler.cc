#include "coordination/server/rpc_handler.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordination/wire/proto_convert.h"

namespace cohort::coordination {

CoordinationRpcHandler::CoordinationRpcHandler(CoordinationService* service,
                                               std::shared_ptr<ReplyBudget> reply_budget)
    : service_(service), reply_budget_(std::move(reply_budget)) {}

OpId CoordinationRpcHandler::RegisterTaskAsync(const pb::RegisterTaskRequest* request,
                                               pb::RegisterTaskResponse* response,
                                               StatusCallback done) {
  RegisterArgs args;
  args.task = request->task_id();
  args.incarnation = request->incarnation();
  args.num_tasks = request->num_tasks();
  args.hostname = request->hostname();
  args.pid = request->pid();
  if (request->has_restart_attempt()) args.restart_attempt = request->restart_attempt();
  CoordinationService* service = service_;
  return service_->RegisterTask(args, [service, response, done = std::move(done)](absl::Status s) {
    if (s.ok()) {
      response->set_service_incarnation(service->service_incarnation());
      response->set_num_tasks(service->config().num_tasks);
    }
    done(std::move(s));
  });
}

OpId CoordinationRpcHandler::HeartbeatAsync(const pb::HeartbeatRequest* request,
                                            pb::HeartbeatResponse* response, StatusCallback done) {
  std::optional<StepReport> step;
  if (request->has_step()) {
    step = StepReport{request->step(),
                      absl::Milliseconds(std::max<int64_t>(0, request->step_age_ms()))};
  }
  std::vector<CollectiveProgress> progress;
  if (request->has_progress_age_ms()) progress = FromProto(request->progress());
  absl::Status s = service_->Heartbeat(request->task_id(), request->incarnation(),
                                       request->has_progress_age_ms() ? &progress : nullptr,
                                       absl::Milliseconds(request->progress_age_ms()), step);
  response->set_service_incarnation(service_->service_incarnation());
  done(std::move(s));
  return 0;
}

OpId CoordinationRpcHandler::GetJobProgressAsync(const pb::GetJobProgressRequest* request,
                                                 pb::GetJobProgressResponse* response,
                                                 StatusCallback done) {
  absl::StatusOr<std::vector<TaskProgress>> tasks =
      service_->GetJobProgress(request->task_id(), request->incarnation());
  if (tasks.ok()) ToProto(*tasks, response);
  done(tasks.status());
  return 0;
}

OpId CoordinationRpcHandler::ReportErrorAsync(const pb::ReportErrorRequest* request,
                                              pb::ReportErrorResponse*, StatusCallback done) {
  done(service_->ReportError(request->task_id(), request->incarnation(),
                             FromProto(request->cause()), request->message()));
  return 0;
}

OpId CoordinationRpcHandler::ShutdownTaskAsync(const pb::ShutdownTaskRequest* request,
                                               pb::ShutdownTaskResponse*, StatusCallback done) {
  return service_->ShutdownTask(request->task_id(), request->incarnation(), std::move(done));
}

namespace {
// Cohort's protocol always names its caller: a negative task id (the core's kUnidentifiedTask,
// which only the JAX port's older generation uses) is refused before it reaches the service.
absl::Status CheckNamedTask(int32_t task) {
  if (task >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "task id ", task, " is negative; a key-value call names the caller's rank (0..N-1)"));
}
}  // namespace

OpId CoordinationRpcHandler::InsertKeyValueAsync(const pb::InsertKeyValueRequest* request,
                                                 pb::InsertKeyValueResponse*, StatusCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s);
    return 0;
  }
  done(service_->InsertKeyValue(request->task_id(), request->incarnation(), request->kv().key(),
                                request->kv().value(), request->allow_overwrite()));
  return 0;
}

OpId CoordinationRpcHandler::GetKeyValueAsync(const pb::GetKeyValueRequest* request,
                                              pb::GetKeyValueResponse* response,
                                              StatusCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s);
    return 0;
  }
  return service_->GetKeyValue(
      request->task_id(), request->incarnation(), request->key(),
      absl::Milliseconds(request->timeout_ms()),
      [response, key = request->key(), done = std::move(done)](absl::StatusOr<std::string> v) {
        if (v.ok()) {
          response->mutable_kv()->set_key(key);
          response->mutable_kv()->set_value(*std::move(v));
        }
        done(v.status());
      });
}

OpId CoordinationRpcHandler::TryGetKeyValueAsync(const pb::TryGetKeyValueRequest* request,
                                                 pb::TryGetKeyValueResponse* response,
                                                 StatusCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s);
    return 0;
  }
  absl::StatusOr<std::string> v =
      service_->TryGetKeyValue(request->task_id(), request->incarnation(), request->key());
  if (v.ok()) {
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(*std::move(v));
  }
  done(v.status());
  return 0;
}

OpId CoordinationRpcHandler::GetKeyValueDirAsync(const pb::GetKeyValueDirRequest* request,
                                                 pb::GetKeyValueDirResponse* response,
                                                 ReplyCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s, ReplyBudget::Charge());
    return 0;
  }
  // A directory reply can be large (all N keys): it is built only when the budget has room.
  reply_budget_->Admit([service = service_, budget = reply_budget_, task = request->task_id(),
                        incarnation = request->incarnation(), directory = request->directory(),
                        response, done = std::move(done)]() mutable {
    absl::StatusOr<KeyValueEntries> entries = service->GetKeyValueDir(task, incarnation, directory);
    if (entries.ok()) ToProto(*std::move(entries), response->mutable_kvs());
    done(entries.status(), budget->Take(response->ByteSizeLong()));
  });
  return 0;
}

OpId CoordinationRpcHandler::DeleteKeyValueAsync(const pb::DeleteKeyValueRequest* request,
                                                 pb::DeleteKeyValueResponse*, StatusCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s);
    return 0;
  }
  done(service_->DeleteKeyValue(request->task_id(), request->incarnation(), request->key()));
  return 0;
}

OpId CoordinationRpcHandler::IncrementKeyValueAsync(const pb::IncrementKeyValueRequest* request,
                                                    pb::IncrementKeyValueResponse* response,
                                                    StatusCallback done) {
  if (absl::Status s = CheckNamedTask(request->task_id()); !s.ok()) {
    done(s);
    return 0;
  }
  absl::StatusOr<int64_t> v = service_->IncrementKeyValue(
      request->task_id(), request->incarnation(), request->key(), request->increment());
  if (v.ok()) response->set_value(*v);
  done(v.status());
  return 0;
}

OpId CoordinationRpcHandler::BarrierAsync(const pb::BarrierRequest* request,
                                          pb::BarrierResponse* response, StatusCallback done) {
  BarrierArgs args{request->task_id(),
                   request->incarnation(),
                   request->barrier_id(),
                   request->counter(),
                   absl::Milliseconds(request->timeout_ms()),
                   {request->task_ids().begin(), request->task_ids().end()}};
  response->set_counter(request->counter());
  // Cohort's protocol asks for a name and a timeout; the core also serves XLA's, which asks for
  // neither.
  if (args.id.empty()) {
    done(absl::InvalidArgumentError("barrier id is empty; name the barrier"));
    return 0;
  }
  if (args.timeout <= absl::ZeroDuration()) {
    done(absl::InvalidArgumentError(
        absl::StrCat("barrier '", args.id, "': the timeout must be positive")));
    return 0;
  }
  return service_->Barrier(args, std::move(done));
}

OpId CoordinationRpcHandler::CancelBarrierAsync(const pb::CancelBarrierRequest* request,
                                                pb::CancelBarrierResponse*, StatusCallback done) {
  done(service_->CancelBarrier(request->task_id(), request->incarnation(), request->barrier_id(),
                               request->counter()));
  return 0;
}

OpId CoordinationRpcHandler::ReportPreemptionAsync(const pb::ReportPreemptionRequest* request,
                                                   pb::ReportPreemptionResponse*,
                                                   StatusCallback done) {
  done(service_->ReportPreemption(request->task_id(), request->incarnation()));
  return 0;
}

absl::StatusOr<OpId> CoordinationRpcHandler::WatchJob(const pb::WatchJobRequest* request,
                                                      EventCallback on_event) {
  return service_->Watch(
      request->task_id(), request->incarnation(),
      [on_event = std::move(on_event)](const JobEvent& e) { on_event(ToProto(e)); });
}

}  // namespace cohort::coordination
