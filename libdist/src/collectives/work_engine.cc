// The communicator's work engine (CommunicatorImpl's members, communicator_impl.h): a call from
// Submit to its end, the worker thread that runs the host calls, and Finish. Kept apart from the
// communicator's set-up and its NCCL polling and failure handling (communicator.cc), as PyTorch
// c10d keeps WorkNCCL apart from ProcessGroupNCCL.

#include <pthread.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "libdist/src/collectives/communicator_impl.h"
#include "libdist/src/collectives/flight_recorder.h"
#include "libdist/src/collectives/nccl_backend.h"
#include "libdist/src/collectives/nccl_watch.h"

namespace dist {
namespace internal {

absl::StatusOr<std::shared_ptr<WorkState>> CommunicatorImpl::Submit(
    CollectiveKind kind, const void* send, void* recv, size_t count, DataType type, ReduceOp op,
    int root, const CallOptions& options, bool run_here) {
  if (absl::Status s = Validate(kind, send, recv, count, root); !s.ok()) return s;
  auto work = std::make_shared<WorkState>();
  CollectiveCall& call = work->call;
  call.sig.kind = kind;
  call.sig.type = type;
  call.sig.op = op;
  call.sig.root = kind == CollectiveKind::kBroadcast ? root : -1;
  call.sig.count = kind == CollectiveKind::kBarrier ? 0 : count;
  call.send = send;
  call.recv = recv;
  call.cuda_stream = options.cuda_stream;
  work->on_nccl = UseNccl(send, recv);
  if (work->on_nccl) {
    if (absl::Status s = nccl_->CheckNotCapturing(call.cuda_stream); !s.ok()) return s;
    work->anchor = anchor_;
  }
  {
    absl::MutexLock lock(&mu_);
    // A broken communicator refuses new calls with its first failure (an abort too, once a
    // call saw it).
    if (!broken_.ok() || (work->on_nccl && nccl_failed_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("communicator '", name_, "' cannot be used after an earlier failure: ",
                       broken_.ok() ? nccl_failure_message_ : std::string(broken_.message())));
    }
    call.sig.seq = next_seq_++;
    // One clock read per call (absl::Now() costs ~100 ns on some VMs: a tenth of a small op).
    work->enqueued = absl::Now();
    call.deadline = work->enqueued + options.timeout.value_or(options_.timeout);
    {
      absl::MutexLock plock(&progress_->mu);
      progress_->last_started = call.sig.seq;
      progress_->in_flight.emplace(call.sig.seq,
                                   CollectiveProgress::InFlight{call.sig, work->enqueued});
    }
    work->recorder_entry = FlightRecorder::Get().Start(name_, call.sig, work->enqueued);
    in_flight_.push_back(work);
    if (!work->on_nccl) {
      if (!run_here) {
        host_queue_.push_back(work);
        StartWorkerLocked();
      }
      return work;
    }
  }
  absl::StatusOr<CudaEvent> event = nccl_->Enqueue(call);
  if (!event.ok()) {
    if (absl::IsInvalidArgument(event.status())) {  // The caller's mistake: nothing broke.
      Finish(*work, event.status());
      return event.status();
    }
    // The communicator failed (here or before): the worker explains it and ends every call in
    // flight, this one included, whose status is this call's answer.
    {
      absl::MutexLock lock(&mu_);
      NcclFailedLocked(event.status(), call.sig, work->enqueued);
    }
    absl::MutexLock lock(&work->mu);
    work->mu.Await(absl::Condition(&work->done));
    return work->status;
  }
  bool ended;
  {
    absl::MutexLock lock(&work->mu);
    ended = work->done;  // Already ended by a failure handled meanwhile.
    if (!ended) work->event = *event;
  }
  if (ended) {
    nccl_->ReleaseEvent(*event);
  } else {
    NcclWatch::Get().Watch(anchor_);
  }
  return work;
}

absl::Status CommunicatorImpl::Run(CollectiveKind kind, const void* send, void* recv, size_t count,
                                   DataType type, ReduceOp op, int root,
                                   const CallOptions& options) {
  // The host's fast path: nothing queued, so this call runs here, in order.
  if (!UseNccl(send, recv)) {
    bool here = false;
    {
      absl::MutexLock lock(&mu_);
      if (host_queue_.empty() && !host_busy_) here = host_busy_ = true;
    }
    if (here) {
      absl::StatusOr<std::shared_ptr<WorkState>> work =
          Submit(kind, send, recv, count, type, op, root, options, /*run_here=*/true);
      if (work.ok()) RunHostCall(**work);
      {
        absl::MutexLock lock(&mu_);
        host_busy_ = false;
      }
      if (!work.ok()) return work.status();
      absl::MutexLock lock(&(*work)->mu);
      return (*work)->status;
    }
  }
  absl::StatusOr<std::shared_ptr<WorkState>> work =
      Submit(kind, send, recv, count, type, op, root, options);
  if (!work.ok()) return work.status();
  return WorkAccess::Wrap(std::move(*work)).Wait();
}

void CommunicatorImpl::RunHostCall(WorkState& work) {
  absl::Status refusal;
  {
    absl::ReaderMutexLock lock(&mu_);
    refusal = Refusal(work.call.sig);
  }
  if (!refusal.ok()) {
    Finish(work, refusal);
    return;
  }
  absl::Status s = host_->Run(work.call);
  if (!s.ok() && !absl::IsInvalidArgument(s))
    s = Fail(work.call.sig, s, absl::Now() - work.enqueued);
  Finish(work, s);
}

void CommunicatorImpl::Finish(WorkState& work, absl::Status status) {
  CudaEvent event;
  {
    absl::MutexLock lock(&work.mu);
    if (work.done) return;
    work.done = true;
    work.status = status;
    event = work.event;
  }
  if (status.ok()) {
    FlightRecorder::Get().End(work.recorder_entry);
  } else {
    FlightRecorder::Get().End(work.recorder_entry, std::string(status.message()), absl::Now());
  }
  {
    absl::MutexLock lock(&progress_->mu);
    progress_->in_flight.erase(work.call.sig.seq);
    if (status.ok()) {
      progress_->last_completed = progress_->in_flight.empty()
                                      ? progress_->last_started
                                      : progress_->in_flight.begin()->first - 1;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                           [&](const std::shared_ptr<WorkState>& w) { return w.get() == &work; });
    if (it != in_flight_.end()) in_flight_.erase(it);
  }
  if (event != nullptr && nccl_) nccl_->ReleaseEvent(event);
}

void CommunicatorImpl::StartWorkerLocked() {
  if (worker_.joinable() || stopping_) return;
  worker_ = std::thread([this] { WorkerLoop(); });
}

void CommunicatorImpl::WorkerLoop() {
  pthread_setname_np(pthread_self(), "dist-coll-work");
  while (true) {
    std::shared_ptr<WorkState> work;
    std::optional<absl::Status> failure;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || nccl_failure_.has_value() || (!host_busy_ && !host_queue_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (nccl_failure_) {
        failure = std::move(*nccl_failure_);
        nccl_failure_.reset();
      } else if (stopping_) {
        return;
      } else {
        work = std::move(host_queue_.front());
        host_queue_.pop_front();
        host_busy_ = true;
      }
    }
    if (failure) {
      HandleNcclFailure(std::move(*failure));
      continue;
    }
    RunHostCall(*work);
    absl::MutexLock lock(&mu_);
    host_busy_ = false;
  }
}

}  // namespace internal
}  // namespace dist
