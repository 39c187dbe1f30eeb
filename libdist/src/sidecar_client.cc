#include "libdist/src/sidecar_client.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/log.h"
#include "coordination/wire/proto_convert.h"
#include "libdist/src/hang_dump.h"

namespace dist::internal {

namespace pb = ::cohort::coordination::v1;
using cohort::coordination::kShortCallTimeout;
using cohort::coordination::kWaitingCallSlack;
using Async = agentpb::Agent::StubInterface::async_interface;

SidecarClient::SidecarClient(std::string socket_path, std::string token)
    : socket_path_(std::move(socket_path)), token_(std::move(token)) {
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path_),
                                       grpc::InsecureChannelCredentials(),
                                       cohort::DefaultChannelArguments());
  stub_ = agentpb::Agent::NewStub(channel_);
}

SidecarClient::~SidecarClient() {
  Detach();
  calls_.CancelAll();
  calls_.AwaitEmpty();
}

void SidecarClient::Detach() {
  {
    absl::MutexLock lock(&mu_);
    detaching_ = true;
    if (attach_context_ != nullptr) attach_context_->TryCancel();
  }
  if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
}

absl::Status SidecarClient::Attach(int process_id, int num_processes,
                                   std::optional<int> restart_attempt, absl::Duration timeout,
                                   EventCallback on_event) {
  auto first = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> first_result = first->get_future();
  reader_ = std::thread([this, process_id, num_processes, restart_attempt, timeout, on_event,
                         first] {
    pthread_setname_np(pthread_self(), "dist-events");
    grpc::ClientContext ctx;
    cohort::AddToken(&ctx, token_);
    // The sidecar may still be starting: wait for its socket until the timeout.
    ctx.set_wait_for_ready(true);
    {
      absl::MutexLock lock(&mu_);
      if (detaching_) {
        first->set_value(absl::CancelledError("detached"));
        return;
      }
      attach_context_ = &ctx;
    }
    agentpb::AttachRequest req;
    req.set_process_id(process_id);
    req.set_num_processes(num_processes);
    req.set_pid(getpid());
    req.set_initialization_timeout_ms(absl::ToInt64Milliseconds(timeout));
    if (restart_attempt) req.set_restart_attempt(*restart_attempt);
    std::unique_ptr<grpc::ClientReader<agentpb::AgentEvent>> reader = stub_->Attach(&ctx, req);
    // The first event (Connected) must arrive within the timeout; a watchdog cancels the call
    // otherwise, since the stream itself has no deadline for the life of the process.
    std::promise<void> connected;
    std::thread watchdog([&ctx, timeout, fut = connected.get_future()]() mutable {
      pthread_setname_np(pthread_self(), "dist-attach-wd");
      // An infinite timeout waits as long as it takes (now + seconds::max() would overflow).
      if (timeout == absl::InfiniteDuration()) {
        fut.wait();
      } else if (fut.wait_for(absl::ToChronoSeconds(timeout + absl::Seconds(5))) ==
                 std::future_status::timeout) {
        ctx.TryCancel();
      }
    });
    agentpb::AgentEvent event;
    bool got_first = false;
    // Writes the evidence the job's hang detector asked for, off this thread (job events keep
    // arriving meanwhile); one at a time: an order that comes while a dump runs is dropped (the
    // sidecar then says this process wrote none for it).
    std::thread dumper;
    auto dumping = std::make_shared<std::atomic<bool>>(false);
    while (reader->Read(&event)) {
      if (!got_first) {
        got_first = true;
        connected.set_value();
        if (!event.has_connected()) {
          first->set_value(absl::InternalError("the sidecar's first event was not 'connected'"));
          break;
        }
        first->set_value(absl::OkStatus());
        continue;
      }
      if (event.has_job_event()) on_event(cohort::coordination::FromProto(event.job_event()));
      if (event.has_dump() && dumping->load()) {
        cohort::LogWarning("hang ", event.dump().id(),
                           ": the last order's dump still runs; this one is dropped");
      } else if (event.has_dump()) {
        if (dumper.joinable()) dumper.join();  // Done already.
        dumping->store(true);
        dumper = std::thread([dump = event.dump(), dumping] {
          pthread_setname_np(pthread_self(), "dist-hang-dump");
          if (absl::Status s = WriteHangDump(dump.id(), dump.directory()); !s.ok()) {
            cohort::LogWarning(s.message());
          }
          dumping->store(false);
        });
      }
    }
    if (dumper.joinable()) dumper.join();
    if (!got_first) connected.set_value();
    watchdog.join();
    grpc::Status status = reader->Finish();
    bool detaching;
    {
      absl::MutexLock lock(&mu_);
      attach_context_ = nullptr;
      detaching = detaching_;
    }
    if (!got_first) {
      absl::Status s = cohort::FromGrpcStatus(status);
      if (s.code() == absl::StatusCode::kDeadlineExceeded) {
        // The sidecar's own verdict (e.g. which processes never registered): keep it.
        s = absl::DeadlineExceededError(
            absl::StrCat("the cohort-sidecar at ", socket_path_, ": ", s.message()));
      } else if (s.code() == absl::StatusCode::kCancelled) {
        // The watchdog above gave up waiting for the first event.
        s = absl::DeadlineExceededError(absl::StrCat(
            "the cohort-sidecar at ", socket_path_, " did not report the job connected within ",
            absl::FormatDuration(timeout),
            ": the sidecar is not running (check COHORT_AGENT_SOCKET and the sidecar container), "
            "or other processes never joined (see the rank-0 sidecar's log)"));
      } else if (s.code() == absl::StatusCode::kUnavailable) {
        s = absl::UnavailableError(
            absl::StrCat("cannot reach the cohort-sidecar at ", socket_path_, ": ", s.message()));
      }
      first->set_value(s);
      return;
    }
    if (!detaching) {
      on_event(cohort::coordination::TaskFailure{
          -1, FailureCause::kServiceUnreachable,
          absl::StrCat("lost this process's cohort-sidecar (", socket_path_, "): ",
                       status.error_message().empty() ? "stream closed" : status.error_message(),
                       "; the sidecar died or was killed")});
    }
  });
  return first_result.get();
}

template <typename Req, typename Resp>
void SidecarClient::Call(void (Async::*method)(grpc::ClientContext*, const Req*, Resp*,
                                               std::function<void(grpc::Status)>),
                         Req request, absl::Duration timeout,
                         std::function<void(absl::Status, Resp)> done) {
  // No wait_for_ready: the sidecar is up since Attach; if it died, fail now.
  cohort::UnaryCall(stub_->async(), method, std::move(request),
                    cohort::UnaryCallOptions{token_, timeout, false, &calls_}, std::move(done));
}

void SidecarClient::InsertKeyValue(std::string key, std::string value, bool allow_overwrite,
                                   DoneCallback done) {
  pb::InsertKeyValueRequest req;
  req.mutable_kv()->set_key(std::move(key));
  req.mutable_kv()->set_value(std::move(value));
  req.set_allow_overwrite(allow_overwrite);
  Call<pb::InsertKeyValueRequest, pb::InsertKeyValueResponse>(
      &Async::InsertKeyValue, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::InsertKeyValueResponse) { done(s); });
}

void SidecarClient::GetKeyValue(std::string key, absl::Duration timeout, ValueCallback done) {
  pb::GetKeyValueRequest req;
  req.set_key(std::move(key));
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  Call<pb::GetKeyValueRequest, pb::GetKeyValueResponse>(
      &Async::GetKeyValue, std::move(req), timeout + kWaitingCallSlack,
      [done = std::move(done)](absl::Status s, pb::GetKeyValueResponse r) {
        if (!s.ok()) return done(std::move(s));
        done(std::move(*r.mutable_kv()->mutable_value()));
      });
}

void SidecarClient::TryGetKeyValue(std::string key, ValueCallback done) {
  pb::TryGetKeyValueRequest req;
  req.set_key(std::move(key));
  Call<pb::TryGetKeyValueRequest, pb::TryGetKeyValueResponse>(
      &Async::TryGetKeyValue, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::TryGetKeyValueResponse r) {
        if (!s.ok()) return done(std::move(s));
        done(std::move(*r.mutable_kv()->mutable_value()));
      });
}

void SidecarClient::GetKeyValueDir(std::string directory, EntriesCallback done) {
  pb::GetKeyValueDirRequest req;
  req.set_directory(std::move(directory));
  Call<pb::GetKeyValueDirRequest, pb::GetKeyValueDirResponse>(
      &Async::GetKeyValueDir, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::GetKeyValueDirResponse r) {
        if (!s.ok()) return done(std::move(s));
        done(cohort::coordination::FromProto(r.kvs()));
      });
}

void SidecarClient::DeleteKeyValue(std::string key, DoneCallback done) {
  pb::DeleteKeyValueRequest req;
  req.set_key(std::move(key));
  Call<pb::DeleteKeyValueRequest, pb::DeleteKeyValueResponse>(
      &Async::DeleteKeyValue, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::DeleteKeyValueResponse) { done(s); });
}

void SidecarClient::IncrementKeyValue(std::string key, int64_t increment, IntCallback done) {
  pb::IncrementKeyValueRequest req;
  req.set_key(std::move(key));
  req.set_increment(increment);
  Call<pb::IncrementKeyValueRequest, pb::IncrementKeyValueResponse>(
      &Async::IncrementKeyValue, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::IncrementKeyValueResponse r) {
        if (!s.ok()) return done(std::move(s));
        done(r.value());
      });
}

void SidecarClient::Barrier(std::string id, absl::Duration timeout,
                            std::vector<TaskId> participants, DoneCallback done) {
  pb::BarrierRequest req;
  req.set_barrier_id(std::move(id));
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  for (TaskId t : participants) req.add_task_ids(t);
  Call<pb::BarrierRequest, pb::BarrierResponse>(
      &Async::Barrier, std::move(req), timeout + kWaitingCallSlack,
      [done = std::move(done)](absl::Status s, pb::BarrierResponse) { done(s); });
}

void SidecarClient::CancelBarrier(std::string id, DoneCallback done) {
  pb::CancelBarrierRequest req;
  req.set_barrier_id(std::move(id));
  Call<pb::CancelBarrierRequest, pb::CancelBarrierResponse>(
      &Async::CancelBarrier, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::CancelBarrierResponse) { done(s); });
}

void SidecarClient::ReportPreemption(DoneCallback done) {
  Call<pb::ReportPreemptionRequest, pb::ReportPreemptionResponse>(
      &Async::ReportPreemption, pb::ReportPreemptionRequest(), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::ReportPreemptionResponse) { done(s); });
}

void SidecarClient::ReportError(FailureCause cause, std::string message, DoneCallback done) {
  pb::ReportErrorRequest req;
  req.set_cause(cohort::coordination::ToProto(cause));
  req.set_message(std::move(message));
  Call<pb::ReportErrorRequest, pb::ReportErrorResponse>(
      &Async::ReportError, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::ReportErrorResponse) { done(s); });
}

void SidecarClient::ReportProgress(std::vector<cohort::coordination::CollectiveProgress> progress,
                                   DoneCallback done) {
  agentpb::ReportProgressRequest req;
  cohort::coordination::ToProto(progress, req.mutable_progress());
  Call<agentpb::ReportProgressRequest, agentpb::ReportProgressResponse>(
      &Async::ReportProgress, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, agentpb::ReportProgressResponse) { done(s); });
}

void SidecarClient::ReportStep(int64_t step, DoneCallback done) {
  agentpb::ReportStepRequest req;
  req.set_step(step);
  Call<agentpb::ReportStepRequest, agentpb::ReportStepResponse>(
      &Async::ReportStep, std::move(req), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, agentpb::ReportStepResponse) { done(s); });
}

void SidecarClient::GetJobProgress(ProgressCallback done) {
  Call<pb::GetJobProgressRequest, pb::GetJobProgressResponse>(
      &Async::GetJobProgress, pb::GetJobProgressRequest(), kShortCallTimeout,
      [done = std::move(done)](absl::Status s, pb::GetJobProgressResponse resp) {
        if (!s.ok()) {
          done(s);
        } else {
          done(cohort::coordination::FromProto(resp));
        }
      });
}

void SidecarClient::Shutdown(DoneCallback done) {
  // Bounded by the sidecar's shutdown timeout; this is a backstop.
  Call<pb::ShutdownTaskRequest, pb::ShutdownTaskResponse>(
      &Async::ShutdownTask, pb::ShutdownTaskRequest(), absl::Hours(1),
      [done = std::move(done)](absl::Status s, pb::ShutdownTaskResponse) { done(s); });
}

}  // namespace dist::internal
