#pragma once

// The DistributedJob resource (group cohort.dev, version v1alpha1) as C++ types: parsing from
// the API server's JSON with defaults applied, validation with errors a user can act on, and the
// status written back. manifests/crd/cohort.dev_distributedjobs.yaml carries the same schema for
// the API server; these checks also guard against a cluster that skipped it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/job_settings.h"
#include "kube/conditions.h"
#include "kube/resource.h"

namespace cohort::op {

inline constexpr char kGroup[] = "cohort.dev";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kKind[] = "DistributedJob";
inline constexpr char kPlural[] = "distributedjobs";
// A DNS label's and a label value's limit: pod names are both, and so are PodGroup names.
inline constexpr size_t kMaxLabelLength = 63;
// Where the API server serves DistributedJobs.
inline const kube::Resource kDistributedJobs{kGroup, kVersion, kPlural};

struct SidecarSpec {
  std::string image = "ghcr.io/cohort-dev/cohort-sidecar:0.1.0";
  std::string image_pull_policy = "IfNotPresent";
  nlohmann::json resources = nlohmann::json::object();  // A core/v1 ResourceRequirements.
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
};

// Who starts the processes of a pod (spec.launcher).
enum class Launcher {
  // Cohort: the operator runs the trainer's command through cohort-launch, which starts
  // processesPerPod copies of it, each with its own rank's environment.
  kCohort,
  // The command (torchrun) starts the pod's processes itself; the operator sets PET_NNODES,
  // PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT for it.
  kTorchrun,
};

// What a restart does to the gang (spec.restartStrategy; docs/operator.md, "Restarting in place").
enum class RestartStrategy {
  // The pods stay; every pod's processes are stopped and started again as the next attempt
  // (cohort-launch runs them, the sidecars stay). Falls back to kRecreate where it cannot work.
  kInPlace,
  // Every pod is deleted and created again.
  kRecreate,
};
const char* RestartStrategyName(RestartStrategy strategy);

// What the operator does when the job's hang detector names ranks that made no progress for
// longer than their timeout (spec.hangPolicy; docs/faults.md, "Hung ranks"). Every policy sets the
// job's Hung condition and emits a HangDetected Event.
enum class HangPolicy {
  // Once every pod dumped its stacks (or 30 s passed), the gang restarts, in place where it can,
  // counted against maxRestarts; spec.failurePolicy.rules see the termination reason Hung.
  kRestart,
  kFail,   // Once every pod dumped its stacks (or 30 s passed), the job fails (reason Hung).
  kAlert,  // Nothing else: the job keeps running.
};
const char* HangPolicyName(HangPolicy policy);

// spec.hangDetection: when rank 0's sidecar takes a rank that makes no progress for hung.
struct HangDetectionSpec {
  // timeoutSeconds. Unset: automatic (10 minutes until a rank has shown progress twice, then
  // max(60 s, 5 x the job's median step time)); 0: no hang detection.
  std::optional<int64_t> timeout_seconds;
};

// spec.elastic (docs/operator.md, "Elastic replica groups"): the job may run with fewer
// data-parallel replica groups than spec.replicas asks, down to minReplicas pods, instead of
// waiting for capacity; it grows back at a common step once the pods are there.
struct ElasticSpec {
  int32_t min_replicas = 1;    // Pods the job runs with at the least.
  int32_t pods_per_group = 1;  // The pods of one replica group (model parallel inside it).
  // How long a lost pod's slot may wait for a spare or a replacement pod before the job goes on
  // without its group.
  int64_t shrink_after_seconds = 60;
};

// The most processes one pod may run (spec.processesPerPod).
inline constexpr int32_t kMaxProcessesPerPod = 256;

// spec.failurePolicy.rules[].action: what a matching rule does with the failure that ended a
// restart attempt.
enum class FailureAction {
  kFailJob,                         // The job fails at once.
  kRestartJob,                      // A gang restart counted against maxRestarts.
  kRestartJobAndIgnoreMaxRestarts,  // A gang restart that is not counted (uncountedRestarts).
};
const char* FailureActionName(FailureAction action);
std::optional<FailureAction> ParseFailureAction(const std::string& name);

// A matcher of a rule: the terminated exit code of a container (the trainer unless named).
struct ExitCodesMatcher {
  std::string container_name;  // Empty: the trainer (the first container).
  bool in = true;              // operator In (true) or NotIn.
  std::vector<int32_t> values;
};

// A matcher of a rule: a pod condition of this type with this status.
struct PodConditionMatcher {
  std::string type;
  std::string status = "True";
};

// One rule of spec.failurePolicy.rules: it matches when every matcher it has matches.
struct FailureRule {
  FailureAction action = FailureAction::kRestartJob;
  std::optional<ExitCodesMatcher> on_exit_codes;
  std::vector<PodConditionMatcher> on_pod_conditions;
  std::vector<std::string> on_termination_reasons;  // e.g. OOMKilled.
};

// spec.scheduling: how the job's pods are admitted and placed on a shared cluster
// (docs/operator.md, "Shared clusters").
// spec.scheduling.podGroup.provider: whose PodGroup the operator creates for each attempt.
enum class PodGroupProvider {
  kNone,
  kCoscheduling,  // scheduler-plugins: scheduling.x-k8s.io/v1alpha1 PodGroup, pod label.
  kVolcano,       // Volcano: scheduling.volcano.sh/v1beta1 PodGroup, pod annotation.
  kWorkload,      // Kubernetes' workload-aware scheduling: scheduling.k8s.io/v1beta1 PodGroup,
                  // the pods' spec.schedulingGroup (Kubernetes 1.37).
};

struct PodGroupSpec {
  PodGroupProvider provider = PodGroupProvider::kNone;
  std::optional<int32_t> min_member;      // Unset: every pod of the job.
  int32_t schedule_timeout_seconds = 60;  // coscheduling's scheduleTimeoutSeconds.
  bool schedule_timeout_set = false;      // Written in the spec (refused for other providers).
};

struct SchedulingSpec {
  // Kueue's LocalQueue: every pod of a restart attempt joins one plain pod group
  // (PodGroupName()) of all the job's pods, which Kueue admits as a whole.
  std::string queue_name;
  // The pods' spec.schedulerName (a gang scheduler of the cluster's); empty: the template's, or
  // the provider's (scheduler-plugins-scheduler, volcano; workload keeps the default) with a
  // podGroup.
  std::string scheduler_name;
  PodGroupSpec pod_group;
};

// Kueue's pod-group labels and annotations, as its reference names them (Kueue documentation,
// "Labels and Annotations": site/content/en/docs/reference/labels-and-annotations.md of
// kubernetes-sigs/kueue; "Run Plain Pods" for their use).
inline constexpr char kKueueQueueNameLabel[] = "kueue.x-k8s.io/queue-name";
inline constexpr char kKueuePodGroupNameLabel[] = "kueue.x-k8s.io/pod-group-name";
inline constexpr char kKueuePodGroupTotalCountAnnotation[] = "kueue.x-k8s.io/pod-group-total-count";
inline constexpr char kKueuePodGroupIndexLabelAnnotation[] =
    "kueue.x-k8s.io/pod-group-pod-index-label";
// "false": a terminated pod finishes its group instead of Kueue waiting for a replacement pod of
// the same group (a restart is a new group), so Kueue releases the group's quota and finalizers.
inline constexpr char kKueueRetriableInGroupAnnotation[] = "kueue.x-k8s.io/retriable-in-group";
// Kueue's topology-aware scheduling: the template's annotations name the Node label whose value is
// the domain (a rack, a block) the job's pods must (required) or should (preferred) share. Hot
// spares take a slot in the gang's domain the same way (SpareTopology()).
inline constexpr char kKueueRequiredTopologyAnnotation[] =
    "kueue.x-k8s.io/podset-required-topology";
inline constexpr char kKueuePreferredTopologyAnnotation[] =
    "kueue.x-k8s.io/podset-preferred-topology";

struct DistributedJobSpec {
  int32_t replicas = 1;  // Pods.
  // Hot spares (docs/operator.md, "Hot spares"): pods beyond `replicas`, started like the others
  // but holding no rank, that take the slot of a pod that is lost in the next attempt.
  int32_t spares = 0;
  // spec.processesPerPod: a number, or "auto" (the trainer container's nvidia.com/gpu limit when
  // it has one, else 1). ResolvedProcessesPerPod() gives the number.
  int32_t processes_per_pod = 1;
  bool processes_per_pod_auto = false;
  Launcher launcher = Launcher::kCohort;
  RestartStrategy restart_strategy = RestartStrategy::kInPlace;
  nlohmann::json pod_template;  // A core/v1 PodTemplateSpec: the trainer.
  int32_t coordinator_port = 8476;
  int32_t max_restarts = 3;  // Gang restarts after failures; preemptions do not count.
  absl::Duration restart_backoff = absl::Seconds(10);  // Doubles per restart, capped at 5 min.
  bool suspend = false;
  std::optional<int64_t> ttl_seconds_after_finished;
  std::optional<int64_t> active_deadline_seconds;
  SidecarSpec sidecar;
  // spec.failurePolicy.rules, in order: the first that matches the failure decides.
  std::vector<FailureRule> failure_rules;
  SchedulingSpec scheduling;
  HangDetectionSpec hang_detection;
  // spec.hangPolicy; unset reads as kRestart (`hang_policy_set` false). Hangs are found only where
  // the gang restarts in place: Validate refuses Restart and Fail with restartStrategy Recreate.
  HangPolicy hang_policy = HangPolicy::kRestart;
  bool hang_policy_set = false;
  std::optional<ElasticSpec> elastic;  // spec.elastic; unset: the job runs at its size only.
};

// status.conditions (metav1.Condition): typed as Kubernetes keeps them (kube/conditions.h has the
// helpers).
using Condition = kube::StatusCondition;
using kube::FindCondition;
using kube::SetCondition;

enum class Phase { kPending, kRunning, kRestarting, kSucceeded, kFailed, kSuspended };
const char* PhaseName(Phase phase);
std::optional<Phase> ParsePhase(const std::string& name);

struct DistributedJobStatus {
  Phase phase = Phase::kPending;
  std::vector<Condition> conditions;
  // The pods the running restart attempt has (status.replicas, the scale subresource's):
  // spec.replicas, but for an elastic job that runs without some of its replica groups or has
  // not resized to spec.replicas yet. StatusToJson adds status.processes (these pods' processes)
  // and status.selector (the job's pods' label selector).
  int32_t replicas = 0;
  // An elastic job: the replica groups the running attempt runs, and the groups (indexes below
  // the highest it runs) it runs without (status.replicaGroups, status.droppedReplicaGroups).
  int32_t replica_groups = 0;
  std::vector<int32_t> dropped_replica_groups;
  int32_t ready = 0;
  int32_t active = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t restarts = 0;
  int32_t preemptions = 0;
  // Gang restarts that a RestartJobAndIgnoreMaxRestarts rule made: not in restarts.
  int32_t uncounted_restarts = 0;
  // What the last gang restart was ("Failure", "UncountedFailure", "Preemption"; empty before
  // the first): the backoff before its next attempt depends on it.
  std::string last_restart_kind;
  // How the last restart was carried out: "InPlace" or "Recreate" (empty before the first).
  std::string last_restart_strategy;
  int32_t restart_attempt = 0;
  // The id of the last hang the job's attempt hub reported that the operator acted on (its
  // HangDetected Event was emitted); 0 before the first.
  int64_t last_hang_id = 0;
  // Hot spares: how many the job has (spare pods not being deleted that hold no slot), how many
  // of them are ready to take one (Ready, following the attempt hub), and how many were created
  // so far (the next is named SparePodName(job, spares_created): a name is never used twice).
  int32_t spares = 0;
  int32_t ready_spares = 0;
  int32_t spares_created = 0;
  // The slots held by a pod not named "<job>-<index>" (a spare that took the slot, or a pod that
  // replaced one alone): pod index -> pod name.
  std::map<int32_t, std::string> slots;
  std::string coordinator_address;
  int64_t observed_generation = 0;
  std::string start_time;       // RFC 3339, empty until the first pod runs.
  std::string completion_time;  // RFC 3339, empty until Succeeded or Failed.
};

struct DistributedJob {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  bool being_deleted = false;                    // metadata.deletionTimestamp is set.
  absl::Time created_at = absl::InfinitePast();  // metadata.creationTimestamp, when readable.
  DistributedJobSpec spec;
  // Spec fields that could not be read (a wrong JSON type, an unparsable duration), one sentence
  // each naming the field, the value and how to write it; such a field keeps its default.
  // Validate() reports them first.
  std::vector<std::string> spec_errors;
  DistributedJobStatus status;
};

// Parses a DistributedJob object and applies defaults. Errors (InvalidArgument naming the field)
// only for what no API server returns: not an object, metadata not an object or without a name,
// metadata fields of the wrong type. A spec field that cannot be read is the user's to fix, so it
// is no error here: it goes to `spec_errors` and the job can still be reported on (a cluster
// whose CRD has no schema lets `replicas: "four"` through). Status fields that cannot be read
// keep their defaults.
absl::StatusOr<DistributedJob> ParseDistributedJob(const nlohmann::json& object);

// Every problem with the spec, one sentence each naming the field, the value and what is
// allowed, e.g. "spec.replicas: must be at least 1 (got 0)": the spec_errors first, then the
// semantic checks. Empty when valid.
std::vector<std::string> Validate(const DistributedJob& job);

// The status subresource's JSON for the job's status (with readyText, "3/4", for kubectl get).
nlohmann::json StatusToJson(const DistributedJob& job);

// The processes of each pod: spec.processesPerPod, with "auto" resolved from the trainer's (the
// first container's) nvidia.com/gpu limit (1 without one).
int32_t ResolvedProcessesPerPod(const DistributedJob& job);
// The trainer's container name: the template's first container's ("" when unreadable).
std::string TrainerName(const DistributedJob& job);
// Whether the job's pods restart in place: spec.restartStrategy is InPlace and the trainer (the
// template's first container) has a command, which cohort-launch runs (Kubernetes cannot know an
// image's entrypoint). What validation, the pods' build and the restart policies all ask.
bool RestartsInPlace(const DistributedJobSpec& spec);
// Whether a gang scheduler admits the job's pods (spec.scheduling: a Kueue queue or a PodGroup
// provider): whole groups only, so no pod joins an admitted gang alone (a lost pod cannot be
// replaced alone, nor a spare take its slot).
bool GangScheduled(const DistributedJobSpec& spec);
// The topology domain hot spares keep to: the Node label the template's Kueue topology annotation
// names (the required one first), and whether it is required; nullopt when it has neither.
struct TopologyRequest {
  std::string node_label;
  bool required = false;
};
std::optional<TopologyRequest> SpareTopology(const DistributedJob& job);
// The trainer container's nvidia.com/gpu limit (0 when it has none or it is unreadable).
int64_t TrainerGpuLimit(const DistributedJob& job);
// Every process of the job: replicas x processes per pod.
int64_t TotalProcesses(const DistributedJob& job);
// An elastic job's replica groups as spec.replicas asks (0 for a job that is not elastic).
int32_t DesiredReplicaGroups(const DistributedJobSpec& spec);

// "<job>-0.<job>.<namespace>.svc:<port>": rank 0's sidecar through the headless Service.
std::string CoordinatorAddress(const DistributedJob& job);

}  // namespace cohort::op
