#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/store.h"

namespace dist::internal {

// The NCCL backend: one NCCL communicator on one device. NCCL has no timeouts, so every wait is
// Cohort's: init is nonblocking and polled against the init deadline (a timeout names the ranks
// that never joined); a call is enqueued on a stream with an event recorded after it (Enqueue),
// and whoever waits for it looks at the event, NCCL's asynchronous error and Abort() (Query,
// Health); a communicator that failed or timed out is aborted with ncclCommAbort on a helper
// thread for a bounded time (abort itself can hang in NCCL: NVIDIA/nccl#1777).
class NcclBackend final : public CollectiveBackend {
 public:
  // The device a process uses unless told otherwise: its index among its pod's processes
  // (COHORT_LOCAL_PROCESS_ID) modulo the devices it sees, so the processes of an 8-GPU pod take
  // one GPU each while every GPU stays visible to all of them (NCCL's P2P needs that).
  static int DefaultDevice(const NcclApi* api, int local_process_index);

  // `device`: the CUDA device (-1: the current one). The unique id travels through `store`
  // (rank 0 sets "nccl/id", the others get it), and every rank sets "nccl/joined/<rank>", so a
  // timeout names the ranks that never joined.
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(const NcclApi* api, int rank,
                                                             RankNames names, int device,
                                                             Store store, absl::Time deadline);
  ~NcclBackend() override;

  // Blocking: Enqueue, then wait for the event (tests; the communicator uses the parts).
  absl::Status Run(const CollectiveCall& call) override;
  void Abort() override;
  std::string Describe() const override;

  // FailedPrecondition when `stream` (nullptr: this backend's) is being captured into a CUDA
  // graph: a captured collective would run once per replay, outside the watchdog's numbering.
  absl::Status CheckNotCapturing(CudaStream stream) const;
  // Enqueues the call on its stream (the call's, else this backend's) and records an event after
  // it; returns the event. InvalidArgument for the caller's mistakes (the communicator stays
  // usable), Internal when NCCL or CUDA failed (the communicator is aborted), Aborted after
  // Abort().
  absl::StatusOr<CudaEvent> Enqueue(const CollectiveCall& call);
  // Whether the call behind `event` completed; Internal with CUDA's error when it failed.
  absl::StatusOr<bool> Query(CudaEvent event);
  // OK while the communicator is healthy; Aborted after Abort(), Internal with NCCL's
  // asynchronous error (naming the rank). Never blocks: FailAndAbort() is the caller's to run.
  absl::Status Health();
  // Makes `stream` wait for `event` on the device (cudaStreamWaitEvent).
  absl::Status StreamWait(CudaStream stream, CudaEvent event);
  // Gives an event back to the pool (never destroyed before the backend: destroying an event
  // can hang while the device is stuck).
  void ReleaseEvent(CudaEvent event);
  // Marks the communicator failed and aborts it (bounded), e.g. after a deadline passed.
  void FailAndAbort();
  // Readies the NCCL watch thread for this backend's event queries: its device current (else
  // the queries make a context on device 0) and the relaxed capture mode, so
  // that a query while another thread captures a CUDA graph in global mode neither fails nor
  // invalidates that capture.
  void PrepareWatchThread();

  // Whether `pointer` is device (or managed) memory, for the auto backend's dispatch.
  static bool IsDevicePointer(const NcclApi* api, const void* pointer);

  // How long ncclCommAbort may take before it is left behind.
  static constexpr absl::Duration kAbortBound = absl::Seconds(10);
  // How often a pending init or call is polled.
  static constexpr absl::Duration kPollInterval = absl::Microseconds(50);

 private:
  NcclBackend(const NcclApi* api, int rank, int size, RankNames names, int device);
  // Polls until `done` says so, NCCL reports an error, the deadline passes or Abort().
  absl::Status Poll(const std::function<bool()>& done, const std::string& what,
                    absl::Time deadline);
  std::string NcclError(NcclResult result) const;
  std::string NcclErrorLocked(NcclResult result) const ABSL_SHARED_LOCKS_REQUIRED(comm_mu_);
  // NCCL's asynchronous error; kNcclInternalError once the communicator was released.
  NcclResult AsyncError() const;
  // Aborts the NCCL communicator (once), bounded by kAbortBound.
  void AbortComm();

  const NcclApi* const api_;
  const int rank_;
  const int size_;
  const RankNames names_;
  const int device_;
  NcclComm comm_ = nullptr;
  CudaStream stream_ = nullptr;
  absl::Mutex events_mu_;
  std::vector<CudaEvent> free_events_ ABSL_GUARDED_BY(events_mu_);
  std::vector<CudaEvent> all_events_ ABSL_GUARDED_BY(events_mu_);
  void* barrier_buffer_ = nullptr;  // One float on the device, for Barrier().
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};  // The NCCL communicator must be aborted, not finalized.
  // Held shared by every use of comm_ after init (enqueue, async error, last error) and
  // exclusively by the abort that releases it: nobody touches a communicator ncclCommAbort is
  // freeing.
  mutable absl::Mutex comm_mu_;
  bool comm_released_ ABSL_GUARDED_BY(comm_mu_) = false;
};

}  // namespace dist::internal
