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

namespace dist::internal {

// The NCCL backend: one NCCL communicator on one device. NCCL has no timeouts, so every wait is
// Cohort's: init is nonblocking and polled against the init deadline (a timeout names the ranks
// that never joined), each call is enqueued on a stream and polled (stream completion, NCCL's
// asynchronous error, the call's deadline, Abort()), and a communicator that failed or timed out
// is aborted with ncclCommAbort on a helper thread for a bounded time (abort itself can hang in
// NCCL: NVIDIA/nccl#1777).
class NcclBackend final : public CollectiveBackend {
 public:
  // How the unique id travels and who joined: rank 0 publishes the id, the others fetch it;
  // every rank marks itself joined. `missing_ranks` lists the ranks that did not mark.
  struct Rendezvous {
    std::function<absl::Status(const NcclUniqueId&)> publish_id;
    std::function<absl::StatusOr<NcclUniqueId>(absl::Time deadline)> fetch_id;
    std::function<void()> mark_joined;
    std::function<std::vector<int>()> missing_ranks;
  };

  // The device a process uses unless told otherwise: its index among its pod's processes
  // (COHORT_LOCAL_PROCESS_ID) modulo the devices it sees, so the processes of an 8-GPU pod take
  // one GPU each while every GPU stays visible to all of them (NCCL's P2P needs that).
  static int DefaultDevice(const NcclApi* api, int local_process_index);

  // `device`: the CUDA device (-1: the current one).
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(const NcclApi* api, int rank,
                                                             RankNames names, int device,
                                                             Rendezvous rendezvous,
                                                             absl::Time deadline);
  ~NcclBackend() override;

  absl::Status Run(const CollectiveCall& call) override;
  void Abort() override;
  std::string Describe() const override;

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
  // Aborts the NCCL communicator (once), bounded by kAbortBound.
  void AbortComm();

  const NcclApi* const api_;
  const int rank_;
  const int size_;
  const RankNames names_;
  const int device_;
  NcclComm comm_ = nullptr;
  CudaStream stream_ = nullptr;
  void* barrier_buffer_ = nullptr;  // One float on the device, for Barrier().
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};  // The NCCL communicator must be aborted, not finalized.
  absl::Mutex abort_mu_;
  bool comm_released_ ABSL_GUARDED_BY(abort_mu_) = false;
};

}  // namespace dist::internal
