#include "sidecar/agent/agent_rpc_service.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/grpc_event_stream.h"
#include "common/log.h"
#include "coordination/client/grpc_coordination_stub.h"
#include "coordination/wire/proto_convert.h"
#include "sidecar/metrics/sidecar_metrics.h"

namespace cohort::sidecar {
namespace {

using coordination::FailureCause;
using coordination::PreemptionNotice;
using coordination::TaskFailure;

agentpb::AgentEvent ToAgentEvent(const coordination::JobEvent& event) {
  agentpb::AgentEvent out;
  *out.mutable_job_event() = coordination::ToProto(event);
  return out;
}

}  // namespace

AgentRpcService::AgentRpcService(AgentOptions options, SidecarMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

AgentRpcService::~AgentRpcService() {
  std::shared_ptr<Agent> agent;
  {
    absl::MutexLock lock(&mu_);
    agent = agent_;
  }
  if (agent) agent->Cancel();
  if (connect_thread_.joinable()) connect_thread_.join();
}

bool AgentRpcService::agent_connected() const {
  absl::MutexLock lock(&mu_);
  return agent_ != nullptr && agent_->connected();
}

void AgentRpcService::SetOutcome(TrainerOutcome outcome) {
  absl::MutexLock lock(&mu_);
  if (outcome_ == TrainerOutcome::kRunning) outcome_ = outcome;
}

TrainerOutcome AgentRpcService::WaitForTrainer(absl::Time deadline) {
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outcome_ != TrainerOutcome::kRunning || stop_waiting_;
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return outcome_;
}

void AgentRpcService::StopWaiting() {
  absl::MutexLock lock(&mu_);
  stop_waiting_ = true;
}

void AgentRpcService::DetachTrainer(const absl::Status& status) {
  std::shared_ptr<EventStream<agentpb::AgentEvent>::Sink> sink;
  {
    absl::MutexLock lock(&mu_);
    sink = std::move(attach_sink_);
  }
  if (sink != nullptr) sink->FinishWith(status);
}

void AgentRpcService::Retire(const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    retired_ = true;
  }
  DetachTrainer(status);
}

bool AgentRpcService::trainer_ever_attached() const {
  absl::MutexLock lock(&mu_);
  return attached_;
}

bool AgentRpcService::RequestDump(uint64_t id, const std::string& directory) {
  std::shared_ptr<EventStream<agentpb::AgentEvent>::Sink> sink;
  {
    absl::MutexLock lock(&mu_);
    if (!connected_sent_ || trainer_gone_ || attach_sink_ == nullptr) return false;
    sink = attach_sink_;
  }
  agentpb::AgentEvent event;
  event.mutable_dump()->set_id(id);
  event.mutable_dump()->set_directory(directory);
  return sink->Push(std::move(event));
}

bool AgentRpcService::trainer_attached() const {
  absl::MutexLock lock(&mu_);
  return attached_ && !trainer_gone_ && outcome_ == TrainerOutcome::kRunning;
}

absl::StatusOr<std::shared_ptr<Agent>> AgentRpcService::ConnectedAgent() {
  absl::MutexLock lock(&mu_);
  if (agent_ == nullptr || !agent_->connected()) {
    return absl::FailedPreconditionError(
        "this rank is not connected to the job yet: call initialize() and wait for it to return "
        "before using the key-value store or barriers");
  }
  return agent_;
}

grpc::ServerWriteReactor<agentpb::AgentEvent>* AgentRpcService::Attach(
    grpc::CallbackServerContext* ctx, const agentpb::AttachRequest* req) {
  auto* stream = new EventStream<agentpb::AgentEvent>();
  auto sink = stream->sink();
  if (absl::Status auth = CheckToken(*ctx, options_.token); !auth.ok()) {
    sink->FinishWith(auth);
    return stream;
  }
  if (req->process_id() != options_.task || req->num_processes() != options_.num_tasks) {
    sink->FinishWith(absl::InvalidArgumentError(absl::StrCat(
        "the trainer says it is process ", req->process_id(), " of ", req->num_processes(),
        " but its sidecar serves process ", options_.task, " of ", options_.num_tasks,
        "; the trainer and the sidecar must see the same COHORT_PROCESS_ID and "
        "COHORT_NUM_PROCESSES")));
    return stream;
  }
  if (req->has_restart_attempt() && options_.restart_attempt &&
      req->restart_attempt() != *options_.restart_attempt) {
    sink->FinishWith(absl::InvalidArgumentError(
        absl::StrCat("the trainer says it belongs to restart attempt ", req->restart_attempt(),
                     " of the job but its sidecar to attempt ", *options_.restart_attempt,
                     "; the trainer and the sidecar must see the same COHORT_RESTART_ATTEMPT")));
    return stream;
  }
  std::shared_ptr<Agent> agent;
  {
    absl::MutexLock lock(&mu_);
    if (attached_) {
      sink->FinishWith(absl::AlreadyExistsError(
          "another trainer process is already attached to this sidecar; run one trainer per "
          "rank (a restarted trainer needs a new job incarnation)"));
      return stream;
    }
    attached_ = true;
    attach_sink_ = sink;
    AgentOptions options = options_;
    if (req->initialization_timeout_ms() > 0) {
      options.initialization_timeout = absl::Milliseconds(req->initialization_timeout_ms());
    }
    options.pid = req->pid();
    agent_ = std::make_shared<Agent>(options);
    agent = agent_;
  }
  if (metrics_) metrics_->SetTrainerAttached(true);
  int64_t pid = req->pid();
  LogInfo("trainer pid ", pid, " attached; registering rank ", options_.task, " of ",
          options_.num_tasks, " with ", options_.coordinator_address);
  stream->set_on_end([this, pid] { OnTrainerGone(pid); });

  // Connect blocks until every rank registered: run it off the gRPC threads.
  if (connect_thread_.joinable()) connect_thread_.join();
  connect_thread_ = std::thread([this, agent, sink] {
    pthread_setname_np(pthread_self(), "agent-connect");
    absl::Status s = agent->Connect([this, sink](const coordination::JobEvent& e) {
      if (const auto* f = std::get_if<TaskFailure>(&e)) {
        if (metrics_) metrics_->CountFailure(f->cause);
        LogError("job failure: ", f->message);
      } else if (metrics_) {
        metrics_->CountPreemptionNotice();
      }
      sink->Push(ToAgentEvent(e));
    });
    if (!s.ok()) {
      bool retired = false;
      {
        absl::MutexLock lock(&mu_);
        connect_failed_ = true;
        retired = retired_;
      }
      if (retired) {
        LogInfo("rank ", options_.task,
                " of an earlier restart attempt stopped joining: ", s.message());
      } else {
        LogError("rank ", options_.task, " could not join the job: ", s.message());
      }
      // The trainer hears why before the sidecar, seeing the outcome, exits.
      sink->FinishWith(s);
      SetOutcome(TrainerOutcome::kFailed);
      return;
    }
    if (metrics_) metrics_->SetAgentConnected(true);
    LogInfo("rank ", options_.task, " connected: all ", options_.num_tasks, " ranks registered");
    bool report_preemption = false;
    {
      absl::MutexLock lock(&mu_);
      report_preemption = preemption_signalled_;
    }
    agentpb::AgentEvent connected;
    connected.mutable_connected()->set_process_id(options_.task);
    connected.mutable_connected()->set_num_processes(options_.num_tasks);
    connected.mutable_connected()->set_incarnation(agent->incarnation());
    sink->Push(std::move(connected));
    {
      absl::MutexLock lock(&mu_);
      connected_sent_ = true;  // Other events may follow it now.
    }
    if (report_preemption) OnPreemptionSignal();
  });
  return stream;
}

void AgentRpcService::OnTrainerGone(int64_t pid) {
  std::shared_ptr<Agent> agent;
  bool clean = false;
  bool connect_failed = false;
  bool retired = false;
  {
    absl::MutexLock lock(&mu_);
    agent = agent_;
    clean = trainer_shut_down_;
    connect_failed = connect_failed_;
    retired = retired_;
    attach_sink_.reset();
    trainer_gone_ = true;  // Whatever is still reported about it, there is no process to wait for.
  }
  if (metrics_) metrics_->SetTrainerAttached(false);
  if (retired) {
    LogInfo("trainer pid ", pid, " of an earlier restart attempt detached");
    SetOutcome(TrainerOutcome::kFailed);
    return;
  }
  if (clean || agent == nullptr) {
    LogInfo("trainer pid ", pid, " detached after shutdown");
    SetOutcome(TrainerOutcome::kShutDown);
    return;
  }
  if (connect_failed) {
    LogInfo("trainer pid ", pid, " exited after its rank could not join the job");
    SetOutcome(TrainerOutcome::kFailed);
    return;
  }
  if (agent->job_failed()) {
    // Fate sharing: the trainer followed a failure elsewhere. Nothing to report: the service
    // waits for nobody after a failure, and sees this rank's connection close when the sidecar
    // exits.
    LogInfo("trainer pid ", pid, " exited after the job failed");
    SetOutcome(TrainerOutcome::kFailed);
    return;
  }
  if (!agent->connected()) {
    // Died while waiting for its peers: a process death is a job failure at any moment, so the
    // others stop waiting in initialize() now rather than at the initialization timeout.
    LogError("trainer pid ", pid, " went away before every rank joined the job; telling the job");
    agent->ReportError(FailureCause::kProcessExited,
                       "it exited during initialize(), before every process joined the job: it "
                       "crashed or was killed",
                       [this](absl::Status s) {
                         // The failure ends the registration still waiting in the service.
                         if (!s.ok())
                           LogWarning("could not report the trainer's exit: ", s.message());
                         SetOutcome(TrainerOutcome::kFailed);
                       });
    return;
  }
  FailureCause cause =
      agent->preemption_reported() ? FailureCause::kPreempted : FailureCause::kProcessExited;
  std::string message =
      cause == FailureCause::kPreempted
          ? "it exited after its preemption notice without calling shutdown()"
          : "it exited without calling shutdown(): it crashed, was killed (e.g. kill -9 or "
            "OOM), or returned early";
  LogError("trainer pid ", pid, " is gone: ", message, "; telling the job");
  agent->ReportError(cause, message, [this](absl::Status s) {
    if (!s.ok()) LogWarning("could not report the trainer's exit: ", s.message());
    SetOutcome(TrainerOutcome::kFailed);
  });
}

void AgentRpcService::OnPreemptionSignal() {
  std::shared_ptr<Agent> agent;
  {
    absl::MutexLock lock(&mu_);
    preemption_signalled_ = true;
    agent = agent_;
  }
  if (agent == nullptr) {
    // No libdist trainer has attached: the rank's program may talk to the service itself (an
    // unmodified JAX program on rank 0's JAX port). Tell the service about that process now; a
    // libdist trainer that attaches later still reports the notice once connected.
    ReportPreemptionAsObserver();
    return;
  }
  if (!agent->connected()) return;  // Reported once connected.
  agent->ReportPreemption([](absl::Status s) {
    if (!s.ok()) LogWarning("could not report the preemption notice: ", s.message());
  });
}

void AgentRpcService::ReportPreemptionAsObserver() {
  coordination::GrpcCoordinationStub stub(options_.coordinator_address, options_.token);
  pb::ReportPreemptionRequest request;
  request.set_task_id(options_.task);
  request.set_incarnation(coordination::kObserverIncarnation);
  pb::ReportPreemptionResponse response;
  absl::Notification done;
  absl::Status result;
  stub.ReportPreemption(request, &response, absl::Seconds(2), [&](absl::Status s) {
    result = s;
    done.Notify();
  });
  done.WaitForNotification();
  if (result.ok()) {
    LogInfo("preemption notice for rank ", options_.task, " reported to the coordination service");
  } else {
    LogDebug("preemption notice for rank ", options_.task, " not taken by the service yet (",
             result.message(), "); it goes with the trainer's registration");
  }
}

template <typename Call>
grpc::ServerUnaryReactor* AgentRpcService::Forward(grpc::CallbackServerContext* ctx,
                                                   const char* metric_op, Call call) {
  if (absl::Status auth = CheckToken(*ctx, options_.token); !auth.ok()) {
    return FinishUnary(ctx, auth);
  }
  absl::StatusOr<std::shared_ptr<Agent>> agent = ConnectedAgent();
  if (!agent.ok()) return FinishUnary(ctx, agent.status());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  call(**agent, [this, reactor, metric_op, agent = *agent](absl::Status s) {
    // After a job failure the service stops; a call that was still waiting then ends as
    // CANCELLED or UNAVAILABLE, which may reach the trainer before the failure event on its
    // attach stream. Aborted says what happened, and libdist waits for the event to tell it.
    if (!s.ok() && !absl::IsAborted(s) && agent->job_failed()) {
      s = absl::AbortedError(
          absl::StrCat("the job failed while this call waited (", s.message(), ")"));
    }
    if (metrics_ != nullptr && metric_op != nullptr) metrics_->CountKeyValue(metric_op, s);
    reactor->Finish(ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AgentRpcService::InsertKeyValue(grpc::CallbackServerContext* ctx,
                                                          const pb::InsertKeyValueRequest* req,
                                                          pb::InsertKeyValueResponse*) {
  return Forward(ctx, "set", [req](Agent& agent, Finish finish) {
    agent.InsertKeyValue(req->kv().key(), req->kv().value(), req->allow_overwrite(),
                         std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::GetKeyValue(grpc::CallbackServerContext* ctx,
                                                       const pb::GetKeyValueRequest* req,
                                                       pb::GetKeyValueResponse* resp) {
  return Forward(ctx, "get", [req, resp](Agent& agent, Finish finish) {
    agent.GetKeyValue(req->key(), absl::Milliseconds(req->timeout_ms()),
                      [req, resp, finish = std::move(finish)](absl::StatusOr<std::string> v) {
                        if (v.ok()) {
                          resp->mutable_kv()->set_key(req->key());
                          resp->mutable_kv()->set_value(*std::move(v));
                        }
                        finish(v.status());
                      });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::TryGetKeyValue(grpc::CallbackServerContext* ctx,
                                                          const pb::TryGetKeyValueRequest* req,
                                                          pb::TryGetKeyValueResponse* resp) {
  return Forward(ctx, "try_get", [req, resp](Agent& agent, Finish finish) {
    agent.TryGetKeyValue(req->key(),
                         [req, resp, finish = std::move(finish)](absl::StatusOr<std::string> v) {
                           if (v.ok()) {
                             resp->mutable_kv()->set_key(req->key());
                             resp->mutable_kv()->set_value(*std::move(v));
                           }
                           finish(v.status());
                         });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::GetKeyValueDir(grpc::CallbackServerContext* ctx,
                                                          const pb::GetKeyValueDirRequest* req,
                                                          pb::GetKeyValueDirResponse* resp) {
  return Forward(ctx, "dir", [req, resp](Agent& agent, Finish finish) {
    agent.GetKeyValueDir(req->directory(), [resp, finish = std::move(finish)](
                                               absl::StatusOr<coordination::KeyValueEntries> e) {
      if (e.ok()) coordination::ToProto(*std::move(e), resp->mutable_kvs());
      finish(e.status());
    });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::DeleteKeyValue(grpc::CallbackServerContext* ctx,
                                                          const pb::DeleteKeyValueRequest* req,
                                                          pb::DeleteKeyValueResponse*) {
  return Forward(ctx, "delete", [req](Agent& agent, Finish finish) {
    agent.DeleteKeyValue(req->key(), std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::IncrementKeyValue(
    grpc::CallbackServerContext* ctx, const pb::IncrementKeyValueRequest* req,
    pb::IncrementKeyValueResponse* resp) {
  return Forward(ctx, "increment", [req, resp](Agent& agent, Finish finish) {
    agent.IncrementKeyValue(req->key(), req->increment(),
                            [resp, finish = std::move(finish)](absl::StatusOr<int64_t> v) {
                              if (v.ok()) resp->set_value(*v);
                              finish(v.status());
                            });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::Barrier(grpc::CallbackServerContext* ctx,
                                                   const pb::BarrierRequest* req,
                                                   pb::BarrierResponse* /*resp*/) {
  return Forward(ctx, nullptr, [this, req](Agent& agent, Finish finish) {
    absl::Time start = absl::Now();
    agent.Barrier(req->barrier_id(), absl::Milliseconds(req->timeout_ms()),
                  {req->task_ids().begin(), req->task_ids().end()},
                  [this, start, finish = std::move(finish)](absl::Status s) {
                    if (metrics_ != nullptr) metrics_->ObserveBarrier(absl::Now() - start, s);
                    finish(s);
                  });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::CancelBarrier(grpc::CallbackServerContext* ctx,
                                                         const pb::CancelBarrierRequest* req,
                                                         pb::CancelBarrierResponse*) {
  return Forward(ctx, nullptr, [req](Agent& agent, Finish finish) {
    agent.CancelBarrier(req->barrier_id(), std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::ReportStep(grpc::CallbackServerContext* ctx,
                                                      const agentpb::ReportStepRequest* req,
                                                      agentpb::ReportStepResponse*) {
  return Forward(ctx, nullptr, [this, req](Agent& agent, Finish finish) {
    if (metrics_ != nullptr) metrics_->ObserveStep(req->step(), absl::Now());
    agent.ReportStep(req->step(), std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::ReportProgress(grpc::CallbackServerContext* ctx,
                                                          const agentpb::ReportProgressRequest* req,
                                                          agentpb::ReportProgressResponse*) {
  return Forward(ctx, nullptr, [this, req](Agent& agent, Finish finish) {
    std::vector<coordination::CollectiveProgress> progress =
        coordination::FromProto(req->progress());
    if (metrics_ != nullptr)
      metrics_->ObserveCollectives(progress, absl::Now());  // The hang detector's.
    agent.ReportProgress(std::move(progress), std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::GetJobProgress(grpc::CallbackServerContext* ctx,
                                                          const pb::GetJobProgressRequest*,
                                                          pb::GetJobProgressResponse* resp) {
  return Forward(ctx, nullptr, [resp](Agent& agent, Finish finish) {
    agent.GetJobProgress([resp, finish = std::move(finish)](
                             absl::StatusOr<std::vector<coordination::TaskProgress>> tasks) {
      if (tasks.ok()) coordination::ToProto(*tasks, resp);
      finish(tasks.status());
    });
  });
}

grpc::ServerUnaryReactor* AgentRpcService::ReportPreemption(grpc::CallbackServerContext* ctx,
                                                            const pb::ReportPreemptionRequest*,
                                                            pb::ReportPreemptionResponse*) {
  return Forward(ctx, nullptr,
                 [](Agent& agent, Finish finish) { agent.ReportPreemption(std::move(finish)); });
}

grpc::ServerUnaryReactor* AgentRpcService::ReportError(grpc::CallbackServerContext* ctx,
                                                       const pb::ReportErrorRequest* req,
                                                       pb::ReportErrorResponse*) {
  return Forward(ctx, nullptr, [req](Agent& agent, Finish finish) {
    agent.ReportError(coordination::FromProto(req->cause()), req->message(), std::move(finish));
  });
}

grpc::ServerUnaryReactor* AgentRpcService::ShutdownTask(grpc::CallbackServerContext* ctx,
                                                        const pb::ShutdownTaskRequest*,
                                                        pb::ShutdownTaskResponse*) {
  return Forward(ctx, nullptr, [this](Agent& agent, Finish finish) {
    agent.Shutdown([this, finish = std::move(finish)](absl::Status s) {
      if (s.ok()) {
        absl::MutexLock lock(&mu_);
        trainer_shut_down_ = true;
      }
      if (metrics_ != nullptr) metrics_->SetAgentConnected(false);
      finish(s);
    });
  });
}

}  // namespace cohort::sidecar
