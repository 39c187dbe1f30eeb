#pragma once

// A fake NCCL and CUDA runtime function table (nccl_api.h) for the NCCL backend's and the
// communicator's tests on a CPU. Nothing runs: each call records what it was asked, and the test
// decides when the "device" finishes: every event at once (stream_done), one event at a time
// (CompleteEvent), or never; NCCL's asynchronous error can be raised on the n-th event query, so
// a test knows the error came while a call was in flight.

#include <atomic>
#include <cstring>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "libdist/src/collectives/nccl_api.h"

namespace dist::internal::testing {

// What the fake does; one per test, installed with FakeNccl::Install().
struct FakeNccl {
  bool init_completes = true;
  NcclResult init_error = kNcclSuccess;  // Reported by the async error once init "finishes".
  std::atomic<NcclResult> async_error{kNcclSuccess};
  // Every event recorded so far counts as done while this is true.
  std::atomic<bool> stream_done{true};
  // The stream is being captured into a CUDA graph.
  std::atomic<bool> capturing{false};
  // On the n-th EventQuery (1-based; 0: never), async_error becomes raise_error.
  std::atomic<int> raise_on_query{0};
  NcclResult raise_error = kNcclRemoteError;
  std::atomic<int> aborts{0}, finalizes{0}, destroys{0};
  absl::Notification aborted;  // At the first ncclCommAbort.
  std::atomic<int> event_queries{0}, stream_waits{0}, stream_queries{0};
  absl::Notification relaxed_capture_mode;  // A thread set the relaxed capture mode.
  std::atomic<int> collectives{0};          // Collective calls enqueued.
  // Collective calls return ncclInProgress and leave the async error in progress until the
  // test sets it (a nonblocking communicator still launching); an event recorded meanwhile
  // would come before the kernels.
  std::atomic<bool> launch_in_progress{false};
  absl::Notification launched;  // At the first collective call.
  std::atomic<bool> event_recorded_while_launching{false};
  NcclUniqueId issued{};
  int last_type = -1, last_op = -1, last_root = -1;
  size_t last_count = 0;
  std::string last_call;
  void* last_stream = nullptr;
  int sends = 0, recvs = 0;

  absl::Mutex mu;
  int next_event ABSL_GUARDED_BY(mu) = 1;
  std::map<intptr_t, bool> events ABSL_GUARDED_BY(mu);  // Recorded: done or not.
  int events_created ABSL_GUARDED_BY(mu) = 0;
  int events_destroyed ABSL_GUARDED_BY(mu) = 0;

  // The k-th event recorded (1-based) finishes.
  void CompleteEvent(intptr_t k) {
    absl::MutexLock lock(&mu);
    events[k] = true;
  }

  static FakeNccl*& Current() {
    static FakeNccl* current = nullptr;
    return current;
  }
  NcclApi Api();
};

inline int fake_comm_storage;

// Which recording each event handle stands for now (under FakeNccl::mu).
inline std::map<CudaEvent, intptr_t>& Recording() {
  static auto* recording = new std::map<CudaEvent, intptr_t>();
  return *recording;
}

inline NcclApi FakeNccl::Api() {
  Current() = this;
  NcclApi api{};
  api.version = 22809;
  api.GetVersion = [](int* v) {
    *v = 22809;
    return kNcclSuccess;
  };
  api.GetUniqueId = [](NcclUniqueId* id) {
    std::memset(id->internal, 0x5a, sizeof(id->internal));
    Current()->issued = *id;
    return kNcclSuccess;
  };
  api.CommInitRankNonBlocking = [](NcclComm* comm, int, NcclUniqueId, int) {
    FakeNccl* f = Current();
    *comm = reinterpret_cast<NcclComm>(&fake_comm_storage);
    f->async_error = f->init_completes ? f->init_error : kNcclInProgress;
    return kNcclInProgress;
  };
  api.CommGetAsyncError = [](NcclComm, NcclResult* e) {
    *e = Current()->async_error.load();
    return kNcclSuccess;
  };
  api.CommFinalize = [](NcclComm) {
    ++Current()->finalizes;
    return kNcclSuccess;
  };
  api.CommDestroy = [](NcclComm) {
    ++Current()->destroys;
    return kNcclSuccess;
  };
  api.CommAbort = [](NcclComm) {
    FakeNccl* f = Current();
    if (++f->aborts == 1) f->aborted.Notify();
    return kNcclSuccess;
  };
  api.GetErrorString = [](NcclResult r) {
    return r == kNcclRemoteError ? "remote process exited or there was a network error"
                                 : "some NCCL error";
  };
  api.GetLastError = [](NcclComm) { return "peer 1 vanished"; };
  api.AllReduce = [](const void*, void*, size_t count, int type, int op, NcclComm,
                     CudaStream stream) {
    FakeNccl* f = Current();
    f->last_call = "all_reduce";
    f->last_count = count;
    f->last_type = type;
    f->last_op = op;
    f->last_stream = stream;
    ++f->collectives;
    const bool in_progress = f->launch_in_progress.load();
    if (in_progress) f->async_error = kNcclInProgress;  // Before the test hears of the call.
    if (!f->launched.HasBeenNotified()) f->launched.Notify();
    return in_progress ? kNcclInProgress : kNcclSuccess;
  };
  api.AllGather = [](const void*, void*, size_t count, int type, NcclComm, CudaStream) {
    FakeNccl* f = Current();
    f->last_call = "all_gather";
    f->last_count = count;
    f->last_type = type;
    ++f->collectives;
    return kNcclSuccess;
  };
  api.ReduceScatter = [](const void*, void*, size_t count, int type, int op, NcclComm, CudaStream) {
    FakeNccl* f = Current();
    f->last_call = "reduce_scatter";
    f->last_count = count;
    f->last_type = type;
    f->last_op = op;
    ++f->collectives;
    return kNcclSuccess;
  };
  api.Broadcast = [](const void*, void*, size_t count, int type, int root, NcclComm, CudaStream) {
    FakeNccl* f = Current();
    f->last_call = "broadcast";
    f->last_count = count;
    f->last_type = type;
    f->last_root = root;
    ++f->collectives;
    return kNcclSuccess;
  };
  api.Send = [](const void*, size_t, int, int, NcclComm, CudaStream) {
    ++Current()->sends;
    return kNcclSuccess;
  };
  api.Recv = [](void*, size_t, int, int, NcclComm, CudaStream) {
    ++Current()->recvs;
    return kNcclSuccess;
  };
  api.GroupStart = [] { return kNcclSuccess; };
  api.GroupEnd = [] { return kNcclSuccess; };
  api.GetDeviceCount = [](int* n) {
    *n = 1;
    return kCudaSuccess;
  };
  api.GetDevice = [](int* d) {
    *d = 0;
    return kCudaSuccess;
  };
  api.SetDevice = [](int) { return kCudaSuccess; };
  api.StreamCreate = [](CudaStream* s) {
    *s = reinterpret_cast<CudaStream>(0x1);
    return kCudaSuccess;
  };
  api.StreamDestroy = [](CudaStream) { return kCudaSuccess; };
  api.StreamQuery = [](CudaStream) {
    FakeNccl* f = Current();
    ++f->stream_queries;
    return f->stream_done.load() ? kCudaSuccess : kCudaErrorNotReady;
  };
  api.StreamIsCapturing = [](CudaStream, int* status) {
    *status = Current()->capturing.load() ? 1 : kCudaStreamCaptureStatusNone;
    return kCudaSuccess;
  };
  api.StreamWaitEvent = [](CudaStream, CudaEvent) {
    ++Current()->stream_waits;
    return kCudaSuccess;
  };
  api.EventCreate = [](CudaEvent* e) {
    FakeNccl* f = Current();
    absl::MutexLock lock(&f->mu);
    ++f->events_created;
    *e = reinterpret_cast<CudaEvent>(static_cast<intptr_t>(-f->events_created));
    return kCudaSuccess;
  };
  api.EventDestroy = [](CudaEvent) {
    FakeNccl* f = Current();
    absl::MutexLock lock(&f->mu);
    ++f->events_destroyed;
    return kCudaSuccess;
  };
  // An event handle stands for the k-th recording while it is in use: the map is keyed by the
  // recording, and the handle remembers its latest one.
  api.EventRecord = [](CudaEvent e, CudaStream) {
    FakeNccl* f = Current();
    absl::MutexLock lock(&f->mu);
    if (f->async_error.load() == kNcclInProgress) f->event_recorded_while_launching = true;
    const intptr_t k = f->next_event++;
    f->events[k] = false;
    Recording()[e] = k;
    return kCudaSuccess;
  };
  api.EventQuery = [](CudaEvent e) {
    FakeNccl* f = Current();
    const int n = ++f->event_queries;
    if (f->raise_on_query.load() == n) f->async_error = f->raise_error;
    if (f->stream_done.load()) return kCudaSuccess;
    absl::MutexLock lock(&f->mu);
    return f->events[Recording()[e]] ? kCudaSuccess : kCudaErrorNotReady;
  };
  api.ThreadExchangeStreamCaptureMode = [](int* mode) {
    FakeNccl* f = Current();
    if (*mode == kCudaStreamCaptureModeRelaxed && !f->relaxed_capture_mode.HasBeenNotified()) {
      f->relaxed_capture_mode.Notify();
    }
    *mode = 0;
    return kCudaSuccess;
  };
  api.PointerGetAttributes = [](CudaPointerAttributes* a, const void* p) {
    // Only the fake's own "device" buffer is device memory, so the communicator's dispatch
    // sends host buffers to the host backend.
    a->type = p == &fake_comm_storage ? 2 : 0;
    return kCudaSuccess;
  };
  api.CudaGetErrorString = [](CudaError) { return "cuda error"; };
  api.Malloc = [](void** p, size_t) {
    *p = &fake_comm_storage;
    return kCudaSuccess;
  };
  api.Free = [](void*) { return kCudaSuccess; };
  api.Memcpy = [](void*, const void*, size_t, int) { return kCudaSuccess; };
  return api;
}

// The device buffer the fake hands out: pass it as send/recv to reach the NCCL backend.
inline void* FakeDeviceBuffer() { return &fake_comm_storage; }

}  // namespace dist::internal::testing
