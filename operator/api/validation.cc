#include "operator/api/child_names.h"
#include "operator/api/distributed_job.h"

#include <initializer_list>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kube/json_fields.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

constexpr int32_t kMaxReplicas = 100'000;
constexpr int32_t kMaxSpares = 1'000;
// The highest spare number a name must leave room for (a job that loses a million spares).
constexpr int32_t kMaxSpareSequence = 999'999;

// A field's path for an error message, built the way Kubernetes' field.Path builds one (jobset's
// webhook: field.NewPath("spec").Child("failurePolicy").Index(i)) so that no path is spelled by
// hand: FieldPath("spec").Child("failurePolicy").Child("rules").Index(0).Child("action").String()
// is "spec.failurePolicy.rules[0].action".
class FieldPath {
 public:
  explicit FieldPath(std::string root) : path_(std::move(root)) {}

  FieldPath Child(absl::string_view name) const {
    return FieldPath(absl::StrCat(path_, ".", name));
  }
  FieldPath Index(size_t i) const { return FieldPath(absl::StrCat(path_, "[", i, "]")); }
  const std::string& String() const { return path_; }

 private:
  std::string path_;
};

FieldPath FailureRulePath(size_t i) {
  return FieldPath("spec").Child("failurePolicy").Child("rules").Index(i);
}

// Whether the parse found `field` itself unreadable (its spec_errors start "<field>:").
bool Unreadable(const DistributedJob& job, const FieldPath& field) {
  const std::string prefix = absl::StrCat(field.String(), ":");
  for (const std::string& e : job.spec_errors) {
    if (absl::StartsWith(e, prefix)) return true;
  }
  return false;
}

bool IsDns1035Label(const std::string& s) {
  if (s.empty() || s.size() > kMaxLabelLength) return false;
  if (!absl::ascii_islower(s.front()) || s.back() == '-') return false;
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  }
  return true;
}

// A DNS-1123 subdomain (a scheduler's name): at most 253 characters of lowercase letters, digits,
// '-' and '.', starting and ending alphanumeric.
bool IsDns1123Subdomain(const std::string& s) {
  if (s.empty() || s.size() > 253 || !absl::ascii_isalnum(s.front()) ||
      !absl::ascii_isalnum(s.back())) {
    return false;
  }
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) return false;
  }
  return true;
}

// A label value: at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric.
bool IsLabelValue(const std::string& s) {
  if (s.empty()) return true;
  if (s.size() > kMaxLabelLength || !absl::ascii_isalnum(s.front()) ||
      !absl::ascii_isalnum(s.back())) {
    return false;
  }
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
  }
  return true;
}

// spec.scheduling: what the pods name, so that Kueue and the gang scheduler find them.
void ValidateScheduling(const SchedulingSpec& scheduling, std::vector<std::string>& errors) {
  const FieldPath path = FieldPath("spec").Child("scheduling");
  if (!IsLabelValue(scheduling.queue_name)) {
    errors.push_back(absl::StrCat(
        path.Child("queueName").String(), ": '", scheduling.queue_name,
        "' must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending "
        "with a letter or digit): it names a Kueue LocalQueue"));
  }
  if (!scheduling.scheduler_name.empty() && !IsDns1123Subdomain(scheduling.scheduler_name)) {
    errors.push_back(absl::StrCat(
        path.Child("schedulerName").String(), ": '", scheduling.scheduler_name,
        "' is not a scheduler's name: a DNS subdomain (lowercase letters, digits, '-' and '.', at "
        "most 253 characters; e.g. volcano, scheduler-plugins-scheduler)"));
  }
}

// spec.scheduling.podGroup: the gang's admission, checked only when a provider makes a PodGroup.
void ValidatePodGroup(const DistributedJobSpec& s, std::vector<std::string>& errors) {
  const PodGroupSpec& g = s.scheduling.pod_group;
  if (g.provider == PodGroupProvider::kNone) return;
  const FieldPath path = FieldPath("spec").Child("scheduling").Child("podGroup");
  if (g.min_member && (*g.min_member < 1 || *g.min_member > s.replicas + s.spares)) {
    errors.push_back(absl::StrCat(path.Child("minMember").String(),
                                  ": must be between 1 and replicas",
                                  s.spares > 0 ? " + spares (" : " (", s.replicas + s.spares,
                                  "), got ", *g.min_member, "; unset, it is every pod"));
  }
  const std::string timeout = path.Child("scheduleTimeoutSeconds").String();
  if (g.schedule_timeout_seconds < 1) {
    errors.push_back(
        absl::StrCat(timeout, ": must be at least 1 (got ", g.schedule_timeout_seconds, ")"));
  }
  if (g.schedule_timeout_set && g.provider != PodGroupProvider::kCoscheduling) {
    errors.push_back(absl::StrCat(
        timeout, ": only provider coscheduling has it (its PodGroup's scheduleTimeoutSeconds); ",
        g.provider == PodGroupProvider::kVolcano ? "Volcano's" : "Kubernetes'",
        " PodGroup waits until its pods are placed: remove the field"));
  }
}

// metadata.name names the job's Service and, with an index, each pod; spec.replicas bounds the
// index.
void ValidateNameAndReplicas(const DistributedJob& job, std::vector<std::string>& errors) {
  const FieldPath name = FieldPath("metadata").Child("name");
  const int32_t replicas = job.spec.replicas;
  if (!IsDns1035Label(job.name)) {
    errors.push_back(absl::StrCat(
        name.String(), ": '", job.name,
        "' must be a DNS label (lowercase letters, digits and '-', starting with a letter, at most "
        "63 characters): it names the job's Service"));
  } else if (replicas >= 1) {
    std::string last_pod = absl::StrCat(job.name, "-", replicas - 1);
    if (last_pod.size() > kMaxLabelLength) {
      errors.push_back(absl::StrCat(name.String(), ": pod name '", last_pod,
                                    "' is longer than 63 characters; use a shorter job name"));
    }
  }
  if (replicas < 1 || replicas > kMaxReplicas) {
    errors.push_back(absl::StrCat(FieldPath("spec").Child("replicas").String(),
                                  ": must be between 1 and ", kMaxReplicas, " (got ", replicas,
                                  ")"));
  }
}

// spec.spares: hot spares need an in-place restart, and names that fit a label.
void ValidateSpares(const DistributedJob& job, std::vector<std::string>& errors) {
  const DistributedJobSpec& s = job.spec;
  const std::string spares = FieldPath("spec").Child("spares").String();
  if (s.spares < 0 || s.spares > kMaxSpares) {
    errors.push_back(
        absl::StrCat(spares, ": must be between 0 and ", kMaxSpares, " (got ", s.spares, ")"));
    return;
  }
  if (s.spares == 0) return;
  // A spare takes a slot when the gang restarts in place: the pods that stay restart their
  // processes, the spare's cohort-launch runs the slot's.
  if (!RestartsInPlace(s)) {
    errors.push_back(absl::StrCat(
        spares, ": ", s.spares,
        " spares need the gang to restart in place (a spare takes a lost pod's slot in the next "
        "attempt while the other pods stay): set spec.restartStrategy: InPlace and a command for "
        "the trainer (spec.template.spec.containers[0].command), or remove spec.spares"));
  }
  if (IsDns1035Label(job.name) && SparePodName(job, kMaxSpareSequence).size() > kMaxLabelLength) {
    errors.push_back(absl::StrCat(
        FieldPath("metadata").Child("name").String(), ": spare pods are named '",
        SparePodName(job, 0),
        "' onwards, and such names must stay within 63 characters: use a name of at most ",
        kMaxLabelLength - SparePodName(job, kMaxSpareSequence).size() + job.name.size(),
        " characters"));
  }
}

// spec.processesPerPod. Returns whether the count can be used: the trainer's command check
// (ValidateContainer) needs a usable one.
bool ValidateProcessesPerPod(const DistributedJob& job, std::vector<std::string>& errors) {
  const DistributedJobSpec& s = job.spec;
  const std::string path = FieldPath("spec").Child("processesPerPod").String();
  if (!s.processes_per_pod_auto &&
      (s.processes_per_pod < 1 || s.processes_per_pod > kMaxProcessesPerPod)) {
    errors.push_back(absl::StrCat(path, ": must be between 1 and ", kMaxProcessesPerPod,
                                  ", or \"auto\" (got ", s.processes_per_pod, ")"));
    return false;
  }
  if (s.replicas >= 1 && TotalProcesses(job) > kMaxReplicas) {
    errors.push_back(absl::StrCat(path, ": replicas x processesPerPod = ", TotalProcesses(job),
                                  " processes; a job may have at most ", kMaxReplicas));
    return false;
  }
  return true;
}

// spec.coordinatorPort (and the two ports after it) and spec.maxRestarts.
void ValidatePortAndRestarts(const DistributedJobSpec& s, std::vector<std::string>& errors) {
  const FieldPath spec("spec");
  if (s.coordinator_port < 1 || s.coordinator_port > 65533) {
    errors.push_back(absl::StrCat(spec.Child("coordinatorPort").String(),
                                  ": must be a port between 1 and 65533 (got ", s.coordinator_port,
                                  "); the next port is JAX's coordinator and the one after it "
                                  "PyTorch's MASTER_PORT"));
  }
  if (s.max_restarts < 0) {
    errors.push_back(absl::StrCat(spec.Child("maxRestarts").String(), ": must be 0 or more (got ",
                                  s.max_restarts, ")"));
  }
}

// The job's clocks: after it finished, while it runs, and until a rank counts as hung.
void ValidateTimeouts(const DistributedJobSpec& s, std::vector<std::string>& errors) {
  const FieldPath spec("spec");
  if (s.ttl_seconds_after_finished && *s.ttl_seconds_after_finished < 0) {
    errors.push_back(absl::StrCat(spec.Child("ttlSecondsAfterFinished").String(),
                                  ": must be 0 or more (got ", *s.ttl_seconds_after_finished, ")"));
  }
  if (s.active_deadline_seconds && *s.active_deadline_seconds < 1) {
    errors.push_back(absl::StrCat(spec.Child("activeDeadlineSeconds").String(),
                                  ": must be at least 1 (got ", *s.active_deadline_seconds, ")"));
  }
  if (s.hang_detection.timeout_seconds && *s.hang_detection.timeout_seconds < 0) {
    errors.push_back(absl::StrCat(
        spec.Child("hangDetection").Child("timeoutSeconds").String(), ": must be 0 or more (got ",
        *s.hang_detection.timeout_seconds,
        "); leave it out for the automatic timeout, or write 0 to turn hang detection off"));
  }
}

// spec.sidecar: what the operator injects into every pod.
void ValidateSidecar(const SidecarSpec& sidecar, std::vector<std::string>& errors) {
  const FieldPath path = FieldPath("spec").Child("sidecar");
  if (sidecar.image.empty()) {
    errors.push_back(absl::StrCat(path.Child("image").String(), ": must not be empty"));
  }
  if (sidecar.heartbeat_timeout < absl::Milliseconds(100)) {
    errors.push_back(absl::StrCat(path.Child("heartbeatTimeout").String(),
                                  ": must be at least 100ms (got ",
                                  absl::FormatDuration(sidecar.heartbeat_timeout), ")"));
  }
}

// spec.failurePolicy.rules: each rule's matchers. The containers they name are checked with the
// template (ValidateExitCodeContainers).
void ValidateFailureRules(const std::vector<FailureRule>& rules, std::vector<std::string>& errors) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const FailureRule& r = rules[i];
    const FieldPath path = FailureRulePath(i);
    if (!r.on_exit_codes && r.on_pod_conditions.empty() && r.on_termination_reasons.empty()) {
      errors.push_back(absl::StrCat(path.String(),
                                    ": needs a matcher: onExitCodes, onPodConditions or "
                                    "onTerminationReasons (a rule without one would "
                                    "match every failure)"));
    }
    if (r.on_exit_codes && r.on_exit_codes->values.empty()) {
      errors.push_back(absl::StrCat(path.Child("onExitCodes").Child("values").String(),
                                    ": must list at least one exit code"));
    }
    for (size_t c = 0; c < r.on_pod_conditions.size(); ++c) {
      const PodConditionMatcher& m = r.on_pod_conditions[c];
      const FieldPath condition = path.Child("onPodConditions").Index(c);
      if (m.type.empty()) {
        errors.push_back(
            absl::StrCat(condition.Child("type").String(), ": required, e.g. DisruptionTarget"));
      }
      if (m.status != "True" && m.status != "False" && m.status != "Unknown") {
        errors.push_back(absl::StrCat(condition.Child("status").String(),
                                      ": must be True, False or Unknown (got '", m.status, "')"));
      }
    }
    for (size_t k = 0; k < r.on_termination_reasons.size(); ++k) {
      if (r.on_termination_reasons[k].empty()) {
        errors.push_back(absl::StrCat(path.Child("onTerminationReasons").Index(k).String(),
                                      ": must not be empty"));
      }
    }
  }
}

// The labels and annotations the pods get: maps of strings (the API server refuses anything else
// when the pod is created, long after the job was accepted).
void ValidateTemplateMetadata(const json& tmpl, const FieldPath& metadata,
                              std::vector<std::string>& errors) {
  for (const char* key : {"labels", "annotations"}) {
    const json& map = kube::Member(tmpl, "metadata", key);
    if (map.is_null()) continue;
    const FieldPath path = metadata.Child(key);
    if (!map.is_object()) {
      errors.push_back(
          absl::StrCat(path.String(), ": expected a map of strings, got ", map.dump()));
      continue;
    }
    for (const auto& [k, v] : map.items()) {
      if (!v.is_string()) {
        errors.push_back(absl::StrCat(path.Child(k).String(), ": ", v.dump(),
                                      " is not a string; put the value in quotes"));
      }
    }
  }
}

// A container's env: a list of {name, value} whose values are strings (what the API server
// accepts when it creates the pod).
void ValidateEnv(const json& env, const FieldPath& path, std::vector<std::string>& errors) {
  if (!env.is_array()) {
    errors.push_back(
        absl::StrCat(path.String(), ": expected a list of {name, value}, got ", env.dump()));
    return;
  }
  for (size_t e = 0; e < env.size(); ++e) {
    if (!env[e].is_object() || !kube::Member(env[e], "name").is_string() ||
        kube::StringMember(env[e], "name").empty()) {
      errors.push_back(
          absl::StrCat(path.Index(e).String(), ": needs a name (a string), got ", env[e].dump()));
    } else if (const json& v = kube::Member(env[e], "value"); !v.is_null() && !v.is_string()) {
      errors.push_back(absl::StrCat(path.Index(e).Child("value").String(), ": ", v.dump(),
                                    " is not a string; put the value in quotes"));
    }
  }
}

// The template's container `i` (at `path`): its name, image and env, and, for the trainer (the
// first), the command when Cohort starts several processes of it.
void ValidateContainer(const DistributedJob& job, const json& c, size_t i, const FieldPath& path,
                       bool processes_per_pod_ok, std::vector<std::string>& errors) {
  if (!c.is_object() || !c.contains("name") || !c["name"].is_string() ||
      c["name"].get<std::string>().empty()) {
    errors.push_back(absl::StrCat(path.Child("name").String(), ": required"));
  } else if (c["name"] == "cohort-sidecar") {
    errors.push_back(absl::StrCat(path.Child("name").String(),
                                  ": 'cohort-sidecar' is reserved for the injected sidecar"));
  }
  if (!c.is_object() || !c.contains("image") || !c["image"].is_string() ||
      c["image"].get<std::string>().empty()) {
    errors.push_back(absl::StrCat(path.Child("image").String(), ": required"));
  }
  if (const json& env = kube::Member(c, "env"); !env.is_null()) {
    ValidateEnv(env, path.Child("env"), errors);
  }
  const bool cohort_launches = job.spec.launcher == Launcher::kCohort && i == 0 &&
                               processes_per_pod_ok && ResolvedProcessesPerPod(job) > 1;
  if (cohort_launches && c.is_object() &&
      (!c.contains("command") || !c["command"].is_array() || c["command"].empty())) {
    errors.push_back(absl::StrCat(
        path.Child("command").String(), ": required when Cohort starts ",
        ResolvedProcessesPerPod(job),
        " processes per pod (Kubernetes cannot know an image's entrypoint): write the program to "
        "run, e.g. command: [\"python\", \"train.py\"], or set spec.launcher: Torchrun when the "
        "command starts the pod's processes itself"));
  }
}

// The template's containers, the trainer first. Returns them, or null when the pod spec has no
// list of them.
const json* ValidateContainers(const DistributedJob& job, const json& pod, const FieldPath& path,
                               bool processes_per_pod_ok, std::vector<std::string>& errors) {
  const json* containers = nullptr;
  if (pod.contains("containers") && pod["containers"].is_array()) containers = &pod["containers"];
  if (containers == nullptr || containers->empty()) {
    errors.push_back(
        absl::StrCat(path.String(), ": must list at least one container (the trainer)"));
    return containers;
  }
  for (size_t i = 0; i < containers->size(); ++i) {
    ValidateContainer(job, (*containers)[i], i, path.Index(i), processes_per_pod_ok, errors);
  }
  return containers;
}

// A rule's onExitCodes.containerName must name one of the template's `containers`.
void ValidateExitCodeContainers(const std::vector<FailureRule>& rules, const json& containers,
                                std::vector<std::string>& errors) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::optional<ExitCodesMatcher>& m = rules[i].on_exit_codes;
    if (!m || m->container_name.empty()) continue;
    bool found = false;
    for (const json& c : containers) found |= kube::StringMember(c, "name") == m->container_name;
    if (!found) {
      errors.push_back(
          absl::StrCat(FailureRulePath(i).Child("onExitCodes").Child("containerName").String(),
                       ": '", m->container_name,
                       "' is not a container of spec.template (leave it out for the trainer, the "
                       "first container)"));
    }
  }
}

// spec.template: the pod template every pod of the job is made from.
void ValidateTemplate(const DistributedJob& job, bool processes_per_pod_ok,
                      std::vector<std::string>& errors) {
  const json& tmpl = job.spec.pod_template;
  const FieldPath path = FieldPath("spec").Child("template");
  if (!tmpl.is_object() || !tmpl.contains("spec") || !tmpl["spec"].is_object()) {
    errors.push_back(absl::StrCat(
        path.String(), ": required: a pod template whose spec has the trainer container"));
    return;
  }
  const json& pod = tmpl["spec"];
  ValidateTemplateMetadata(tmpl, path.Child("metadata"), errors);
  const json* containers = ValidateContainers(job, pod, path.Child("spec").Child("containers"),
                                              processes_per_pod_ok, errors);
  if (containers != nullptr) {
    ValidateExitCodeContainers(job.spec.failure_rules, *containers, errors);
  }
  if (pod.contains("restartPolicy") && pod["restartPolicy"] != "Never") {
    errors.push_back(absl::StrCat(path.Child("spec").Child("restartPolicy").String(),
                                  ": must be Never or unset (got ", pod["restartPolicy"].dump(),
                                  "): the operator restarts the whole gang itself"));
  }
}

// spec.hangPolicy: hangs are found by the attempt hub's detector, which only a gang that restarts
// in place has (the operator follows the hub of InPlace jobs), so Restart and Fail would do nothing
// with restartStrategy Recreate. A job that already started keeps running: the CRD used to default
// hangPolicy to Restart for every job, so a Recreate job created then carries it unasked.
void ValidateHangPolicy(const DistributedJob& job, std::vector<std::string>& errors) {
  const DistributedJobSpec& s = job.spec;
  if (s.restart_strategy != RestartStrategy::kRecreate || !s.hang_policy_set ||
      s.hang_policy == HangPolicy::kAlert || !job.status.start_time.empty()) {
    return;
  }
  errors.push_back(absl::StrCat(
      FieldPath("spec").Child("hangPolicy").String(), ": ", HangPolicyName(s.hang_policy),
      " needs spec.restartStrategy: InPlace (hangs are found by the attempt hub of a gang that "
      "restarts in place; with Recreate nothing would detect one): set spec.restartStrategy: "
      "InPlace, or remove spec.hangPolicy"));
}

// spec.replicas of a job that runs without spec.elastic: its processes' world was fixed at its
// start (every pod's environment), so another size is refused, naming the ways to get one.
void ValidateResize(const DistributedJob& job, std::vector<std::string>& errors) {
  const DistributedJobStatus& st = job.status;
  if (job.spec.elastic || st.start_time.empty() || st.replicas == 0 ||
      st.replicas == job.spec.replicas) {
    return;
  }
  errors.push_back(absl::StrCat(
      FieldPath("spec").Child("replicas").String(), ": ", job.spec.replicas,
      " is not the size the running job started at (", st.replicas,
      "): a job without spec.elastic keeps its size; set replicas back to ", st.replicas,
      ", add spec.elastic to resize it at a common step (kubectl scale), or delete and create it "
      "anew"));
}

// spec.elastic: whole replica groups between minReplicas and replicas, restarting in place (a
// resize is an in-place restart at a common step), and not where the job's shape is fixed by
// something else: torchrun's own rendezvous, or a gang scheduler's admission.
void ValidateElastic(const DistributedJob& job, std::vector<std::string>& errors) {
  const DistributedJobSpec& s = job.spec;
  if (!s.elastic) return;
  const ElasticSpec& e = *s.elastic;
  const FieldPath elastic = FieldPath("spec").Child("elastic");
  const std::string group = elastic.Child("podsPerGroup").String();
  const std::string min = elastic.Child("minReplicas").String();
  if (e.pods_per_group < 1 || e.pods_per_group > kMaxReplicas) {
    errors.push_back(absl::StrCat(group, ": must be between 1 and ", kMaxReplicas, " (got ",
                                  e.pods_per_group, ")"));
  } else if (s.replicas % e.pods_per_group != 0) {
    errors.push_back(absl::StrCat(
        FieldPath("spec").Child("replicas").String(), ": ", s.replicas,
        " is not a whole number of replica groups of ", e.pods_per_group,
        " pods (spec.elastic.podsPerGroup): make replicas a multiple of podsPerGroup"));
  }
  if (e.min_replicas < 1 || e.min_replicas > s.replicas) {
    errors.push_back(absl::StrCat(min, ": must be between 1 and spec.replicas (", s.replicas,
                                  ") (got ", e.min_replicas, ")"));
  } else if (e.pods_per_group >= 1 && e.min_replicas % e.pods_per_group != 0) {
    errors.push_back(absl::StrCat(min, ": ", e.min_replicas,
                                  " is not a whole number of replica groups of ", e.pods_per_group,
                                  " pods: make it a multiple of spec.elastic.podsPerGroup"));
  }
  if (e.shrink_after_seconds < 0) {
    errors.push_back(absl::StrCat(elastic.Child("shrinkAfterSeconds").String(),
                                  ": must be at least 0 (got ", e.shrink_after_seconds, ")"));
  }
  if (!RestartsInPlace(s)) {
    errors.push_back(absl::StrCat(
        elastic.String(),
        ": an elastic job resizes by restarting its processes in place (the pods that stay keep "
        "running): set spec.restartStrategy: InPlace and a command for the trainer "
        "(spec.template.spec.containers[0].command), or remove spec.elastic"));
  }
  if (s.launcher == Launcher::kTorchrun) {
    errors.push_back(absl::StrCat(
        elastic.String(),
        ": not with spec.launcher: Torchrun (torchrun fixes its nodes at its own rendezvous); use "
        "launcher: Cohort, whose ranks follow each resize, or remove spec.elastic"));
  }
  if (GangScheduled(s)) {
    errors.push_back(absl::StrCat(
        elastic.String(),
        ": not with spec.scheduling's queueName or podGroup: a gang scheduler admits the whole "
        "group of pods once, so a lost pod cannot be replaced alone and growing back would need a "
        "new admission of every pod; remove one of them"));
  }
}

}  // namespace

// One function per area of the spec, called in the order their errors are reported: users fix
// them top down, and tests compare them by position.
std::vector<std::string> Validate(const DistributedJob& job) {
  std::vector<std::string> errors = job.spec_errors;
  ValidateScheduling(job.spec.scheduling, errors);
  ValidatePodGroup(job.spec, errors);
  ValidateNameAndReplicas(job, errors);
  ValidateSpares(job, errors);
  const bool processes_per_pod_ok = ValidateProcessesPerPod(job, errors);
  ValidatePortAndRestarts(job.spec, errors);
  ValidateTimeouts(job.spec, errors);
  ValidateSidecar(job.spec.sidecar, errors);
  ValidateFailureRules(job.spec.failure_rules, errors);
  ValidateHangPolicy(job, errors);
  ValidateElastic(job, errors);
  ValidateResize(job, errors);
  // A template that could not be read was reported already; "required" would only repeat it.
  const FieldPath spec("spec");
  if (!Unreadable(job, spec) && !Unreadable(job, spec.Child("template"))) {
    ValidateTemplate(job, processes_per_pod_ok, errors);
  }
  return errors;
}

}  // namespace cohort::op
