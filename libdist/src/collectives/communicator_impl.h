#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/current_job.h"
#include "libdist/src/failure_handlers.h"

namespace dist::internal {

// CommunicatorOptions with every field decided.
struct ResolvedCommunicatorOptions {
  Backend backend = Backend::kAuto;
  HostTransport host_transport = HostTransport::kAuto;
  absl::Duration timeout = kDefaultCollectiveTimeout;
  absl::Duration init_timeout;
  std::string tcp_host;  // Empty: derived (locality.h TcpHost).
  int cuda_device = -1;  // -1: NcclBackend::DefaultDevice of the job's local process index.
};
// InvalidArgument naming the variable and the accepted values when one is malformed.
absl::StatusOr<ResolvedCommunicatorOptions> ResolveCommunicatorOptions(
    const CommunicatorOptions& options, absl::Duration job_init_timeout);

// Where a communicator stands, for the watchdog: what it started and completed last. Shared
// with the progress reporter.
struct CollectiveProgress {
  absl::Mutex mu;
  uint64_t last_started ABSL_GUARDED_BY(mu) = 0;
  uint64_t last_completed ABSL_GUARDED_BY(mu) = 0;
  std::optional<OpSignature> pending ABSL_GUARDED_BY(mu);
  absl::Time pending_since ABSL_GUARDED_BY(mu);
};

// What dist::Communicator is: the ranks, the backends (host, and NCCL for device buffers), the
// call numbering, the failure state, and the hook that aborts it when the job fails.
class CommunicatorImpl {
 public:
  // Sets up the backends among `processes` (job process ids, in rank order; this process among
  // them), meeting the other ranks under `scope` in the key-value store.
  static absl::StatusOr<std::unique_ptr<CommunicatorImpl>> Build(
      JobHandle job, ResolvedCommunicatorOptions options, std::string name, std::string scope,
      std::vector<int> processes);
  ~CommunicatorImpl();

  absl::Status Run(CollectiveKind kind, const void* send, void* recv, size_t count,
                   DataType type, ReduceOp op, int root, const CallOptions& options);
  void Abort(absl::Status reason);
  absl::StatusOr<std::unique_ptr<CommunicatorImpl>> Split(int color, int key);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(names_.processes.size()); }
  const std::vector<int>& processes() const { return names_.processes; }
  Backend backend() const { return nccl_ ? Backend::kNccl : Backend::kHost; }
  std::string Describe() const;

 private:
  CommunicatorImpl() = default;
  absl::Status Validate(CollectiveKind kind, const void* send, void* recv, size_t count,
                        int root) const;
  CollectiveBackend* BackendFor(const void* send, const void* recv) const;
  // After a failed call: the status to return, and whether the job must be told.
  absl::Status Fail(const OpSignature& sig, absl::Status status, absl::Duration waited);
  // Who held up a timed-out call, from the service's cross-rank table (nullopt: unknown).
  std::optional<std::string> Diagnose(const OpSignature& sig, absl::Duration waited);

  JobHandle job_;
  ResolvedCommunicatorOptions options_;
  std::string name_;
  std::string scope_;
  int rank_ = 0;
  RankNames names_;
  std::unique_ptr<CollectiveBackend> host_;
  std::unique_ptr<CollectiveBackend> nccl_;
  std::string transport_;  // "shared memory" / "TCP"
  std::optional<FailureHandlers::Id> failure_hook_;
  int splits_ = 0;

  std::atomic<uint64_t> next_seq_{1};
  mutable absl::Mutex mu_;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);   // The first failure; OK while healthy.
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);  // Why Abort() was called; OK otherwise.
  std::shared_ptr<CollectiveProgress> progress_ = std::make_shared<CollectiveProgress>();
  std::string progress_id_;              // The communicator's id in progress reports.
  std::optional<uint64_t> reporter_id_;  // Its entry in the ProgressReporter.
  // What the failure hook aborts; shared with it, cleared by the destructor under its lock, so
  // a hook that runs while the communicator goes away aborts it or nothing.
  struct HookTarget {
    absl::Mutex mu;
    CommunicatorImpl* impl ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<HookTarget> hook_target_;
};

}  // namespace dist::internal
