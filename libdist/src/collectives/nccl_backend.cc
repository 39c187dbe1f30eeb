#include "libdist/src/collectives/nccl_backend.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/log.h"

namespace dist::internal {

NcclBackend::NcclBackend(const NcclApi* api, int rank, int size, RankNames names, int device)
    : api_(api), rank_(rank), size_(size), names_(std::move(names)), device_(device) {}

int NcclBackend::DefaultDevice(const NcclApi* api, int local_process_index) {
  int count = 0;
  if (api->GetDeviceCount(&count) != kCudaSuccess || count < 1) return 0;
  return std::max(local_process_index, 0) % count;
}

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(const NcclApi* api, int rank,
                                                                 RankNames names, int device,
                                                                 Store store, absl::Time deadline) {
  const int size = static_cast<int>(names.processes.size());
  if (device < 0) api->GetDevice(&device);
  if (CudaError e = api->SetDevice(device); e != kCudaSuccess) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot use CUDA device ", device, ": ", api->CudaGetErrorString(e)));
  }
  std::unique_ptr<NcclBackend> b(new NcclBackend(api, rank, size, names, device));
  if (CudaError e = api->StreamCreate(&b->stream_); e != kCudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cannot create a CUDA stream: ", api->CudaGetErrorString(e)));
  }
  if (CudaError e = api->Malloc(&b->barrier_buffer_, sizeof(float)); e != kCudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cannot allocate device memory: ", api->CudaGetErrorString(e)));
  }
  NcclUniqueId id{};
  if (rank == 0) {
    if (NcclResult r = api->GetUniqueId(&id); r != kNcclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclGetUniqueId failed: ", b->NcclError(r)));
    }
    if (absl::Status s = store.Set("nccl/id", std::string(id.internal, sizeof(id.internal)));
        !s.ok()) {
      return s;
    }
  } else {
    absl::StatusOr<std::string> fetched = store.Get("nccl/id", deadline);
    if (!fetched.ok()) return fetched.status();
    std::memcpy(id.internal, fetched->data(), std::min(fetched->size(), sizeof(id.internal)));
  }
  // Best effort: a rank whose mark is missing is only named among the missing ones later.
  store.Set(absl::StrCat("nccl/joined/", rank), "1").IgnoreError();
  NcclComm comm = nullptr;
  const NcclResult r = api->CommInitRankNonBlocking(&comm, size, id, rank);
  b->comm_ = comm;
  if (r != kNcclSuccess && r != kNcclInProgress) {
    b->failed_ = true;
    return absl::UnavailableError(
        absl::StrCat("ncclCommInitRankConfig failed on ", names.Name(rank), ": ", b->NcclError(r)));
  }
  absl::Status init = b->Poll([] { return true; }, "NCCL communicator init", deadline);
  if (absl::IsDeadlineExceeded(init)) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.TryGet(absl::StrCat("nccl/joined/", r)).ok()) missing.push_back(r);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "NCCL communicator init did not complete in time: ",
        missing.empty() ? "every rank joined, but NCCL did not finish connecting (check "
                          "NCCL_SOCKET_IFNAME and that hosts reach each other)"
                        : absl::StrCat(names.List(missing), " never joined")));
  }
  if (!init.ok()) return init;
  return b;
}

NcclBackend::~NcclBackend() {
  if (comm_ != nullptr) {
    bool released;
    {
      absl::MutexLock lock(&comm_mu_);
      released = comm_released_;
    }
    if (!released && !failed_.load() && !aborted_.load()) {
      // The clean, collective shutdown: finalize (flushes), then destroy.
      NcclResult r = api_->CommFinalize(comm_);
      absl::Status s =
          r == kNcclSuccess || r == kNcclInProgress
              ? Poll([] { return true; }, "NCCL communicator finalize", absl::Now() + kAbortBound)
              : absl::InternalError(NcclError(r));
      if (s.ok()) {
        absl::MutexLock lock(&comm_mu_);
        comm_released_ = true;
        api_->CommDestroy(comm_);
      } else {
        cohort::LogWarning("NCCL finalize failed (", s.message(), "); aborting the communicator");
      }
    }
    AbortComm();
  }
  {
    absl::MutexLock lock(&events_mu_);
    for (CudaEvent e : all_events_) api_->EventDestroy(e);
  }
  if (barrier_buffer_) api_->Free(barrier_buffer_);
  if (stream_) api_->StreamDestroy(stream_);
}

std::string NcclBackend::Describe() const {
  return absl::StrCat(api_->Describe(), " on CUDA device ", device_);
}

std::string NcclBackend::NcclError(NcclResult result) const {
  absl::ReaderMutexLock lock(&comm_mu_);
  return NcclErrorLocked(result);
}

std::string NcclBackend::NcclErrorLocked(NcclResult result) const {
  std::string s = api_->GetErrorString ? api_->GetErrorString(result) : "unknown error";
  if (comm_ && !comm_released_ && api_->GetLastError) {
    const char* last = api_->GetLastError(comm_);
    if (last && *last) absl::StrAppend(&s, ": ", last);
  }
  return s;
}

NcclResult NcclBackend::AsyncError() const {
  absl::ReaderMutexLock lock(&comm_mu_);
  if (comm_released_) return kNcclInternalError;
  NcclResult async = kNcclSuccess;
  api_->CommGetAsyncError(comm_, &async);
  return async;
}

void NcclBackend::Abort() { aborted_.store(true); }

void NcclBackend::AbortComm() {
  {
    absl::MutexLock lock(&comm_mu_);  // Waits for every use of comm_ in progress.
    if (comm_released_ || comm_ == nullptr) return;
    comm_released_ = true;
  }
  auto done = std::make_shared<absl::Notification>();
  const NcclApi* api = api_;
  NcclComm comm = comm_;
  std::thread([api, comm, done] {
    api->CommAbort(comm);
    done->Notify();
  }).detach();
  if (!done->WaitForNotificationWithTimeout(kAbortBound)) {
    cohort::LogWarning("ncclCommAbort did not return within ", absl::FormatDuration(kAbortBound),
                       "; leaving it behind");
  }
}

absl::Status NcclBackend::Poll(const std::function<bool()>& done, const std::string& what,
                               absl::Time deadline) {
  while (true) {
    if (aborted_.load()) {
      AbortComm();
      return absl::AbortedError("the communicator was aborted");
    }
    const NcclResult async = AsyncError();
    if (async != kNcclSuccess && async != kNcclInProgress) {
      failed_ = true;
      const std::string error = NcclError(async);
      AbortComm();
      return absl::InternalError(
          absl::StrCat(what, " failed on ", names_.Name(rank_), ": ", error));
    }
    if (async == kNcclSuccess && done()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      failed_ = true;
      AbortComm();
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete in time on ", names_.Name(rank_)));
    }
    absl::SleepFor(kPollInterval);
  }
}

bool NcclBackend::IsDevicePointer(const NcclApi* api, const void* pointer) {
  CudaPointerAttributes attributes{};
  return pointer != nullptr && api->PointerGetAttributes(&attributes, pointer) == kCudaSuccess &&
         (attributes.type == 2 || attributes.type == 3);
}

absl::StatusOr<CudaEvent> NcclBackend::Enqueue(const CollectiveCall& call) {
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  if (failed_.load()) return absl::FailedPreconditionError("the NCCL communicator failed before");
  const OpSignature& sig = call.sig;
  // Checked here, not left to NCCL: NCCL 2.28 records an invalid argument as the communicator's
  // error (seen on an H100), after which every call fails, while a bad root is the caller's
  // mistake and the communicator must stay usable.
  if (sig.kind == CollectiveKind::kBroadcast && (sig.root < 0 || sig.root >= size_)) {
    return absl::InvalidArgumentError(absl::StrCat(sig.ToString(), ": root ", sig.root,
                                                   " is not a rank of this communicator (0..",
                                                   size_ - 1, ")"));
  }
  api_->SetDevice(device_);
  CudaStream stream = call.cuda_stream ? call.cuda_stream : stream_;
  const int type = NcclDataType(sig.type);
  const int op = NcclReduceOp(sig.op);
  NcclResult r = kNcclSuccess;
  std::string error;
  {
    absl::ReaderMutexLock comm_lock(&comm_mu_);
    if (comm_released_) return absl::FailedPreconditionError("the NCCL communicator failed before");
    switch (sig.kind) {
      case CollectiveKind::kAllReduce:
        r = api_->AllReduce(call.send, call.recv, sig.count, type, op, comm_, stream);
        break;
      case CollectiveKind::kAllGather:
        r = api_->AllGather(call.send, call.recv, sig.count, type, comm_, stream);
        break;
      case CollectiveKind::kReduceScatter:
        r = api_->ReduceScatter(call.send, call.recv, sig.count, type, op, comm_, stream);
        break;
      case CollectiveKind::kBroadcast:
        r = api_->Broadcast(call.send, call.recv, sig.count, type, sig.root, comm_, stream);
        break;
      case CollectiveKind::kAllToAll: {
        const size_t block = sig.count * DataTypeSize(sig.type);
        r = api_->GroupStart();
        for (int p = 0; p < size_ && (r == kNcclSuccess || r == kNcclInProgress); ++p) {
          r = api_->Send(static_cast<const uint8_t*>(call.send) + p * block, sig.count, type, p,
                         comm_, stream);
          if (r == kNcclSuccess || r == kNcclInProgress) {
            r = api_->Recv(static_cast<uint8_t*>(call.recv) + p * block, sig.count, type, p, comm_,
                           stream);
          }
        }
        const NcclResult end = api_->GroupEnd();
        if (r == kNcclSuccess || r == kNcclInProgress) r = end;
        break;
      }
      case CollectiveKind::kBarrier:
        r = api_->AllReduce(barrier_buffer_, barrier_buffer_, 1, NcclDataType(DataType::kFloat32),
                            NcclReduceOp(ReduceOp::kSum), comm_, stream);
        break;
    }
    if (r != kNcclSuccess && r != kNcclInProgress) error = NcclErrorLocked(r);
  }
  if (r == kNcclInvalidArgument || r == kNcclInvalidUsage) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rejected ", sig.ToString(), ": ", error));
  }
  if (r != kNcclSuccess && r != kNcclInProgress) {
    failed_ = true;
    AbortComm();
    return absl::InternalError(absl::StrCat(sig.ToString(), " failed: ", error));
  }
  if (r == kNcclInProgress) {
    // A nonblocking communicator may still be launching the call (GroupEnd especially): the
    // event must come after the kernels, so wait until NCCL has left "in progress".
    if (absl::Status launched = Poll([] { return true; }, sig.ToString(), call.deadline);
        !launched.ok()) {
      return launched;
    }
  }
  CudaEvent event = nullptr;
  {
    absl::MutexLock lock(&events_mu_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == nullptr) {
    if (CudaError e = api_->EventCreate(&event); e != kCudaSuccess) {
      failed_ = true;
      AbortComm();
      return absl::InternalError(
          absl::StrCat("cannot create a CUDA event: ", api_->CudaGetErrorString(e)));
    }
    absl::MutexLock lock(&events_mu_);
    all_events_.push_back(event);
  }
  if (CudaError e = api_->EventRecord(event, stream); e != kCudaSuccess) {
    ReleaseEvent(event);
    failed_ = true;
    AbortComm();
    return absl::InternalError(
        absl::StrCat(sig.ToString(), ": cudaEventRecord failed: ", api_->CudaGetErrorString(e)));
  }
  return event;
}

absl::Status NcclBackend::Run(const CollectiveCall& call) {
  if (absl::Status s = CheckNotCapturing(call.cuda_stream); !s.ok()) return s;
  absl::StatusOr<CudaEvent> event = Enqueue(call);
  if (!event.ok()) return event.status();
  absl::Status query_error;
  absl::Status s = Poll(
      [&] {
        absl::StatusOr<bool> done = Query(*event);
        if (done.ok()) return *done;
        query_error = done.status();
        return true;
      },
      call.sig.ToString(), call.deadline);
  ReleaseEvent(*event);
  if (s.ok() && !query_error.ok()) {
    failed_ = true;
    return absl::InternalError(absl::StrCat(call.sig.ToString(), ": ", query_error.message()));
  }
  return s;
}

absl::Status NcclBackend::CheckNotCapturing(CudaStream stream) const {
  int capture = kCudaStreamCaptureStatusNone;
  const CudaError e = api_->StreamIsCapturing(stream ? stream : stream_, &capture);
  if (e == kCudaSuccess && capture == kCudaStreamCaptureStatusNone) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the stream is being captured into a CUDA graph, and capturing Cohort's collectives is "
      "not supported yet",
      e == kCudaSuccess
          ? ""
          : absl::StrCat(" (cudaStreamIsCapturing: ", api_->CudaGetErrorString(e), ")"),
      "; run the collective outside the capture"));
}

absl::StatusOr<bool> NcclBackend::Query(CudaEvent event) {
  const CudaError e = api_->EventQuery(event);
  if (e == kCudaSuccess) return true;
  if (e == kCudaErrorNotReady) return false;
  failed_ = true;
  return absl::InternalError(absl::StrCat("CUDA error ", api_->CudaGetErrorString(e)));
}

absl::Status NcclBackend::Health() {
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  if (failed_.load()) {
    return absl::InternalError(
        absl::StrCat("the NCCL communicator failed on ", names_.Name(rank_)));
  }
  const NcclResult async = AsyncError();
  if (async == kNcclSuccess || async == kNcclInProgress) return absl::OkStatus();
  failed_ = true;
  const std::string error = NcclError(async);
  return absl::InternalError(absl::StrCat("NCCL failed on ", names_.Name(rank_), ": ", error));
}

absl::Status NcclBackend::StreamWait(CudaStream stream, CudaEvent event) {
  if (CudaError e = api_->StreamWaitEvent(stream, event); e != kCudaSuccess) {
    return absl::InternalError(
        absl::StrCat("cudaStreamWaitEvent failed: ", api_->CudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

void NcclBackend::ReleaseEvent(CudaEvent event) {
  absl::MutexLock lock(&events_mu_);
  free_events_.push_back(event);
}

void NcclBackend::PrepareWatchThread() {
  api_->SetDevice(device_);
  int mode = kCudaStreamCaptureModeRelaxed;  // A thread-local setting: cheap to repeat.
  api_->ThreadExchangeStreamCaptureMode(&mode);
}

void NcclBackend::FailAndAbort() {
  failed_ = true;
  AbortComm();
}

}  // namespace dist::internal
