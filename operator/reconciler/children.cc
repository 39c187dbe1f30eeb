#include "operator/reconciler/children.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/env.h"
#include "kube/json_fields.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

json OwnerReference(const DistributedJob& job) {
  return json::array({{{"apiVersion", absl::StrCat(kGroup, "/", kVersion)},
                       {"kind", kKind},
                       {"name", job.name},
                       {"uid", job.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

json Metadata(const DistributedJob& job, const std::string& name, json labels) {
  labels[kJobNameLabel] = job.name;
  labels["app.kubernetes.io/managed-by"] = "cohort-operator";
  return {{"name", name},
          {"namespace", job.namespace_},
          {"labels", labels},
          {"ownerReferences", OwnerReference(job)}};
}

// The environment of every container (env::JobVariables, the contract in common/env.h), as for
// the pod's first process: cohort-launch gives each of the pod's processes its own rank's values.
// A template variable of the same name is replaced, so a stale value can never override the
// operator's.
// A spare (`pod_index` nullopt) holds no rank: it gets the job's size but no rank, pod index or
// torchrun node rank, and COHORT_SPARE with its name (cohort-launch and the sidecar wait for a
// slot); cohort-launch gives its processes their ranks when it takes one.
json ContractEnv(const DistributedJob& job, std::optional<int32_t> pod_index,
                 int32_t restart_attempt, const std::string& spare_name = "") {
  const int32_t per_pod = ResolvedProcessesPerPod(job);
  // An elastic job's pod starts as part of the whole job; every later attempt's order says
  // where it stands (common/attempt_layout.h).
  const env::ProcessPlacement placement{.pod_index = pod_index.value_or(0),
                                        .local_index = 0,
                                        .processes_per_pod = per_pod,
                                        .num_pods = job.spec.replicas,
                                        .replica_groups = DesiredReplicaGroups(job.spec),
                                        .desired_replica_groups = DesiredReplicaGroups(job.spec)};
  env::JobInputs in;
  in.coordinator_address = CoordinatorAddress(job);
  in.restart_attempt = restart_attempt;
  in.agent_socket = kAgentSocket;
  in.job_name = job.name;
  in.namespace_name = job.namespace_;
  in.token_file = absl::StrCat(kTokenDir, "/", kTokenKey);
  in.heartbeat_timeout = job.spec.sidecar.heartbeat_timeout;
  // An unmodified JAX program dials rank 0's sidecar on the next port, where it speaks JAX's
  // coordination protocol (docs/jax.md); torch.distributed's env://, as torchrun and Kubeflow's
  // PyTorchJob set it, finds rank 0's TCPStore two ports above the coordinator's.
  in.rank0_host = absl::StrCat(PodName(job, 0), ".", ServiceName(job), ".",
                               job.namespace_.empty() ? "default" : job.namespace_, ".svc");
  in.jax_port = job.spec.coordinator_port + env::kJaxPortOffset;
  in.master_port = job.spec.coordinator_port + env::kMasterPortOffset;
  // A command that is torchrun reads its flags from PET_* (Kubeflow Trainer's way).
  in.torchrun = job.spec.launcher == Launcher::kTorchrun;
  if (RestartsInPlace(job.spec)) {
    in.launch_socket = absl::StrCat(kAgentDir, "/launch.sock");
    in.shm_dir = "/dev/shm";
  }
  in.placement = placement;

  json env = json::array();
  auto add = [&](const std::string& name, const std::string& value) {
    env.push_back({{"name", name}, {"value", value}});
  };
  for (const auto& [name, value] : env::JobVariables(in)) {
    if (!pod_index && name == env::kTorchrunNodeRank) continue;
    add(name, value);
  }
  // The pod's IP and name come from the pod itself.
  env.push_back(
      {{"name", env::kPodIp}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}});
  env.push_back(
      {{"name", env::kPodName}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}});
  // Rank, job size, local index: Cohort's, JAX's and torchrun's names.
  for (const auto& [name, value] : env::ProcessVariables(placement, TrainerGpuLimit(job) > 0)) {
    const bool job_wide = name == env::kNumProcesses || name == env::kProcessesPerPod ||
                          name == env::kJaxNumProcesses || name == env::kWorldSize ||
                          name == env::kLocalWorldSize || name == env::kReplicaGroups ||
                          name == env::kDesiredReplicaGroups;
    if (pod_index || job_wide) add(name, value);
  }
  if (!pod_index) add(env::kSpare, spare_name);
  const std::optional<int64_t>& hang_timeout = job.spec.hang_detection.timeout_seconds;
  add(env::kHangTimeout, hang_timeout ? absl::StrCat(*hang_timeout) : "auto");
  return env;
}

// A variable the trainer gets only when its container sets neither it nor `alias` (the name a
// newer PyTorch reads the same setting under: PyTorch reads the TORCH_FR_ name first, so setting
// ours beside the user's alias would override theirs).
struct DefaultVariable {
  const char* name;
  const char* alias;  // nullptr: none.
  std::string value;
};

// The evidence of a hang (docs/faults.md, "Hung ranks"): PyTorch's NCCL flight recorder on, with
// its dumps in the directory trainer and sidecar share, where the sidecar collects them. A
// template's own value wins.
std::vector<DefaultVariable> TrainerDefaults() {
  const std::string dumps = env::DumpsDir(kAgentSocket);
  return {
      {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "2000"},
      {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE",
       absl::StrCat(dumps, "/nccl_trace_rank_")},
      {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
       absl::StrCat(dumps, "/fr_trace_rank_")},
  };
}

void MergeEnv(json& container, const json& contract) {
  json merged = json::array();
  if (container.contains("env") && container["env"].is_array()) {
    for (const json& e : container["env"]) {
      bool overridden = false;
      for (const json& c : contract) overridden |= kube::StringMember(e, "name") == c["name"];
      if (!overridden) merged.push_back(e);
    }
  }
  for (const json& c : contract) merged.push_back(c);
  container["env"] = merged;
}

// Adds each of `defaults` the container does not set itself (by its name or its alias), after
// what it has: unlike the contract's, a template's value stays.
void MergeDefaultEnv(json& container, const std::vector<DefaultVariable>& defaults) {
  json& env = container["env"];
  if (!env.is_array()) env = json::array();
  auto sets = [&](const char* name) {
    if (name == nullptr) return false;
    for (const json& e : env) {
      if (kube::StringMember(e, "name") == name) return true;
    }
    return false;
  };
  // Judged against the template's variables, not against the defaults added before.
  std::vector<json> added;
  for (const DefaultVariable& d : defaults) {
    if (!sets(d.name) && !sets(d.alias)) added.push_back({{"name", d.name}, {"value", d.value}});
  }
  for (json& e : added) env.push_back(std::move(e));
}

// The trainer container's memory limit, when it has one (the size of its /dev/shm).
json MemoryLimit(const json& container) {
  const json& limit = kube::Member(container, "resources", "limits", "memory");
  return limit.is_string() || limit.is_number() ? limit : json();
}

bool MountsPath(const json& container, const char* path) {
  const json& mounts = kube::Member(container, "volumeMounts");
  if (!mounts.is_array()) return false;
  for (const json& m : mounts) {
    if (kube::StringMember(m, "mountPath") == path) return true;
  }
  return false;
}

void AddMounts(json& container) {
  json& mounts = container["volumeMounts"];
  if (!mounts.is_array()) mounts = json::array();
  mounts.push_back({{"name", "cohort-agent"}, {"mountPath", kAgentDir}});
  mounts.push_back({{"name", "cohort-token"}, {"mountPath", kTokenDir}, {"readOnly", true}});
}

}  // namespace

bool OwnedByJob(const json& object, const std::string& job_uid) {
  if (job_uid.empty()) return true;
  for (const json& ref : kube::ArrayMember(kube::Member(object, "metadata"), "ownerReferences")) {
    if (kube::BoolMember(ref, "controller")) return kube::StringMember(ref, "uid") == job_uid;
  }
  return true;
}

json BuildService(const DistributedJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Metadata(job, ServiceName(job), json::object())},
          {"spec",
           {{"clusterIP", "None"},
            {"publishNotReadyAddresses", true},
            {"selector", {{kJobNameLabel, job.name}}},
            {"ports", json::array({{{"name", "coordinator"}, {"port", job.spec.coordinator_port}},
                                   {{"name", "metrics"}, {"port", kSidecarMetricsPort}}})}}}};
}

json BuildTokenSecret(const DistributedJob& job, const std::string& token) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", Metadata(job, SecretName(job), json::object())},
          {"type", "Opaque"},
          {"stringData", {{kTokenKey, token}}}};
}

const char* PodGroupApiVersion(PodGroupProvider provider) {
  switch (provider) {
    case PodGroupProvider::kVolcano:
      return "scheduling.volcano.sh/v1beta1";
    case PodGroupProvider::kWorkload:
      return "scheduling.k8s.io/v1beta1";
    default:
      return "scheduling.x-k8s.io/v1alpha1";
  }
}

json BuildPodGroup(const DistributedJob& job, int32_t restart_attempt) {
  const PodGroupSpec& group = job.spec.scheduling.pod_group;
  const int32_t min_member = group.min_member.value_or(job.spec.replicas + job.spec.spares);
  // Kubernetes' group: a standalone PodGroup (no Workload template) with all-or-nothing placement
  // of minCount pods.
  json spec = group.provider == PodGroupProvider::kWorkload
                  ? json{{"schedulingPolicy", {{"gang", {{"minCount", min_member}}}}}}
                  : json{{"minMember", min_member}};
  if (group.provider == PodGroupProvider::kCoscheduling)
    spec["scheduleTimeoutSeconds"] = group.schedule_timeout_seconds;
  return {{"apiVersion", PodGroupApiVersion(group.provider)},
          {"kind", "PodGroup"},
          {"metadata", Metadata(job, PodGroupName(job, restart_attempt),
                                {{kRestartAttemptLabel, absl::StrCat(restart_attempt)}})},
          {"spec", spec}};
}

namespace {
// A rank's pod, or (`rank` nullopt) a spare's.
json BuildPodOf(const DistributedJob& job, std::optional<int32_t> rank, int32_t restart_attempt,
                const std::string& name);
}  // namespace

json BuildPod(const DistributedJob& job, int32_t rank, int32_t restart_attempt) {
  return BuildPod(job, rank, restart_attempt, PodName(job, rank));
}

json BuildPod(const DistributedJob& job, int32_t rank, int32_t restart_attempt,
              const std::string& name) {
  return BuildPodOf(job, rank, restart_attempt, name);
}

json BuildSparePod(const DistributedJob& job, int32_t sequence, int32_t restart_attempt) {
  return BuildPodOf(job, std::nullopt, restart_attempt, SparePodName(job, sequence));
}

namespace {

json BuildPodOf(const DistributedJob& job, std::optional<int32_t> rank, int32_t restart_attempt,
                const std::string& name) {
  // The template's shape is the user's (a CRD without a schema checks nothing): what is not an
  // object here is left out rather than trusted.
  const json& tmpl = job.spec.pod_template;
  const json& template_labels = kube::Member(tmpl, "metadata", "labels");
  json labels = template_labels.is_object() ? template_labels : json::object();
  if (rank) {
    labels[kRankLabel] = absl::StrCat(*rank);
  } else {
    labels[kSpareLabel] = name;
  }
  labels[kRestartAttemptLabel] = absl::StrCat(restart_attempt);
  const SchedulingSpec& scheduling = job.spec.scheduling;
  if (!scheduling.queue_name.empty()) {
    // A Kueue plain pod group per attempt, of every pod of the job; its topology requests
    // (kueue.x-k8s.io/podset-*-topology) are the template's annotations, copied below.
    labels[kKueueQueueNameLabel] = scheduling.queue_name;
    labels[kKueuePodGroupNameLabel] = PodGroupName(job, restart_attempt);
  }
  const PodGroupProvider provider = scheduling.pod_group.provider;
  if (provider == PodGroupProvider::kCoscheduling)
    labels[kCoschedulingPodGroupLabel] = PodGroupName(job, restart_attempt);
  json metadata = Metadata(job, name, labels);
  if (const json& annotations = kube::Member(tmpl, "metadata", "annotations");
      annotations.is_object()) {
    metadata["annotations"] = annotations;
  }
  if (!scheduling.queue_name.empty()) {
    // Spares are pods of the group: Kueue admits the gang with them.
    metadata["annotations"][kKueuePodGroupTotalCountAnnotation] =
        absl::StrCat(job.spec.replicas + job.spec.spares);
    if (rank) metadata["annotations"][kKueuePodGroupIndexLabelAnnotation] = kRankLabel;
    metadata["annotations"][kKueueRetriableInGroupAnnotation] = "false";
  }
  if (provider == PodGroupProvider::kVolcano) {
    metadata["annotations"][kVolcanoGroupNameAnnotation] = PodGroupName(job, restart_attempt);
  }
  json spec = kube::Member(tmpl, "spec").is_object() ? kube::Member(tmpl, "spec") : json::object();
  // The provider's scheduler (their charts' defaults) unless one is named.
  const bool template_scheduler =
      spec.contains("schedulerName") && spec["schedulerName"].is_string();
  if (provider == PodGroupProvider::kCoscheduling && !template_scheduler) {
    spec["schedulerName"] = "scheduler-plugins-scheduler";
  }
  if (provider == PodGroupProvider::kVolcano && !template_scheduler)
    spec["schedulerName"] = "volcano";
  // Kubernetes' own scheduler places the group; the pod names it in its spec.
  if (provider == PodGroupProvider::kWorkload) {
    spec["schedulingGroup"] = {{"podGroupName", PodGroupName(job, restart_attempt)}};
  }
  if (!scheduling.scheduler_name.empty()) spec["schedulerName"] = scheduling.scheduler_name;
  spec["hostname"] = rank ? PodName(job, *rank) : name;
  spec["subdomain"] = ServiceName(job);
  spec["restartPolicy"] = "Never";

  json contract = ContractEnv(job, rank, restart_attempt, rank ? "" : name);
  for (json& c : spec["containers"]) {
    if (!c.is_object()) continue;  // Validate() reports it; the API server refuses the pod.
    MergeEnv(c, contract);
    AddMounts(c);
  }
  const int32_t per_pod = ResolvedProcessesPerPod(job);
  const bool in_place = RestartsInPlace(job.spec);
  // Restarting in place, cohort-launch supervises every trainer, torchrun too (as one process).
  const bool cohort_launches = (per_pod > 1 && job.spec.launcher == Launcher::kCohort) || in_place;
  json* trainer = spec["containers"].is_array() && !spec["containers"].empty() &&
                          spec["containers"][0].is_object()
                      ? &spec["containers"][0]
                      : nullptr;
  if (trainer != nullptr) MergeDefaultEnv(*trainer, TrainerDefaults());
  if (trainer != nullptr && cohort_launches && (*trainer)["command"].is_array()) {
    // cohort-launch (copied into the shared directory by the init container below) starts the
    // pod's processes from the container's own command and arguments.
    json command = json::array({kLauncherPath});
    if (job.spec.launcher == Launcher::kTorchrun) command.push_back("--one-process");
    command.push_back("--");
    for (const json& a : (*trainer)["command"]) command.push_back(a);
    (*trainer)["command"] = command;
  }
  // NCCL's and the host backend's shared memory between the pod's processes needs more than a
  // container runtime's default /dev/shm (64 MiB): a memory-backed volume, as large as the
  // container's memory limit, unless the template mounts its own. Restarting in place, always:
  // cohort-launch empties it between attempts, and a container's own /dev/shm is not the pod's.
  std::optional<json> dshm;
  if (trainer != nullptr && (per_pod > 1 || TrainerGpuLimit(job) > 0 || in_place) &&
      !MountsPath(*trainer, "/dev/shm")) {
    dshm = json{{"name", "cohort-dshm"}, {"emptyDir", {{"medium", "Memory"}}}};
    if (json limit = MemoryLimit(*trainer); !limit.is_null())
      (*dshm)["emptyDir"]["sizeLimit"] = limit;
    (*trainer)["volumeMounts"].push_back({{"name", "cohort-dshm"}, {"mountPath", "/dev/shm"}});
  }

  json sidecar = {
      {"name", "cohort-sidecar"},
      {"image", job.spec.sidecar.image},
      {"imagePullPolicy", job.spec.sidecar.image_pull_policy},
      {"restartPolicy", "Always"},  // A native sidecar: starts first, stops after the trainer.
      {"args", json::array({"--http-port", absl::StrCat(kSidecarMetricsPort)})},
      {"ports",
       json::array({{{"name", "coordinator"}, {"containerPort", job.spec.coordinator_port}},
                    {{"name", "metrics"}, {"containerPort", kSidecarMetricsPort}}})},
      {"readinessProbe",
       {{"httpGet", {{"path", "/readyz"}, {"port", kSidecarMetricsPort}}}, {"periodSeconds", 2}}},
      {"livenessProbe",
       {{"httpGet", {{"path", "/healthz"}, {"port", kSidecarMetricsPort}}}, {"periodSeconds", 10}}},
      {"resources", job.spec.sidecar.resources},
      {"securityContext",
       {{"runAsNonRoot", true},
        {"allowPrivilegeEscalation", false},
        {"readOnlyRootFilesystem", true},
        {"capabilities", {{"drop", json::array({"ALL"})}}},
        {"seccompProfile", {{"type", "RuntimeDefault"}}}}}};
  MergeEnv(sidecar, contract);
  AddMounts(sidecar);
  json init = spec.contains("initContainers") && spec["initContainers"].is_array()
                  ? spec["initContainers"]
                  : json::array();
  if (cohort_launches) {
    // Copies the static cohort-launch from the sidecar image into the shared directory, as
    // service meshes inject their binaries: the trainer's image needs nothing from Cohort.
    json install = {
        {"name", "cohort-launch-install"},
        {"image", job.spec.sidecar.image},
        {"imagePullPolicy", job.spec.sidecar.image_pull_policy},
        {"command", json::array({"cohort-launch", "--install", kLauncherPath})},
        {"resources", job.spec.sidecar.resources},
        {"volumeMounts", json::array({{{"name", "cohort-agent"}, {"mountPath", kAgentDir}}})},
        {"securityContext", sidecar["securityContext"]}};
    init.insert(init.begin(), install);
  }
  init.insert(init.begin(), sidecar);  // First, so the agent is up before other init work.
  spec["initContainers"] = init;

  json& volumes = spec["volumes"];
  if (!volumes.is_array()) volumes = json::array();
  volumes.push_back({{"name", "cohort-agent"}, {"emptyDir", json::object()}});
  volumes.push_back({{"name", "cohort-token"},
                     {"secret", {{"secretName", SecretName(job)}, {"defaultMode", 0444}}}});
  if (dshm) volumes.push_back(*dshm);

  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", metadata}, {"spec", spec}};
}

}  // namespace

}  // namespace cohort::op
