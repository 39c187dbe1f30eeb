#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/backend_plan.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/nccl_api.h"
#include "libdist/src/current_job.h"
#include "libdist/src/failure_handlers.h"
#include "libdist/src/store.h"

namespace dist::internal {

class NcclBackend;
class CommunicatorImpl;
struct LocalResources;  // What this rank set up before the exchange (communicator.cc).

// CommunicatorOptions with every field decided.
struct ResolvedCommunicatorOptions {
  Backend backend = Backend::kAuto;
  HostTransport host_transport = HostTransport::kAuto;
  absl::Duration timeout = kDefaultCollectiveTimeout;
  absl::Duration init_timeout;
  std::string tcp_host;  // Empty: derived (locality.h TcpHost).
  int cuda_device = -1;  // -1: NcclBackend::DefaultDevice of the job's local process index.
  // The NCCL to use (tests pass a fake table); nullptr: LoadNccl().
  const NcclApi* nccl_api = nullptr;
};
// InvalidArgument naming the variable and the accepted values when one is malformed.
absl::StatusOr<ResolvedCommunicatorOptions> ResolveCommunicatorOptions(
    const CommunicatorOptions& options, absl::Duration job_init_timeout);

// Where a communicator stands, for the watchdog: the last call enqueued, the last one before
// which every call completed, and the calls in flight (the oldest is the one reported as
// pending). Shared with the progress reporter.
struct CollectiveProgress {
  absl::Mutex mu;
  uint64_t last_started ABSL_GUARDED_BY(mu) = 0;
  uint64_t last_completed ABSL_GUARDED_BY(mu) = 0;
  struct InFlight {
    OpSignature sig;
    absl::Time since;
  };
  std::map<uint64_t, InFlight> in_flight ABSL_GUARDED_BY(mu);
};

// What a communicator is reached through from outside its own calls (the failure hook, the
// NCCL watch thread, a Work's Test/Wait): cleared under the lock by the destructor, so whoever
// holds the lock sees a live communicator or none.
struct CommunicatorAnchor {
  absl::Mutex mu;
  CommunicatorImpl* impl ABSL_GUARDED_BY(mu) = nullptr;
};

// One collective call from enqueue to its end: what dist::Work holds.
struct WorkState {
  CollectiveCall call;
  absl::Time enqueued;
  uint64_t recorder_entry = 0;
  bool on_nccl = false;
  CudaEvent event = nullptr;  // NCCL: recorded after the call; returned to the pool at its end.
  std::shared_ptr<CommunicatorAnchor> anchor;

  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
};

// Makes the public handle of a call.
struct WorkAccess {
  static Work Wrap(std::shared_ptr<WorkState> state) { return Work(std::move(state)); }
};

// What dist::Communicator is: the ranks, the backends (host, and NCCL for device buffers), the
// call numbering and the calls in flight, the failure state, and the hook that aborts it when
// the job fails.
//
// Host calls run in order on one worker thread (started by the first asynchronous call); a
// blocking call with nothing queued runs on the caller's thread instead, saving two thread
// hand-offs. NCCL calls are enqueued on the caller's thread; their ends are seen by whoever
// looks first: the Work's Test/Wait, or the process's watch thread (nccl_watch.h). A failure
// of an NCCL call is handled on the worker thread (naming who held it up takes a while), which
// then ends every call in flight.
//
// Defined in two files: the work engine (Submit, Run, RunHostCall, Finish, the worker thread) in
// work_engine.cc; set-up, NCCL polling, failure handling and Split in communicator.cc.
class CommunicatorImpl {
 public:
  // Sets up the backends among `processes` (job process ids, in rank order; this process among
  // them), meeting the other ranks under `store` (a prefix store of this communicator's own).
  // `progress_id` names it in progress reports ("world#0").
  static absl::StatusOr<std::unique_ptr<CommunicatorImpl>> Build(
      JobHandle job, ResolvedCommunicatorOptions options, std::string name, Store store,
      std::string progress_id, std::vector<int> processes);
  ~CommunicatorImpl();

  // Validates and enqueues one call. Errors here are the caller's (InvalidArgument), a
  // communicator that failed before (FailedPrecondition), or one that could not be enqueued.
  // `run_here`: a host call the caller runs itself (RunHostCall), not queued for the worker.
  absl::StatusOr<std::shared_ptr<WorkState>> Submit(CollectiveKind kind, const void* send,
                                                    void* recv, size_t count, DataType type,
                                                    ReduceOp op, int root,
                                                    const CallOptions& options,
                                                    bool run_here = false);
  // A blocking call: Submit + Wait, or the host call on this thread when nothing is queued.
  absl::Status Run(CollectiveKind kind, const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op, int root, const CallOptions& options);
  void Abort(absl::Status reason);
  absl::StatusOr<std::unique_ptr<CommunicatorImpl>> Split(int color, int key);

  // Looks at the NCCL calls in flight once: ends those whose event fired, and on a failure
  // (NCCL's error, a deadline passed, Abort()) hands it to the worker. Returns whether calls
  // are still in flight. Called with the anchor's lock held (reader); `watch_thread`: from the
  // NCCL watch thread, which makes the communicator's device current first.
  bool PollNccl(bool watch_thread = false);
  // NCCL: makes `stream` wait for the work's end event.
  absl::Status StreamWait(WorkState& work, CudaStream stream);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(names_.processes.size()); }
  const std::vector<int>& processes() const { return names_.processes; }
  Backend backend() const { return nccl_ ? Backend::kNccl : Backend::kHost; }
  std::string Describe() const;

 private:
  CommunicatorImpl() = default;
  // ExchangePeers → PlanBackends → assembly → AttachToJob: the steps of Build.
  absl::Status AssembleBackends(const BackendPlan& plan, const std::vector<PeerInfo>& peers,
                                LocalResources& resources, const NcclApi* nccl_api,
                                absl::Time deadline);
  void AttachToJob();

  absl::Status Validate(CollectiveKind kind, const void* send, void* recv, size_t count,
                        int root) const;
  bool UseNccl(const void* send, const void* recv) const;
  // The status a call that could not run gets: Aborted after Abort(), else FailedPrecondition
  // with the first failure. OK while healthy.
  absl::Status Refusal(const OpSignature& sig) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs one host call on this thread and ends its work.
  void RunHostCall(WorkState& work);
  // Ends a work: its status, the recorder, the progress.
  void Finish(WorkState& work, absl::Status status);
  void WorkerLoop();
  void StartWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the first NCCL failure (on `sig`, in flight since `since`) for the worker; later
  // ones are dropped. No NCCL call is enqueued after it.
  void NcclFailedLocked(absl::Status failure, const OpSignature& sig, absl::Time since)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On the worker: a failure of the NCCL calls in flight, explained and spread to every one.
  void HandleNcclFailure(absl::Status failure);
  // After a failed call: the status to return, and whether the job must be told.
  absl::Status Fail(const OpSignature& sig, absl::Status status, absl::Duration waited);
  // Who held up a timed-out call, from the service's cross-rank table (nullopt: unknown).
  std::optional<std::string> Diagnose(const OpSignature& sig, absl::Duration waited);

  JobHandle job_;
  ResolvedCommunicatorOptions options_;
  std::string name_;
  Store store_;
  std::string progress_id_;  // The communicator's id in progress reports.
  int rank_ = 0;
  RankNames names_;
  std::unique_ptr<CollectiveBackend> host_;
  std::unique_ptr<NcclBackend> nccl_;
  std::string transport_;  // "shared memory" / "TCP"
  std::optional<FailureHandlers::Id> failure_hook_;
  int splits_ = 0;
  std::shared_ptr<CollectiveProgress> progress_ = std::make_shared<CollectiveProgress>();
  std::optional<uint64_t> reporter_id_;  // Its entry in the ProgressReporter.
  std::shared_ptr<CommunicatorAnchor> anchor_ = std::make_shared<CommunicatorAnchor>();

  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);   // The first failure; OK while healthy.
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);  // Why Abort() was called; OK otherwise.
  // Every call not yet ended, in order.
  std::deque<std::shared_ptr<WorkState>> in_flight_ ABSL_GUARDED_BY(mu_);
  // Host calls not yet started, in order, and whether one is running.
  std::deque<std::shared_ptr<WorkState>> host_queue_ ABSL_GUARDED_BY(mu_);
  bool host_busy_ ABSL_GUARDED_BY(mu_) = false;
  // A failure of the NCCL calls, seen and not yet handled by the worker, and the call it hit.
  std::optional<absl::Status> nccl_failure_ ABSL_GUARDED_BY(mu_);
  OpSignature nccl_failure_sig_ ABSL_GUARDED_BY(mu_);
  absl::Time nccl_failure_since_ ABSL_GUARDED_BY(mu_);
  // Seen (handled or not): no NCCL call is enqueued any more. The first failure's message.
  bool nccl_failed_ ABSL_GUARDED_BY(mu_) = false;
  std::string nccl_failure_message_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace dist::internal
