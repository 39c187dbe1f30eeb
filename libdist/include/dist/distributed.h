#pragma once

// libdist: the C++ counterpart of jax.distributed and jax.experimental.multihost_utils for
// programs run by Cohort (cohort-run locally, cohort-operator on Kubernetes) or by hand.
//
//   dist::Initialize();                        // rank, size, coordinator from COHORT_* env
//   dist::KeyValueSet("addr/" + rank, addr);
//   dist::Barrier("ready");
//   for (int64_t step = 0;; ++step) {
//     ...train...
//     if (*dist::ReachedPreemptionSyncPoint(step)) { SaveCheckpoint(step); break; }
//   }
//   dist::Shutdown();
//
// Every function returns absl::Status / absl::StatusOr; none throws. Codes keep one meaning:
// InvalidArgument = the caller's mistake, FailedPrecondition = wrong state (e.g. not
// initialized), DeadlineExceeded = a timeout (the message names who was missing), Aborted = a
// peer failed or restarted and the job is ending, Unavailable = the coordinator or sidecar is
// unreachable, Unauthenticated = wrong job token. Thread-safe.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dist {

// How libdist reaches the job.
enum class Mode {
  kAuto,   // COHORT_MODE, else agent when COHORT_AGENT_SOCKET is set, else standalone.
  kAgent,  // Through this pod's cohort-sidecar on COHORT_AGENT_SOCKET (Kubernetes, cohort-run).
  kStandalone,  // Agent in-process; process 0 also hosts the coordination service.
};

enum class FailureCause {
  kUnknown,
  kCrash,                // The process exited or was killed without shutting down.
  kHeartbeatTimeout,     // Its sidecar or host went silent.
  kPreempted,            // It died after a preemption notice.
  kRestarted,            // It came back with a new incarnation.
  kReportedError,        // The program called ReportError().
  kRegistrationTimeout,  // It never joined.
  kShutdownTimeout,      // It never reached shutdown.
  kServiceLost,          // The coordination service (or this process's sidecar) went away.
  kCollectiveTimeout,    // A collective timed out or its ranks called different operations
                         // (dist/collectives.h); the message names the stuck rank(s).
  kOutOfMemory,          // The OOM killer ended it.
  kKilledBySignal,       // A signal nobody in Cohort sent ended it.
  kHung,                 // It made no progress for longer than its hang timeout (the job's hang
                         // detector named it; docs/faults.md, "Hung ranks").
};
const char* FailureCauseName(FailureCause cause);

// A failure somewhere in the job, as told to every process.
struct PeerFailure {
  int process_id = -1;  // The failed process, or -1 when no single one is known.
  FailureCause cause = FailureCause::kUnknown;
  std::string message;  // Names the process, the cause and what to look at.
};

// The exit status of the default peer-failure handler, so that an operator can tell the
// processes that followed a failure (75) from the one that caused it.
inline constexpr int kPeerFailureExitCode = 75;

// The exit status for a process that saved its checkpoint at the preemption sync point and stops
// because the job is being preempted. cohort-operator restarts the gang after it without counting
// a failure (exit 0 would mark the job Succeeded).
inline constexpr int kPreemptedExitCode = 76;

// The timeout of blocking calls when none is given.
inline constexpr absl::Duration kDefaultTimeout = absl::Minutes(5);

// Every unset field falls back to the environment (name in brackets), then to the default.
struct Options {
  std::optional<std::string> coordinator_address;        // [COHORT_COORDINATOR_ADDRESS] host:port
  std::optional<int> num_processes;                      // [COHORT_NUM_PROCESSES]
  std::optional<int> process_id;                         // [COHORT_PROCESS_ID]
  std::optional<absl::Duration> initialization_timeout;  // [COHORT_INITIALIZATION_TIMEOUT] 5 min
  std::optional<absl::Duration> heartbeat_timeout;       // [COHORT_HEARTBEAT_TIMEOUT] 10 s
  std::optional<absl::Duration> shutdown_timeout;        // [COHORT_SHUTDOWN_TIMEOUT] 5 min
  Mode mode = Mode::kAuto;                               // [COHORT_MODE] agent|standalone
  std::optional<std::string> agent_socket;               // [COHORT_AGENT_SOCKET]
  std::optional<std::string> token;                      // [COHORT_TOKEN_FILE, COHORT_TOKEN]
  // Turn SIGTERM into a preemption notice for the whole job (see ReachedPreemptionSyncPoint).
  bool install_preemption_handler = true;
  // Called once, on a libdist thread, when any process of the job fails. Default: print the
  // failure and exit with kPeerFailureExitCode at once (fate sharing), so no process hangs on a
  // dead peer.
  std::function<void(const PeerFailure&)> on_peer_failure;
};

// Joins the job: returns once every process has joined. Errors: InvalidArgument (missing or
// inconsistent settings, process id out of range, size mismatch), AlreadyExists (another
// process uses this process id), FailedPrecondition (already initialized), DeadlineExceeded
// (coordinator unreachable, or peers missing, within the initialization timeout), Aborted (the
// job already failed), Unauthenticated (wrong token).
absl::Status Initialize(const Options& options = {});
bool IsInitialized();
// Leaves the job through the shutdown barrier: returns once every live process called it (or
// the shutdown timeout passed). After a peer failure, returns that failure (Aborted).
absl::Status Shutdown();

// This process's rank and the job's size (0 and 1 before Initialize).
int ProcessIndex();
int ProcessCount();
// This process's index among the processes of its pod (COHORT_LOCAL_PROCESS_ID, as LOCAL_RANK)
// and how many the pod runs (COHORT_PROCESSES_PER_POD, as LOCAL_WORLD_SIZE): 0 and 1 before
// Initialize or when the launcher does not say. On a GPU node with one process per GPU, the
// local index is the process's GPU (the NCCL backend's default device).
int LocalProcessIndex();
int LocalProcessCount();
// Which restart of the gang this is: 0 for the first run, one more after each gang restart
// (COHORT_RESTART_ATTEMPT, set by cohort-operator and cohort-run; 0 when unset or before
// Initialize). A program can use it to tell a fresh start from a restart, e.g. to look for a
// checkpoint.
int RestartAttempt();

// Key-value store of the coordination service, for small coordination data (values up to 1 MiB).
// Keys are normalized: "/a//b/" is "a/b".
// AlreadyExists when the key exists and !allow_overwrite.
absl::Status KeyValueSet(absl::string_view key, absl::string_view value,
                         bool allow_overwrite = false);
// Waits until the key is set. DeadlineExceeded after `timeout`.
absl::StatusOr<std::string> KeyValueGet(absl::string_view key,
                                        absl::Duration timeout = kDefaultTimeout);
// NotFound when unset.
absl::StatusOr<std::string> KeyValueTryGet(absl::string_view key);
// Every (key, value) below `directory/`, in key order.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> KeyValueDir(
    absl::string_view directory);
// Deletes the key and everything below it.
absl::Status KeyValueDelete(absl::string_view key);
// Atomically adds `increment` (a missing key counts as 0); returns the new value.
absl::StatusOr<int64_t> KeyValueIncrement(absl::string_view key, int64_t increment);

// Waits until every listed process (all when empty) reached the barrier `id`. Ids are
// reusable: every participant must call an id the same number of times. DeadlineExceeded names
// the missing processes; Aborted when a participant failed; Cancelled after CancelBarrier.
absl::Status Barrier(absl::string_view id, absl::Duration timeout = kDefaultTimeout,
                     const std::vector<int>& process_ids = {});
// Fails this process's ongoing barrier `id` for every participant.
absl::Status CancelBarrier(absl::string_view id);
// A barrier across all processes that also checks that they passed the same name
// (jax.experimental.multihost_utils.sync_global_devices). As in jax, a process whose name differs
// from process 0's fails with FailedPrecondition naming both names; process 0 does not fail.
// DeadlineExceeded naming the missing processes, Aborted when a process failed.
absl::Status SyncGlobalDevices(absl::string_view name, absl::Duration timeout = kDefaultTimeout);

// Reports this process's training step: its sidecar exports it (cohort_trainer_step, the time per
// step and the productive time behind goodput) and rank 0's exports every rank's
// (cohort_task_step, cohort_task_progress_age_seconds), so a dashboard shows step lag and an
// alert names a rank that stopped making progress while its process is alive (docs/metrics.md).
// Call it once per step (or at least every few seconds); it never waits on the job (reports
// more often than every 100 ms are coalesced). ReachedPreemptionSyncPoint(step) reports the step
// too. FailedPrecondition before Initialize().
absl::Status ReportProgress(int64_t step);

// Call once per step, from the same starting step on every process. After any process receives
// a preemption notice (SIGTERM, or ReportPreemption()), returns true on exactly one step, the
// same on every process: one past the largest step any process had reached when the notice
// arrived. Save a checkpoint there. Before Initialize, or when there is no notice: false.
absl::StatusOr<bool> ReachedPreemptionSyncPoint(int64_t step);
// Tells the job that this process will be preempted (e.g. from a cloud metadata watcher).
absl::Status ReportPreemption();
// Whether any process of the job reported a preemption notice.
bool PreemptionNoticeReceived();
// Fails the job with this message: every other process is told (cause kReportedError).
absl::Status ReportError(absl::string_view message);

}  // namespace dist
