#include "operator/api/distributed_job.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/rfc3339.h"
#include "kube/json_fields.h"
#include "operator/api/child_names.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

// Reads an optional field of one JSON type into `out`. When the type is wrong, `out` keeps its
// default and the error (InvalidArgument) names the field, the value and how to write it.
template <typename T>
absl::Status ReadField(const json& parent, const char* key, const std::string& path, T* out) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) {
      *out = it->get<bool>();
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(path, key, ": expected true or false, got ",
                                                   it->dump(),
                                                   "; write true or false without quotes"));
  } else if constexpr (std::is_integral_v<T>) {
    // 4.0 is an integer too: clients that decode JSON numbers as floating point write it back so.
    double d = it->is_number() ? it->get<double>() : 0;
    if (it->is_number_integer() ||
        (it->is_number_float() && std::isfinite(d) && std::trunc(d) == d)) {
      bool in_range =
          it->is_number_unsigned()  ? it->get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()}
          : it->is_number_integer() ? it->get<int64_t>() >= std::numeric_limits<T>::min() &&
                                          it->get<int64_t>() <= std::numeric_limits<T>::max()
                                    // max() rounds up to 2^63 as a double (int64); -min() is exact.
                                    : d >= static_cast<double>(std::numeric_limits<T>::min()) &&
                                          d < -static_cast<double>(std::numeric_limits<T>::min());
      if (!in_range) {
        return absl::InvalidArgumentError(absl::StrCat(path, key, ": ", it->dump(),
                                                       " is out of range (at most ",
                                                       std::numeric_limits<T>::max(), ")"));
      }
      *out = it->is_number_float() ? static_cast<T>(d) : it->get<T>();
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, key, ": expected an integer, got ", it->dump(),
                     "; write a whole number without quotes, e.g. ", key, ": 4"));
  } else {
    if (it->is_string()) {
      *out = it->get<std::string>();
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(path, key, ": expected a string, got ",
                                                   it->dump(), "; put the value in quotes"));
  }
}

absl::Status ReadDuration(const json& parent, const char* key, const std::string& path,
                          absl::Duration* out) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number()) {
    *out = absl::Seconds(it->get<double>());
    return absl::OkStatus();
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, key, ": expected a duration like \"30s\", got ", it->dump()));
  }
  absl::StatusOr<absl::Duration> d = env::ParseDuration(it->get<std::string>());
  if (!d.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, key, ": ", d.status().message()));
  *out = *d;
  return absl::OkStatus();
}

// An array field, or null (absent, or not an array: noted).
const json* ArrayField(const json& parent, const char* key, const std::string& path,
                       const std::function<void(const absl::Status&)>& note) {
  auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return nullptr;
  if (it->is_array()) return &*it;
  note(absl::InvalidArgumentError(absl::StrCat(path, key, ": expected a list, got ", it->dump())));
  return nullptr;
}

// spec.failurePolicy: what can be read of each rule goes to `rules` (a rule whose action cannot
// be read is dropped); every problem is noted, naming the field.
void ParseFailureRules(const json& policy, std::vector<FailureRule>& rules,
                       const std::function<void(const absl::Status&)>& note) {
  const json* list = ArrayField(policy, "rules", "spec.failurePolicy.", note);
  if (list == nullptr) return;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = absl::StrCat("spec.failurePolicy.rules[", i, "].");
    const json& r = (*list)[i];
    if (!r.is_object()) {
      note(absl::InvalidArgumentError(absl::StrCat(
          path.substr(0, path.size() - 1), ": expected an object with an action, got ", r.dump())));
      continue;
    }
    FailureRule rule;
    std::string action;
    absl::Status st = ReadField(r, "action", path, &action);
    if (!st.ok()) {
      note(st);
      continue;
    }
    std::optional<FailureAction> parsed = ParseFailureAction(action);
    if (!parsed) {
      note(absl::InvalidArgumentError(absl::StrCat(
          path,
          "action: ", action.empty() ? "required" : absl::StrCat("'", action, "' is not an action"),
          "; write FailJob, RestartJob or RestartJobAndIgnoreMaxRestarts")));
      continue;
    }
    rule.action = *parsed;
    if (auto it = r.find("onExitCodes"); it != r.end() && !it->is_null()) {
      const std::string ep = path + "onExitCodes.";
      if (!it->is_object()) {
        note(absl::InvalidArgumentError(absl::StrCat(
            path, "onExitCodes: expected an object {operator: In or NotIn, values: [...]}, got ",
            it->dump())));
      } else {
        ExitCodesMatcher m;
        std::string op;
        note(ReadField(*it, "containerName", ep, &m.container_name));
        absl::Status ops = ReadField(*it, "operator", ep, &op);
        note(ops);
        if (ops.ok() && op != "In" && op != "NotIn") {
          note(absl::InvalidArgumentError(absl::StrCat(
              ep,
              "operator: ", op.empty() ? "required" : absl::StrCat("'", op, "' is not an operator"),
              "; write In or NotIn")));
        }
        m.in = op != "NotIn";
        if (const json* values = ArrayField(*it, "values", ep, note)) {
          for (size_t v = 0; v < values->size(); ++v) {
            const json& code = (*values)[v];
            // 3.0 is 3 too (clients that decode JSON numbers as floating point write it so).
            const double d = code.is_number() ? code.get<double>() : -1;
            if (code.is_number() && std::trunc(d) == d && d >= 0 && d <= 255) {
              m.values.push_back(static_cast<int32_t>(d));
            } else {
              note(absl::InvalidArgumentError(
                  absl::StrCat(ep, "values[", v, "]: ", code.dump(),
                               " is not an exit code (a whole number from 0 to 255)")));
            }
          }
        }
        rule.on_exit_codes = std::move(m);
      }
    }
    if (const json* conditions = ArrayField(r, "onPodConditions", path, note)) {
      for (size_t c = 0; c < conditions->size(); ++c) {
        const std::string cp = absl::StrCat(path, "onPodConditions[", c, "].");
        const json& cond = (*conditions)[c];
        if (!cond.is_object()) {
          note(absl::InvalidArgumentError(absl::StrCat(cp.substr(0, cp.size() - 1),
                                                       ": expected an object {type, status}, got ",
                                                       cond.dump())));
          continue;
        }
        PodConditionMatcher m;
        note(ReadField(cond, "type", cp, &m.type));
        note(ReadField(cond, "status", cp, &m.status));
        rule.on_pod_conditions.push_back(std::move(m));
      }
    }
    if (const json* reasons = ArrayField(r, "onTerminationReasons", path, note)) {
      for (size_t k = 0; k < reasons->size(); ++k) {
        if ((*reasons)[k].is_string()) {
          rule.on_termination_reasons.push_back((*reasons)[k].get<std::string>());
        } else {
          note(absl::InvalidArgumentError(absl::StrCat(path, "onTerminationReasons[", k,
                                                       "]: ", (*reasons)[k].dump(),
                                                       " is not a reason; write e.g. OOMKilled")));
        }
      }
    }
    rules.push_back(std::move(rule));
  }
}

// Reads the string field `name` of `obj` (its path: `path` + `name`) as one of `values`, into
// `out`; absent or null leaves `out` as it is, unless `required` (then it reads as ""). A
// spelling not among them is InvalidArgument: "<path><name>: '<text>' is not <what>; write <hint>".
template <typename E>
absl::Status ReadEnum(const json& obj, const char* name, const std::string& path,
                      std::initializer_list<std::pair<const char*, E>> values, const char* what,
                      const char* hint, E* out, bool required = false) {
  auto it = obj.find(name);
  std::string text;
  if (it == obj.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
  } else if (absl::Status st = ReadField(obj, name, path, &text); !st.ok()) {
    return st;
  }
  for (const auto& [spelling, value] : values) {
    if (text == spelling) {
      *out = value;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, name, ": '", text, "' is not ", what, "; write ", hint));
}

}  // namespace

std::optional<TopologyRequest> SpareTopology(const DistributedJob& job) {
  const json& annotations = kube::Member(job.spec.pod_template, "metadata", "annotations");
  for (const auto& [key, required] : {std::pair{kKueueRequiredTopologyAnnotation, true},
                                      std::pair{kKueuePreferredTopologyAnnotation, false}}) {
    if (std::string label = kube::StringMember(annotations, key); !label.empty())
      return TopologyRequest{label, required};
  }
  return std::nullopt;
}

bool RestartsInPlace(const DistributedJobSpec& spec) {
  if (spec.restart_strategy != RestartStrategy::kInPlace) return false;
  const json& containers = kube::Member(spec.pod_template, "spec", "containers");
  if (!containers.is_array() || containers.empty()) return false;
  const json& command = kube::Member(containers[0], "command");
  return command.is_array() && !command.empty();
}

bool GangScheduled(const DistributedJobSpec& spec) {
  return !spec.scheduling.queue_name.empty() ||
         spec.scheduling.pod_group.provider != PodGroupProvider::kNone;
}

std::string TrainerName(const DistributedJob& job) {
  const json& containers = kube::Member(job.spec.pod_template, "spec", "containers");
  if (!containers.is_array() || containers.empty()) return "";
  return kube::StringMember(containers[0], "name");
}

int64_t TrainerGpuLimit(const DistributedJob& job) {
  const json& containers = kube::Member(job.spec.pod_template, "spec", "containers");
  if (!containers.is_array() || containers.empty()) return 0;
  const json& gpus = kube::Member(containers[0], "resources", "limits", "nvidia.com/gpu");
  int64_t n = 0;
  if (gpus.is_number_integer()) n = gpus.get<int64_t>();
  if (gpus.is_string() && !absl::SimpleAtoi(gpus.get<std::string>(), &n)) n = 0;
  return std::max<int64_t>(n, 0);
}

int32_t ResolvedProcessesPerPod(const DistributedJob& job) {
  if (!job.spec.processes_per_pod_auto) return job.spec.processes_per_pod;
  int64_t gpus = TrainerGpuLimit(job);
  return gpus >= 1 ? static_cast<int32_t>(std::min<int64_t>(gpus, kMaxProcessesPerPod)) : 1;
}

int64_t TotalProcesses(const DistributedJob& job) {
  return int64_t{job.spec.replicas} * ResolvedProcessesPerPod(job);
}

int32_t DesiredReplicaGroups(const DistributedJobSpec& spec) {
  if (!spec.elastic || spec.elastic->pods_per_group < 1) return 0;
  return spec.replicas / spec.elastic->pods_per_group;
}

const char* FailureActionName(FailureAction action) {
  switch (action) {
    case FailureAction::kFailJob:
      return "FailJob";
    case FailureAction::kRestartJob:
      return "RestartJob";
    case FailureAction::kRestartJobAndIgnoreMaxRestarts:
      return "RestartJobAndIgnoreMaxRestarts";
  }
  return "RestartJob";
}

std::optional<FailureAction> ParseFailureAction(const std::string& name) {
  for (FailureAction a : {FailureAction::kFailJob, FailureAction::kRestartJob,
                          FailureAction::kRestartJobAndIgnoreMaxRestarts}) {
    if (name == FailureActionName(a)) return a;
  }
  return std::nullopt;
}

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPending:
      return "Pending";
    case Phase::kRunning:
      return "Running";
    case Phase::kRestarting:
      return "Restarting";
    case Phase::kSucceeded:
      return "Succeeded";
    case Phase::kFailed:
      return "Failed";
    case Phase::kSuspended:
      return "Suspended";
  }
  return "Pending";
}

std::optional<Phase> ParsePhase(const std::string& name) {
  for (Phase p : {Phase::kPending, Phase::kRunning, Phase::kRestarting, Phase::kSucceeded,
                  Phase::kFailed, Phase::kSuspended}) {
    if (name == PhaseName(p)) return p;
  }
  return std::nullopt;
}

absl::StatusOr<DistributedJob> ParseDistributedJob(const json& object) {
  if (!object.is_object())
    return absl::InvalidArgumentError("a DistributedJob must be a JSON object");
  DistributedJob job;
  const json& meta = object.contains("metadata") ? object["metadata"] : json::object();
  if (!meta.is_object()) return absl::InvalidArgumentError("metadata: expected an object");
  for (auto [key, out] :
       {std::pair{"name", &job.name}, std::pair{"namespace", &job.namespace_},
        std::pair{"uid", &job.uid}, std::pair{"resourceVersion", &job.resource_version}}) {
    if (absl::Status s = ReadField(meta, key, "metadata.", out); !s.ok()) return s;
  }
  if (job.name.empty()) return absl::InvalidArgumentError("metadata.name: required");
  if (absl::Status s = ReadField(meta, "generation", "metadata.", &job.generation); !s.ok())
    return s;
  job.being_deleted = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  if (meta.contains("creationTimestamp") && meta["creationTimestamp"].is_string()) {
    if (std::optional<absl::Time> at = ParseRfc3339(meta["creationTimestamp"].get<std::string>())) {
      job.created_at = *at;
    }
  }

  // From here on a problem is the user's to fix: it goes to spec_errors and the parse goes on.
  auto note = [&job](const absl::Status& s) {
    if (!s.ok()) job.spec_errors.emplace_back(s.message());
  };
  // An object field of the spec, or null (absent, or not an object: noted).
  auto object_field = [&](const json& parent, const char* key, const std::string& path,
                          const char* what) -> const json* {
    auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return nullptr;
    if (it->is_object()) return &*it;
    note(absl::InvalidArgumentError(
        absl::StrCat(path, key, ": expected an object", what, ", got ", it->dump())));
    return nullptr;
  };
  static const json kNoFields = json::object();
  const json* spec_ptr = object_field(object, "spec", "", "");
  const json& spec = spec_ptr != nullptr ? *spec_ptr : kNoFields;
  DistributedJobSpec& s = job.spec;
  const std::string p = "spec.";
  for (absl::Status st :
       {ReadField(spec, "replicas", p, &s.replicas), ReadField(spec, "spares", p, &s.spares),
        ReadField(spec, "coordinatorPort", p, &s.coordinator_port),
        ReadField(spec, "maxRestarts", p, &s.max_restarts),
        ReadDuration(spec, "restartBackoff", p, &s.restart_backoff),
        ReadField(spec, "suspend", p, &s.suspend)}) {
    note(st);
  }
  for (auto [key, out] : {std::pair{"ttlSecondsAfterFinished", &s.ttl_seconds_after_finished},
                          std::pair{"activeDeadlineSeconds", &s.active_deadline_seconds}}) {
    int64_t v = 0;
    if (spec.contains(key) && !spec[key].is_null()) {
      absl::Status st = ReadField(spec, key, p, &v);
      note(st);
      if (st.ok()) *out = v;
    }
  }
  if (auto it = spec.find("processesPerPod"); it != spec.end() && !it->is_null()) {
    // int-or-string: a whole number, or "auto".
    if (it->is_string() && it->get<std::string>() == "auto") {
      s.processes_per_pod_auto = true;
    } else if (it->is_string()) {
      int32_t n = 0;
      if (absl::SimpleAtoi(it->get<std::string>(), &n)) {
        s.processes_per_pod = n;
      } else {
        note(absl::InvalidArgumentError(absl::StrCat(
            "spec.processesPerPod: ", it->dump(),
            " is neither a whole number nor \"auto\"; write e.g. processesPerPod: 8, or "
            "processesPerPod: auto for one process per GPU of the trainer's nvidia.com/gpu "
            "limit")));
      }
    } else {
      note(ReadField(spec, "processesPerPod", p, &s.processes_per_pod));
    }
  }
  note(ReadEnum(
      spec, "launcher", p, {{"Cohort", Launcher::kCohort}, {"Torchrun", Launcher::kTorchrun}},
      "a launcher",
      "Cohort (Cohort starts processesPerPod copies of the command) or Torchrun (the command, "
      "torchrun, starts them)",
      &s.launcher));
  note(ReadEnum(spec, "restartStrategy", p,
                {{"InPlace", RestartStrategy::kInPlace}, {"Recreate", RestartStrategy::kRecreate}},
                "a restart strategy",
                "InPlace (restart every pod's processes, keep the pods) or Recreate (delete and "
                "create every pod)",
                &s.restart_strategy));
  note(ReadEnum(spec, "hangPolicy", p,
                {{"Restart", HangPolicy::kRestart},
                 {"Fail", HangPolicy::kFail},
                 {"Alert", HangPolicy::kAlert}},
                "a hang policy",
                "Restart (restart the gang, counted against maxRestarts), Fail (the job fails) or "
                "Alert (say so "
                "and keep running)",
                &s.hang_policy));
  s.hang_policy_set = spec.contains("hangPolicy") && !spec["hangPolicy"].is_null();
  if (const json* hang = object_field(spec, "hangDetection", p, " with timeoutSeconds")) {
    if (hang->contains("timeoutSeconds") && !(*hang)["timeoutSeconds"].is_null()) {
      int64_t seconds = 0;
      absl::Status st = ReadField(*hang, "timeoutSeconds", "spec.hangDetection.", &seconds);
      note(st);
      if (st.ok()) s.hang_detection.timeout_seconds = seconds;
    }
  }
  if (const json* tmpl = object_field(spec, "template", p, " (a pod template)"))
    s.pod_template = *tmpl;
  if (const json* scheduling = object_field(spec, "scheduling", p, "")) {
    const std::string sp = "spec.scheduling.";
    note(ReadField(*scheduling, "queueName", sp, &s.scheduling.queue_name));
    note(ReadField(*scheduling, "schedulerName", sp, &s.scheduling.scheduler_name));
    if (const json* group = object_field(*scheduling, "podGroup", sp, "")) {
      const std::string gp = "spec.scheduling.podGroup.";
      note(ReadEnum(*group, "provider", gp,
                    {{"coscheduling", PodGroupProvider::kCoscheduling},
                     {"volcano", PodGroupProvider::kVolcano},
                     {"workload", PodGroupProvider::kWorkload}},
                    "a provider",
                    "coscheduling (scheduler-plugins), volcano or workload (Kubernetes' "
                    "scheduling.k8s.io PodGroup)",
                    &s.scheduling.pod_group.provider, /*required=*/true));
      int32_t min_member = 0;
      if (group->contains("minMember") && !(*group)["minMember"].is_null()) {
        absl::Status m = ReadField(*group, "minMember", gp, &min_member);
        note(m);
        if (m.ok()) s.scheduling.pod_group.min_member = min_member;
      }
      s.scheduling.pod_group.schedule_timeout_set = group->contains("scheduleTimeoutSeconds") &&
                                                    !(*group)["scheduleTimeoutSeconds"].is_null();
      note(ReadField(*group, "scheduleTimeoutSeconds", gp,
                     &s.scheduling.pod_group.schedule_timeout_seconds));
    }
  }
  if (const json* sc = object_field(spec, "sidecar", p, "")) {
    const std::string sp = "spec.sidecar.";
    for (absl::Status st :
         {ReadField(*sc, "image", sp, &s.sidecar.image),
          ReadField(*sc, "imagePullPolicy", sp, &s.sidecar.image_pull_policy),
          ReadDuration(*sc, "heartbeatTimeout", sp, &s.sidecar.heartbeat_timeout)}) {
      note(st);
    }
    if (const json* r = object_field(*sc, "resources", sp, " (a ResourceRequirements)"))
      s.sidecar.resources = *r;
  }
  if (const json* elastic = object_field(spec, "elastic", p, " with minReplicas")) {
    ElasticSpec e;
    const std::string ep = "spec.elastic.";
    note(ReadField(*elastic, "minReplicas", ep, &e.min_replicas));
    note(ReadField(*elastic, "podsPerGroup", ep, &e.pods_per_group));
    note(ReadField(*elastic, "shrinkAfterSeconds", ep, &e.shrink_after_seconds));
    if (!elastic->contains("minReplicas") || (*elastic)["minReplicas"].is_null()) {
      e.min_replicas = std::max(e.pods_per_group, 1);  // Only the one error below.
      note(absl::InvalidArgumentError(
          "spec.elastic.minReplicas: required: the fewest pods the job runs with, e.g. "
          "minReplicas: 2"));
    }
    s.elastic = e;
  }
  if (const json* policy = object_field(spec, "failurePolicy", p, " with rules")) {
    ParseFailureRules(*policy, s.failure_rules, note);
  }

  const json& status = object.contains("status") ? object["status"] : json::object();
  if (status.is_object()) {
    DistributedJobStatus& st = job.status;
    std::string phase;
    ReadField(status, "phase", "status.", &phase).IgnoreError();
    st.phase = ParsePhase(phase).value_or(Phase::kPending);
    for (auto [key, out] :
         {std::pair{"replicas", &st.replicas}, std::pair{"ready", &st.ready},
          std::pair{"active", &st.active}, std::pair{"succeeded", &st.succeeded},
          std::pair{"failed", &st.failed}, std::pair{"restarts", &st.restarts},
          std::pair{"preemptions", &st.preemptions},
          std::pair{"uncountedRestarts", &st.uncounted_restarts},
          std::pair{"restartAttempt", &st.restart_attempt}, std::pair{"spares", &st.spares},
          std::pair{"readySpares", &st.ready_spares},
          std::pair{"replicaGroups", &st.replica_groups},
          std::pair{"sparesCreated", &st.spares_created}}) {
      ReadField(status, key, "status.", out).IgnoreError();
    }
    ReadField(status, "observedGeneration", "status.", &st.observed_generation).IgnoreError();
    ReadField(status, "lastHangId", "status.", &st.last_hang_id).IgnoreError();
    if (status.contains("slots") && status["slots"].is_array()) {
      for (const json& slot : status["slots"]) {
        int32_t index = 0;
        std::string pod;
        if (slot.is_object() && ReadField(slot, "podIndex", "status.slots.", &index).ok() &&
            ReadField(slot, "pod", "status.slots.", &pod).ok()) {
          st.slots[index] = pod;
        }
      }
    }
    if (status.contains("droppedReplicaGroups") && status["droppedReplicaGroups"].is_array()) {
      for (const json& g : status["droppedReplicaGroups"]) {
        if (g.is_number_integer()) st.dropped_replica_groups.push_back(g.get<int32_t>());
      }
    }
    ReadField(status, "coordinatorAddress", "status.", &st.coordinator_address).IgnoreError();
    ReadField(status, "lastRestartKind", "status.", &st.last_restart_kind).IgnoreError();
    ReadField(status, "lastRestartStrategy", "status.", &st.last_restart_strategy).IgnoreError();
    ReadField(status, "startTime", "status.", &st.start_time).IgnoreError();
    ReadField(status, "completionTime", "status.", &st.completion_time).IgnoreError();
    if (status.contains("conditions") && status["conditions"].is_array()) {
      for (const json& c : status["conditions"]) {
        if (!c.is_object()) continue;
        Condition cond;
        ReadField(c, "type", "", &cond.type).IgnoreError();
        ReadField(c, "status", "", &cond.status).IgnoreError();
        ReadField(c, "reason", "", &cond.reason).IgnoreError();
        ReadField(c, "message", "", &cond.message).IgnoreError();
        ReadField(c, "lastTransitionTime", "", &cond.last_transition_time).IgnoreError();
        ReadField(c, "observedGeneration", "", &cond.observed_generation).IgnoreError();
        st.conditions.push_back(std::move(cond));
      }
    }
  }
  return job;
}

json StatusToJson(const DistributedJob& job) {
  const DistributedJobStatus& st = job.status;
  json conditions = json::array();
  for (const Condition& c : st.conditions) {
    conditions.push_back({{"type", c.type},
                          {"status", c.status},
                          {"reason", c.reason},
                          {"message", c.message},
                          {"lastTransitionTime", c.last_transition_time},
                          {"observedGeneration", c.observed_generation}});
  }
  json out = {{"phase", PhaseName(st.phase)},
              {"conditions", conditions},
              {"ready", st.ready},
              {"readyText", absl::StrCat(st.ready, "/", job.spec.replicas)},
              {"spares", st.spares},
              {"readySpares", st.ready_spares},
              {"active", st.active},
              {"succeeded", st.succeeded},
              {"failed", st.failed},
              {"restarts", st.restarts},
              {"preemptions", st.preemptions},
              {"uncountedRestarts", st.uncounted_restarts},
              {"restartAttempt", st.restart_attempt},
              {"observedGeneration", st.observed_generation}};
  // What kubectl get shows: the processes per pod in force (the default and `auto` resolved), and
  // the spares only for a job that asks for some (otherwise the column, in -o wide, is empty).
  if (const int32_t per_pod = ResolvedProcessesPerPod(job); per_pod >= 1) {
    out["processesPerPod"] = per_pod;
  }
  // The scale subresource's status (`kubectl scale`, a HorizontalPodAutoscaler).
  out["replicas"] = st.replicas;
  if (const int32_t per_pod = ResolvedProcessesPerPod(job); per_pod >= 1) {
    out["processes"] = static_cast<int64_t>(st.replicas) * per_pod;
  }
  out["selector"] = absl::StrCat(kJobNameLabel, "=", job.name);
  if (job.spec.elastic) {
    out["replicaGroups"] = st.replica_groups;
    out["replicaGroupsText"] = absl::StrCat(st.replica_groups, "/", DesiredReplicaGroups(job.spec));
  }
  if (!st.dropped_replica_groups.empty()) out["droppedReplicaGroups"] = st.dropped_replica_groups;
  if (job.spec.spares > 0) {
    out["sparesText"] = absl::StrCat(st.ready_spares, "/", job.spec.spares);
  }
  if (!st.coordinator_address.empty()) out["coordinatorAddress"] = st.coordinator_address;
  if (!st.start_time.empty()) out["startTime"] = st.start_time;
  if (!st.completion_time.empty()) out["completionTime"] = st.completion_time;
  if (!st.last_restart_kind.empty()) out["lastRestartKind"] = st.last_restart_kind;
  if (!st.last_restart_strategy.empty()) out["lastRestartStrategy"] = st.last_restart_strategy;
  if (st.last_hang_id != 0) out["lastHangId"] = st.last_hang_id;
  if (st.spares_created != 0) out["sparesCreated"] = st.spares_created;
  if (!st.slots.empty()) {
    json slots = json::array();
    for (const auto& [index, pod] : st.slots) slots.push_back({{"podIndex", index}, {"pod", pod}});
    out["slots"] = slots;
  }
  return out;
}

const char* HangPolicyName(HangPolicy policy) {
  switch (policy) {
    case HangPolicy::kRestart:
      return "Restart";
    case HangPolicy::kFail:
      return "Fail";
    case HangPolicy::kAlert:
      return "Alert";
  }
  return "Restart";
}

const char* RestartStrategyName(RestartStrategy strategy) {
  return strategy == RestartStrategy::kInPlace ? "InPlace" : "Recreate";
}

std::string CoordinatorAddress(const DistributedJob& job) {
  return absl::StrCat(job.name, "-0.", job.name, ".",
                      job.namespace_.empty() ? "default" : job.namespace_,
                      ".svc:", job.spec.coordinator_port);
}

}  // namespace cohort::op
