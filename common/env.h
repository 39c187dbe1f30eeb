#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// The environment contract of a job's processes (docs/operator.md, "The environment contract").
// This is the one place that names each variable; libdist, the sidecar and the launchers read and
// set them through these names (common/job_settings.h resolves them).
namespace cohort::env {

inline constexpr char kCoordinatorAddress[] = "COHORT_COORDINATOR_ADDRESS";
inline constexpr char kNumProcesses[] = "COHORT_NUM_PROCESSES";
inline constexpr char kProcessId[] = "COHORT_PROCESS_ID";
// The process's index among the processes of its pod (or, under cohort-run without
// --processes-per-pod, of this machine), and how many those are.
inline constexpr char kLocalProcessId[] = "COHORT_LOCAL_PROCESS_ID";
inline constexpr char kProcessesPerPod[] = "COHORT_PROCESSES_PER_POD";
// The gang's restart attempt: 0 for the first run, one more per gang restart. ("Incarnation"
// means only the random id each process picks when it starts.)
inline constexpr char kRestartAttempt[] = "COHORT_RESTART_ATTEMPT";
// An elastic job (spec.elastic): the data-parallel replica groups this attempt runs, and those
// the job wants (spec.replicas / podsPerGroup). A trainer keeps its global batch with them
// (gradient accumulation); unset for a job that is not elastic.
inline constexpr char kReplicaGroups[] = "COHORT_REPLICA_GROUPS";
inline constexpr char kDesiredReplicaGroups[] = "COHORT_DESIRED_REPLICA_GROUPS";
inline constexpr char kAgentSocket[] = "COHORT_AGENT_SOCKET";
// spec.restartStrategy: InPlace: where the pod's sidecar serves cohort-launch
// (common/process/launch_protocol.h), and the directory cohort-launch empties of an attempt's files
// before the next (the pod's /dev/shm).
inline constexpr char kLaunchSocket[] = "COHORT_LAUNCH_SOCKET";
inline constexpr char kShmDir[] = "COHORT_SHM_DIR";
// A spare pod (a pod beyond the gang's, restarting in place): its name. Its sidecar and
// cohort-launch hold no rank (COHORT_PROCESS_ID unset) until an attempt gives the pod the slot of
// a pod that is gone; the sidecar then runs as that pod's, and tells cohort-launch which it is.
inline constexpr char kSpare[] = "COHORT_SPARE";
// Hang detection (docs/faults.md, "Hung ranks"): cohort-launch gives each Python process the
// start-up hook's directory of its own (its status, and the sidecar's requests for its stacks)
// and its own pid, which the hook checks to stay silent in the process's children;
// COHORT_PYTHON_PROBE=0 leaves the hook out.
inline constexpr char kProbeDir[] = "COHORT_PROBE_DIR";
inline constexpr char kProbeParentPid[] = "COHORT_PROBE_PPID";
inline constexpr char kPythonProbe[] = "COHORT_PYTHON_PROBE";
// spec.hangDetection.timeoutSeconds: "auto", a number of seconds, 0 for off (the operator sets
// it on every container; rank 0's sidecar runs the detector).
inline constexpr char kHangTimeout[] = "COHORT_HANG_TIMEOUT";
inline constexpr char kJobName[] = "COHORT_JOB_NAME";
inline constexpr char kNamespace[] = "COHORT_NAMESPACE";
inline constexpr char kPodIp[] = "COHORT_POD_IP";
// The pod's name (cohort-run: "<job>-<pod index>"), for messages naming where a rank runs.
inline constexpr char kPodName[] = "COHORT_POD_NAME";
// Job token: the value itself, or a file holding it (the operator mounts the job's Secret).
inline constexpr char kToken[] = "COHORT_TOKEN";
inline constexpr char kTokenFile[] = "COHORT_TOKEN_FILE";
// Timeouts: a duration ("30s", "5m", "1.5s") or a number of seconds.
inline constexpr char kInitializationTimeout[] = "COHORT_INITIALIZATION_TIMEOUT";
inline constexpr char kHeartbeatTimeout[] = "COHORT_HEARTBEAT_TIMEOUT";
inline constexpr char kShutdownTimeout[] = "COHORT_SHUTDOWN_TIMEOUT";
// libdist mode: "agent" (sidecar on COHORT_AGENT_SOCKET) or "standalone" (agent in-process,
// service in process 0). Default: agent when COHORT_AGENT_SOCKET is set, else standalone.
inline constexpr char kMode[] = "COHORT_MODE";
// libdist collectives (docs/libdist.md): the backend ("auto", "nccl", "host"), the host
// backend's transport ("auto", "shm", "tcp"), the default timeout of a collective call, the
// address this process announces for the TCP transport, and the flight recorder's size.
inline constexpr char kCollectives[] = "COHORT_COLLECTIVES";
inline constexpr char kHostTransport[] = "COHORT_HOST_TRANSPORT";
inline constexpr char kCollectiveTimeout[] = "COHORT_COLLECTIVE_TIMEOUT";
inline constexpr char kCollectivesHost[] = "COHORT_COLLECTIVES_HOST";
inline constexpr char kFlightRecorderEntries[] = "COHORT_FLIGHT_RECORDER_ENTRIES";
// How cohort-run and cohort-launch bind the processes they start: "cores" (each local process
// on its own share of the CPUs) or "none" (launcher/cpu_binding.h).
inline constexpr char kCpuBind[] = "COHORT_CPU_BIND";
// The lowest log level printed: debug, info, warning or error (common/log.h).
inline constexpr char kLogLevel[] = "COHORT_LOG_LEVEL";

// JAX's names (jax.distributed.initialize reads them when given no arguments). The coordinator
// address is rank 0's sidecar's port for XLA's protocol (docs/jax.md); JAX's own process-0
// service binds the bind address, which nobody dials.
inline constexpr char kJaxCoordinatorAddress[] = "JAX_COORDINATOR_ADDRESS";
inline constexpr char kJaxCoordinatorBindAddress[] = "JAX_COORDINATOR_BIND_ADDRESS";
inline constexpr char kJaxNumProcesses[] = "JAX_NUM_PROCESSES";
inline constexpr char kJaxProcessId[] = "JAX_PROCESS_ID";
// Set on a pod whose trainer requests GPUs: the process's GPU (jax reads it itself).
inline constexpr char kJaxLocalDeviceIds[] = "JAX_LOCAL_DEVICE_IDS";

// torch.distributed's env:// names, as torchrun sets them for each process.
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kNodeRank[] = "NODE_RANK";
// torchrun's own flags, read from the environment (as Kubeflow Trainer runs it), for a pod whose
// command is torchrun (spec.launcher: Torchrun): it starts the pod's processes itself.
inline constexpr char kTorchrunNumNodes[] = "PET_NNODES";
inline constexpr char kTorchrunProcsPerNode[] = "PET_NPROC_PER_NODE";
inline constexpr char kTorchrunNodeRank[] = "PET_NODE_RANK";
inline constexpr char kTorchrunMasterAddr[] = "PET_MASTER_ADDR";
inline constexpr char kTorchrunMasterPort[] = "PET_MASTER_PORT";

// The address JAX's process 0 binds for its own service: loopback, any port (nobody dials it).
inline constexpr char kJaxUnusedBindAddress[] = "127.0.0.1:0";

// The ports of rank 0's pod after the coordinator port (COHORT_COORDINATOR_ADDRESS's): XLA's
// coordination protocol (JAX_COORDINATOR_ADDRESS), PyTorch's TCPStore (MASTER_PORT), and the
// attempt hub of a job that restarts in place (coordination/attempts/attempt_hub.h).
inline constexpr int kJaxPortOffset = 1;
inline constexpr int kMasterPortOffset = 2;
inline constexpr int kAttemptControlPortOffset = 3;

// Where one process of a job runs: rank = pod index x processes per pod + local index. In an
// elastic job's attempt that runs without some pods (common/attempt_layout.h), `pod_index` and
// `num_pods` are the pod's position among the attempt's pods and their number.
struct ProcessPlacement {
  int pod_index = 0;
  int local_index = 0;
  int processes_per_pod = 1;
  int num_pods = 1;
  // An elastic job's replica groups, running and wanted (0: not elastic; no variable is set).
  int replica_groups = 0;
  int desired_replica_groups = 0;

  int rank() const { return pod_index * processes_per_pod + local_index; }
  int world_size() const { return num_pods * processes_per_pod; }
};

// The variables that differ from one process of a job to the next: Cohort's
// (COHORT_NUM_PROCESSES, COHORT_PROCESS_ID, COHORT_LOCAL_PROCESS_ID, COHORT_PROCESSES_PER_POD),
// JAX's (JAX_NUM_PROCESSES, JAX_PROCESS_ID, and JAX_LOCAL_DEVICE_IDS = the local index when
// `gpus`) and torchrun's (WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK and
// NODE_RANK = the pod index), and an elastic job's COHORT_REPLICA_GROUPS and
// COHORT_DESIRED_REPLICA_GROUPS. The operator, the in-pod launcher and cohort-run all take them
// from here.
std::vector<std::pair<std::string, std::string>> ProcessVariables(const ProcessPlacement& p,
                                                                  bool gpus);

// What every process of a job shares. The operator (for the containers of a pod), cohort-run
// (for its ranks and sidecars) and the tests' local jobs fill in what they know; a field left
// empty (0 for the ports, nullopt for the timeouts) sets no variable, so the process's own
// default applies (common/job_settings.h) or, for the pod's IP and name, the operator sets them
// from the pod itself (a fieldRef).
struct JobInputs {
  std::string coordinator_address;  // COHORT_COORDINATOR_ADDRESS: "host:port" of rank 0's service.
  int restart_attempt = 0;          // COHORT_RESTART_ATTEMPT (always set).
  std::string job_name;             // COHORT_JOB_NAME
  std::string namespace_name;       // COHORT_NAMESPACE
  std::string token_file;           // COHORT_TOKEN_FILE
  std::string agent_socket;         // COHORT_AGENT_SOCKET (the pod's: a launcher gives each
                                    // process its own, AgentSocketPath).
  std::string launch_socket;        // COHORT_LAUNCH_SOCKET (restarting in place only)
  std::string shm_dir;              // COHORT_SHM_DIR (restarting in place only)
  std::string pod_ip;               // COHORT_POD_IP
  std::string pod_name;             // COHORT_POD_NAME
  std::optional<absl::Duration> heartbeat_timeout;       // COHORT_HEARTBEAT_TIMEOUT
  std::optional<absl::Duration> initialization_timeout;  // COHORT_INITIALIZATION_TIMEOUT
  std::optional<absl::Duration> shutdown_timeout;        // COHORT_SHUTDOWN_TIMEOUT
  // Rank 0's host, and the ports there of XLA's protocol (JAX_COORDINATOR_ADDRESS, with
  // JAX_COORDINATOR_BIND_ADDRESS) and of PyTorch's TCPStore (MASTER_ADDR, MASTER_PORT).
  std::string rank0_host;
  int jax_port = 0;
  int master_port = 0;
  // The pod's command is torchrun, which starts the pod's processes: PET_* from `placement`
  // (nodes = pods, processes per node, node rank = pod index) and the master's address.
  bool torchrun = false;
  ProcessPlacement placement;
};

// The variables of JobInputs, in a fixed order (the table in docs/operator.md, "The environment
// contract"). Every process of the job adds ProcessVariables for its own placement.
std::vector<std::pair<std::string, std::string>> JobVariables(const JobInputs& in);

// The agent socket of local process `local_index` of a sidecar serving `served` processes:
// `base` itself when it serves one, else "<base without .sock>-<local_index>.sock".
std::string AgentSocketPath(absl::string_view base, int local_index, int served);

// Beside the pod's agent socket (the cohort-agent directory that trainer and sidecar share): the
// directory of rank `rank`'s start-up hook ("<dir>/probe/rank-<rank>"), and where the evidence of
// a hang is kept ("<dir>/dumps"; per attempt and rank: "<dir>/dumps/attempt-<n>/rank-<rank>").
std::string ProbeDir(absl::string_view agent_socket, int rank);
std::string DumpsDir(absl::string_view agent_socket);

// The placement of local process 0 of this pod, from COHORT_PROCESS_ID (its rank),
// COHORT_PROCESSES_PER_POD (default 1), COHORT_NUM_PROCESSES and, when set, an elastic job's
// COHORT_REPLICA_GROUPS and COHORT_DESIRED_REPLICA_GROUPS. InvalidArgument naming the
// variable and the fix when one is missing, malformed or inconsistent (the job size not a
// multiple of the processes per pod, a rank that is not local process 0's).
absl::StatusOr<ProcessPlacement> PodPlacementFromEnvironment();

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> Get(const char* name);
// A spare pod holding no slot yet: COHORT_SPARE set, COHORT_PROCESS_ID not.
inline bool IsSparePod() { return Get(kSpare).has_value() && !Get(kProcessId).has_value(); }

// Parses the variable as an integer. InvalidArgument (naming the variable and its value) when it
// is set but not an integer.
absl::StatusOr<std::optional<int64_t>> GetInt(const char* name);

// Parses the variable as a duration. InvalidArgument when malformed or negative.
absl::StatusOr<std::optional<absl::Duration>> GetDuration(const char* name);

// The port of a COHORT_COORDINATOR_ADDRESS ("host:port"); process 0 listens on it.
// InvalidArgument naming the address and the expected form.
absl::StatusOr<int> CoordinatorPort(absl::string_view address);

// "30s", "250ms", "5m" or a plain number of seconds ("30", "0.5").
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);

}  // namespace cohort::env
