#include "operator/reconciler/job_decision.h"

#include <string.h>

#include <algorithm>
#include <climits>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "operator/api/json_fields.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/failure_policy.h"

namespace cohort::op {
namespace {

constexpr absl::Duration kMaxBackoff = absl::Minutes(5);
// While waiting for pods of an old restart attempt to go (their names are reused), look again this
// often; pod watch events usually come first.
constexpr absl::Duration kOldPodsRecheck = absl::Seconds(1);
// When every failed rank only followed a peer's failure (libdist's exit code 75), the rank that
// caused it is usually still being reported: its kubelet writes a moment later. Wait this long
// after the first follower finished, so the restart's reason names the cause.
constexpr absl::Duration kRootCauseWait = absl::Seconds(3);
// With spec.failurePolicy.rules the decision depends on the root cause's exit code or reason,
// so the wait for it is longer (kubelets write finishedAt in whole seconds).
constexpr absl::Duration kRootCauseWaitWithRules = absl::Seconds(10);
// Longest termination message quoted in a condition or Event.
constexpr size_t kMaxMessage = 512;
// status.lastRestartKind: what the last gang restart was. Only a counted failure's backoff grows
// with status.restarts.
constexpr char kRestartFailure[] = "Failure";
constexpr char kRestartUncountedFailure[] = "UncountedFailure";
constexpr char kRestartPreemption[] = "Preemption";

using PodPhase = ObservedPod::Phase;

// At most `max` bytes of `text`, cut at a character boundary: a status or Event with half a UTF-8
// character is not valid JSON text, and the API client cannot serialize it.
absl::string_view TruncateUtf8(absl::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

// `per_pod`: the processes each pod runs; a pod of several names its ranks (its termination
// message, cohort-launch's last line, names the one that failed).
// "rank 3 (pod demo-3)", or with several processes per pod "pod demo-1 (ranks 2-3)".
std::string Who(int32_t pod_index, const std::string& pod_name, int32_t per_pod) {
  return per_pod == 1 ? absl::StrCat("rank ", pod_index, " (pod ", pod_name, ")")
                      : absl::StrCat("pod ", pod_name, " (ranks ", pod_index * per_pod, "-",
                                     pod_index * per_pod + per_pod - 1, ")");
}

std::string Describe(const ObservedPod& p, int32_t per_pod) {
  std::string out = Who(p.rank, p.name, per_pod);
  if (p.trainer_exit_code) {
    absl::StrAppend(&out, " exited with code ", *p.trainer_exit_code);
    // 128+N: killed by signal N (SIGKILL also means the OOM killer).
    if (const char* sig = *p.trainer_exit_code > 128 ? sigabbrev_np(*p.trainer_exit_code - 128) : nullptr) {
      absl::StrAppend(&out, " (SIG", sig, *p.trainer_exit_code == 137 ? ": killed, or out of memory" : "", ")");
    }
  } else {
    absl::StrAppend(&out, " failed");
  }
  // A termination message from a log tail spans lines; the last one usually says why.
  absl::string_view message = p.trainer_message;
  while (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  if (size_t nl = message.rfind('\n'); nl != absl::string_view::npos) message.remove_prefix(nl + 1);
  if (message.size() > kMaxMessage) message = TruncateUtf8(message, kMaxMessage);
  if (!message.empty()) absl::StrAppend(&out, ": ", message);
  return out;
}

bool Follower(const ObservedPod& p) {
  return p.trainer_exit_code && *p.trainer_exit_code == kPeerFailureExitCode;
}

bool Failed(const ObservedPod& p) {
  if (p.trainer_exit_code) return *p.trainer_exit_code != 0;
  return p.phase == PodPhase::kFailed;
}

std::optional<int32_t> IntLabel(const nlohmann::json& labels, const char* key) {
  int32_t v;
  if (!absl::SimpleAtoi(StringMember(labels, key), &v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ObservedPod> ObservePod(const nlohmann::json& pod, const std::string& trainer_name) {
  const nlohmann::json& meta = Member(pod, "metadata");
  const nlohmann::json& labels = Member(meta, "labels");
  std::optional<int32_t> rank = IntLabel(labels, kRankLabel);
  std::optional<int32_t> restart_attempt = IntLabel(labels, kRestartAttemptLabel);
  std::string name = StringMember(meta, "name");
  // A pod without a name cannot be acted on (deleting "" would address the whole collection).
  if (!rank || !restart_attempt || name.empty()) return std::nullopt;
  ObservedPod p;
  p.name = std::move(name);
  p.rank = *rank;
  p.restart_attempt = *restart_attempt;
  p.terminating = !Member(meta, "deletionTimestamp").is_null();
  if (std::optional<absl::Time> at = ParseRfc3339(StringMember(meta, "deletionTimestamp"))) {
    p.deletion_deadline = *at;
  }
  p.node = StringMember(Member(pod, "spec"), "nodeName");
  p.force_deleted = IntMember(meta, "deletionGracePeriodSeconds") == std::optional<int64_t>(0);
  const nlohmann::json& status = Member(pod, "status");
  std::string phase = StringMember(status, "phase", "Pending");
  p.phase = phase == "Running"     ? PodPhase::kRunning
            : phase == "Succeeded" ? PodPhase::kSucceeded
            : phase == "Failed"    ? PodPhase::kFailed
            : phase == "Pending"   ? PodPhase::kPending
                                   : PodPhase::kUnknown;
  for (const nlohmann::json& c : ArrayMember(status, "conditions")) {
    bool is_true = StringMember(c, "status") == "True";
    std::string type = StringMember(c, "type");
    if (type == "Ready") p.ready = is_true;
    if (type == "DisruptionTarget") p.disruption_target = is_true;
    if (!type.empty()) p.conditions.emplace_back(type, StringMember(c, "status"));
  }
  for (const nlohmann::json& cs : ArrayMember(status, "containerStatuses")) {
    if (StringMember(cs, "name") == "cohort-sidecar") continue;
    const nlohmann::json& t = Member(cs, "state", "terminated");
    ObservedPod::ContainerExit exit{StringMember(cs, "name"), std::nullopt, ""};
    if (t.is_object()) {
      std::optional<int64_t> code = IntMember(t, "exitCode");
      if (code && *code >= INT_MIN && *code <= INT_MAX) exit.exit_code = static_cast<int>(*code);
      exit.reason = StringMember(t, "reason");
    }
    p.containers.push_back(std::move(exit));
  }
  for (const nlohmann::json& cs : ArrayMember(status, "containerStatuses")) {
    if (StringMember(cs, "name") == "cohort-sidecar") continue;
    // Kubelets list container statuses by name, not in the template's order.
    if (!trainer_name.empty() && StringMember(cs, "name") != trainer_name) continue;
    p.trainer_name = StringMember(cs, "name");
    const nlohmann::json& t = Member(cs, "state", "terminated");
    if (t.is_object()) {
      std::optional<int64_t> code = IntMember(t, "exitCode");
      if (code && *code >= INT_MIN && *code <= INT_MAX) p.trainer_exit_code = static_cast<int>(*code);
      if (std::optional<absl::Time> at = ParseRfc3339(StringMember(t, "finishedAt"))) {
        p.finished_at = *at;
      }
      p.trainer_reason = StringMember(t, "reason");
      p.trainer_message = StringMember(t, "message");
      if (p.trainer_message.empty()) p.trainer_message = p.trainer_reason;
      while (!p.trainer_message.empty() && p.trainer_message.back() == '\n') {
        p.trainer_message.pop_back();
      }
    }
    break;
  }
  return p;
}

std::string RestartCause(const ObservedPod& root) {
  if (root.trainer_exit_code && *root.trainer_exit_code == kPreemptedExitCode) return "preempted";
  if (Follower(root)) {
    // libdist's default handler ends its line with "[cause: <dist::FailureCauseName>]".
    static constexpr absl::string_view kMarker = "[cause: ";
    absl::string_view message = root.trainer_message;
    size_t at = message.rfind(kMarker);
    if (at == absl::string_view::npos) return "unknown";
    absl::string_view name = message.substr(at + kMarker.size());
    name = name.substr(0, name.find(']'));
    // dist::FailureCauseName's words, to metric label values.
    static constexpr std::pair<absl::string_view, const char*> kCauses[] = {
        {"crash", "crash"},
        {"restart", "crash"},  // Its process came back with a new incarnation: it had died.
        {"heartbeat timeout", "heartbeat_timeout"},
        {"preemption", "preempted"},
        {"reported error", "reported_error"},
        {"registration timeout", "registration_timeout"},
        {"shutdown timeout", "shutdown_timeout"},
        {"coordination service lost", "service_lost"},
        {"collective timeout", "collective_timeout"},
    };
    for (const auto& [words, cause] : kCauses) {
      if (name == words) return cause;
    }
    return "unknown";
  }
  if (root.trainer_reason == "OOMKilled") return "oom";
  if (root.trainer_exit_code && *root.trainer_exit_code > 128) return "signal";
  return "crash";
}

absl::Duration RestartBackoff(const DistributedJobSpec& spec, int32_t restart) {
  return DoublingDelay(spec.restart_backoff, kMaxBackoff, restart);
}

const Condition* FindCondition(const std::vector<Condition>& conditions, const std::string& type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

void SetCondition(std::vector<Condition>& conditions, Condition condition) {
  for (Condition& c : conditions) {
    if (c.type != condition.type) continue;
    if (c.status == condition.status) condition.last_transition_time = c.last_transition_time;
    c = std::move(condition);
    return;
  }
  conditions.push_back(std::move(condition));
}

Decision Decide(const DistributedJob& job, const std::vector<ObservedPod>& pods, absl::Time now,
                const DecideOptions& options) {
  Decision d;
  d.status = job.status;
  DistributedJobStatus& st = d.status;
  const DistributedJobSpec& spec = job.spec;
  st.observed_generation = job.generation;
  st.coordinator_address = CoordinatorAddress(job);
  auto condition = [&](const std::string& type, bool status, const std::string& reason,
                       const std::string& message) {
    SetCondition(st.conditions, Condition{type, status ? "True" : "False", reason, message,
                                          FormatRfc3339(now), job.generation});
  };
  auto event = [&](const char* type, const std::string& reason, const std::string& message) {
    d.events.push_back(Event{type, reason, message});
  };
  auto requeue = [&](absl::Duration after) {
    after = std::max(after, absl::Milliseconds(1));
    d.requeue_after = d.requeue_after ? std::min(*d.requeue_after, after) : after;
  };
  if (job.being_deleted) return d;  // Garbage collection removes the children.

  std::vector<const ObservedPod*> current, old;
  for (const ObservedPod& p : pods) (p.restart_attempt == st.restart_attempt ? current : old).push_back(&p);
  std::sort(current.begin(), current.end(),
            [](const ObservedPod* a, const ObservedPod* b) { return a->rank < b->rank; });
  auto count = [&] {
    st.ready = st.active = st.succeeded = st.failed = 0;
    for (const ObservedPod* p : current) {
      if (p->ready) ++st.ready;
      if (!p->terminating && (p->phase == PodPhase::kPending || p->phase == PodPhase::kRunning)) ++st.active;
      if (p->phase == PodPhase::kSucceeded) ++st.succeeded;
      if (Failed(*p)) ++st.failed;
    }
  };
  auto delete_all = [&](const std::vector<const ObservedPod*>& which) {
    for (const ObservedPod* p : which) {
      if (!p->terminating) d.delete_pods.push_back(p->name);
    }
  };
  auto finish = [&](Phase phase, const std::string& reason, const std::string& message) {
    st.phase = phase;
    st.completion_time = FormatRfc3339(now);
    condition(phase == Phase::kSucceeded ? "Succeeded" : "Failed", true, reason, message);
    condition("Running", false, reason, message);
    event(phase == Phase::kSucceeded ? "Normal" : "Warning", reason, message);
    if (spec.ttl_seconds_after_finished) requeue(absl::Seconds(*spec.ttl_seconds_after_finished));
  };

  // Finished jobs keep their pods (for logs) until the TTL deletes the job.
  if (st.phase == Phase::kSucceeded || st.phase == Phase::kFailed) {
    count();
    if (spec.ttl_seconds_after_finished) {
      absl::Time done = ParseRfc3339(st.completion_time).value_or(now);
      absl::Time expiry = done + absl::Seconds(*spec.ttl_seconds_after_finished);
      if (now >= expiry) {
        d.delete_job = true;
      } else {
        requeue(expiry - now);
      }
    }
    return d;
  }

  std::vector<std::string> errors = Validate(job);
  if (!errors.empty()) {
    std::string message = absl::StrJoin(errors, "; ");
    const Condition* before = FindCondition(st.conditions, "SpecValid");
    if (before == nullptr || before->status != "False" || before->message != message) {
      event("Warning", "InvalidSpec", message);
    }
    condition("SpecValid", false, "InvalidSpec", message);
    count();
    return d;
  }
  condition("SpecValid", true, "Valid", "");
  delete_all(old);  // An earlier restart attempt's pods never outlive it.
  // Lost nodes: the next attempt waits for the old pods to be gone, and a pod on a node that
  // died is never confirmed gone (its kubelet would do that). Past its grace period and the
  // bound, it is deleted without waiting.
  for (const ObservedPod* p : old) {
    if (!p->terminating || p->force_deleted || p->deletion_deadline == absl::InfiniteFuture() ||
        options.force_delete_after < absl::ZeroDuration()) {
      continue;
    }
    const absl::Time due = p->deletion_deadline + options.force_delete_after;
    if (now < due) {
      requeue(due - now);
      continue;
    }
    d.force_delete_pods.push_back(p->name);
    event("Warning", "ForceDeleted",
          absl::StrCat("pod ", p->name, " on node ", p->node.empty() ? "(none)" : p->node,
                       " was still terminating ", absl::FormatDuration(now - p->deletion_deadline),
                       " after its grace period ended (its node may be lost): deleted it with "
                       "grace period 0 so that the next restart attempt can start"));
  }

  if (spec.suspend) {
    delete_all(current);
    if (st.phase != Phase::kSuspended) {
      st.phase = Phase::kSuspended;
      condition("Suspended", true, "Suspended", "spec.suspend is true: the pods are deleted");
      condition("Running", false, "Suspended", "");
      event("Normal", "Suspended", "deleted the pods; set spec.suspend to false to resume");
    }
    count();
    return d;
  }
  if (st.phase == Phase::kSuspended) {
    ++st.restart_attempt;
    st.phase = Phase::kPending;
    condition("Suspended", false, "Resumed", "");
    event("Normal", "Resumed", absl::StrCat("starting restart attempt ", st.restart_attempt));
    delete_all(current);
    old.insert(old.end(), current.begin(), current.end());
    current.clear();
  }

  if (spec.active_deadline_seconds) {
    if (std::optional<absl::Time> start = ParseRfc3339(st.start_time)) {
      absl::Time deadline = *start + absl::Seconds(*spec.active_deadline_seconds);
      if (now >= deadline) {
        delete_all(current);
        count();
        finish(Phase::kFailed, "DeadlineExceeded",
               absl::StrCat("the job ran longer than activeDeadlineSeconds (",
                            *spec.active_deadline_seconds, ")"));
        return d;
      }
      requeue(deadline - now);
    }
  }

  if (st.phase == Phase::kRestarting) {
    const Condition* restarting = FindCondition(st.conditions, "Restarting");
    absl::Time since = restarting ? ParseRfc3339(restarting->last_transition_time).value_or(now) : now;
    // A status written before lastRestartKind existed says it in the condition's reason.
    const bool counted = st.last_restart_kind.empty()
                             ? restarting == nullptr || restarting->reason != "Preemption"
                             : st.last_restart_kind == kRestartFailure;
    absl::Time ready_at = since + RestartBackoff(spec, counted ? st.restarts : 1);
    if (now < ready_at) {
      requeue(ready_at - now);
      count();
      return d;
    }
    st.phase = Phase::kPending;
    condition("Restarting", false, "Restarted", absl::StrCat("restart attempt ", st.restart_attempt));
  }

  // Pending: create the ranks that have no pod, once every pod of the old restart attempt is gone.
  // Not rank by rank: a new rank started beside a still-terminating old rank 0 can reach that
  // process's servers under the same address and port (the coordination service, or the TCPStore
  // a PyTorch rank 0 serves on MASTER_PORT) and join the dying attempt instead of the new one.
  if (st.phase == Phase::kPending) {
    std::set<int32_t> present;
    for (const ObservedPod* p : current) present.insert(p->rank);
    if (!old.empty()) {
      requeue(kOldPodsRecheck);
    } else {
      for (int32_t rank = 0; rank < spec.replicas; ++rank) {
        if (!present.count(rank)) d.create_ranks.push_back(rank);
      }
    }
    if (present.empty() && !d.create_ranks.empty()) {
      event("Normal", "Started",
            absl::StrCat("creating ", d.create_ranks.size(),
                         d.create_ranks.size() == 1 ? " pod" : " pods", " for restart attempt ",
                         st.restart_attempt));
    }
  }

  // Preemption: an evicted or externally deleted pod, a vanished pod of a running gang, or a
  // trainer that checkpointed and exited for a preemption.
  // The pod that was evicted or deleted comes first: the other ranks then exit 76 after the
  // sync point too, and failure rules (onPodConditions) must see the one the cluster took.
  const ObservedPod* preempted = nullptr;
  for (const ObservedPod* p : current) {
    bool deleted_by_others = p->terminating && p->phase != PodPhase::kSucceeded && !Failed(*p);
    if (p->disruption_target || deleted_by_others) {
      preempted = p;
      break;
    }
  }
  for (const ObservedPod* p : current) {
    if (preempted != nullptr) break;
    if (p->trainer_exit_code && *p->trainer_exit_code == kPreemptedExitCode) preempted = p;
  }
  std::string vanished;
  if (preempted == nullptr && st.phase == Phase::kRunning) {
    std::set<int32_t> present;
    for (const ObservedPod* p : current) present.insert(p->rank);
    for (int32_t rank = 0; rank < spec.replicas && vanished.empty(); ++rank) {
      if (!present.count(rank)) {
        vanished = absl::StrCat(Who(rank, PodName(job, rank), ResolvedProcessesPerPod(job)),
                                " was deleted");
      }
    }
  }
  count();
  // Ends this restart attempt: restarts the gang as the next one after a backoff.
  // `why` goes into the conditions, `why` + `what_next` into the Event.
  auto restart_gang = [&](const char* kind, const std::string& condition_reason,
                          const char* event_type, const std::string& event_reason,
                          const std::string& why, const std::string& what_next, GangRestart cause,
                          absl::Duration backoff) {
    ++st.restart_attempt;
    st.last_restart_kind = kind;
    cause.kind = kind;
    d.restart = std::move(cause);
    delete_all(current);
    d.create_ranks.clear();
    st.phase = Phase::kRestarting;
    condition("Restarting", true, condition_reason, why);
    condition("Running", false, "Restarting", why);
    event(event_type, event_reason, absl::StrCat(why, what_next));
    requeue(backoff);
  };
  // A counted restart, or Failed when none is left.
  auto counted_restart = [&](const std::string& why, const std::string& condition_reason,
                             GangRestart cause) {
    if (st.restarts >= spec.max_restarts) {
      delete_all(current);
      d.create_ranks.clear();
      finish(Phase::kFailed, "MaxRestartsExceeded",
             absl::StrCat(why, "; no restarts left (maxRestarts ", spec.max_restarts, ")"));
      return;
    }
    ++st.restarts;
    restart_gang(kRestartFailure, condition_reason, "Warning", "GangRestart", why,
                 absl::StrCat("; restarting the gang as restart attempt ", st.restart_attempt + 1,
                              " (restart ", st.restarts, " of ", spec.max_restarts, ")"),
                 std::move(cause), RestartBackoff(spec, st.restarts));
  };
  // What the first matching rule of spec.failurePolicy says about the pod that ended the attempt.
  auto apply_rule = [&](const RuleMatch& rule, const std::string& why, GangRestart cause) {
    const std::string message = absl::StrCat(why, "; ", rule.Describe());
    switch (rule.action) {
      case FailureAction::kFailJob:
        delete_all(current);
        d.create_ranks.clear();
        finish(Phase::kFailed, "FailurePolicy", absl::StrCat(message, ": the job fails"));
        return;
      case FailureAction::kRestartJob:
        counted_restart(message, "FailurePolicy", std::move(cause));
        return;
      case FailureAction::kRestartJobAndIgnoreMaxRestarts:
        ++st.uncounted_restarts;
        restart_gang(kRestartUncountedFailure, "FailurePolicy", "Warning", "GangRestart", message,
                     absl::StrCat(": restarting the gang as restart attempt ",
                                  st.restart_attempt + 1,
                                  " (not counted against maxRestarts; uncounted restart ",
                                  st.uncounted_restarts, ")"),
                     std::move(cause), RestartBackoff(spec, 1));
        return;
    }
  };

  if (preempted != nullptr || !vanished.empty()) {
    std::string why = preempted != nullptr
                          ? absl::StrCat(Who(preempted->rank, preempted->name,
                                             ResolvedProcessesPerPod(job)),
                                         " was preempted or evicted")
                          : vanished;
    GangRestart cause{"preempted", preempted != nullptr ? preempted->finished_at : absl::InfinitePast(), ""};
    if (preempted != nullptr) {
      if (std::optional<RuleMatch> rule = MatchFailureRules(spec.failure_rules, *preempted)) {
        apply_rule(*rule, why, std::move(cause));
        return d;
      }
    }
    ++st.preemptions;
    restart_gang(kRestartPreemption, "Preemption", "Normal", "Preempted", why,
                 absl::StrCat("; restarting the gang as restart attempt ", st.restart_attempt + 1,
                              " (preemptions do not count against maxRestarts)"),
                 std::move(cause), RestartBackoff(spec, 1));
    return d;
  }

  // Failure: the root cause is the lowest rank that did not merely follow a peer's failure.
  const ObservedPod* root = nullptr;
  for (const ObservedPod* p : current) {
    if (!Failed(*p)) continue;
    if (root == nullptr || (!Follower(*p) && Follower(*root))) root = p;
  }
  if (root != nullptr && Follower(*root)) {
    absl::Time first = absl::InfiniteFuture();
    bool cause_may_come = false;
    for (const ObservedPod* p : current) {
      if (Follower(*p)) first = std::min(first, p->finished_at);
      if (!p->trainer_exit_code && p->phase != PodPhase::kFailed) cause_may_come = true;
    }
    const absl::Duration wait = spec.failure_rules.empty() ? kRootCauseWait : kRootCauseWaitWithRules;
    if (cause_may_come && now < first + wait) {
      requeue(first + wait - now);
      return d;
    }
  }
  if (root != nullptr) {
    std::string why = Describe(*root, ResolvedProcessesPerPod(job));
    GangRestart cause{RestartCause(*root), root->finished_at, ""};  // kind: set by the restart
    if (std::optional<RuleMatch> rule = MatchFailureRules(spec.failure_rules, *root)) {
      apply_rule(*rule, why, std::move(cause));
    } else {
      counted_restart(why, "Failure", std::move(cause));
    }
    return d;
  }

  if (static_cast<int32_t>(current.size()) == spec.replicas &&
      std::all_of(current.begin(), current.end(),
                  [](const ObservedPod* p) { return p->phase == PodPhase::kSucceeded; })) {
    finish(Phase::kSucceeded, "Completed",
           absl::StrCat("all ", TotalProcesses(job), " ranks exited successfully"));
    return d;
  }

  bool all_running = static_cast<int32_t>(current.size()) == spec.replicas &&
                     std::all_of(current.begin(), current.end(), [](const ObservedPod* p) {
                       return p->phase == PodPhase::kRunning || p->phase == PodPhase::kSucceeded;
                     });
  if (all_running && st.phase == Phase::kPending) {
    st.phase = Phase::kRunning;
    if (st.start_time.empty()) st.start_time = FormatRfc3339(now);
    condition("Running", true, "AllRanksRunning",
              absl::StrCat("all ", TotalProcesses(job), " ranks are running (restart attempt ",
                           st.restart_attempt, ")"));
    event("Normal", "Running", absl::StrCat("all ", TotalProcesses(job), " ranks are running"));
  }
  return d;
}

}  // namespace cohort::op
