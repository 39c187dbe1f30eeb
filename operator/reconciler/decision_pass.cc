#include "operator/reconciler/decision_pass.h"

#include <string.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rfc3339.h"
#include "kube/conditions.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/in_place_policy.h"

namespace cohort::op {
namespace {

using PodPhase = ObservedPod::Phase;

// Longest termination message quoted in a condition or Event.
constexpr size_t kMaxMessage = 512;

}  // namespace

absl::string_view TruncateUtf8(absl::string_view text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

DecisionPass::DecisionPass(const DistributedJob& job, const std::vector<ObservedPod>& pods,
                           absl::Time now, const DecideOptions& options, const AttemptView* view)
    : job(job), spec(job.spec), now(now), options(options), status(decision.status), view(view) {
  status = job.status;
  status.observed_generation = job.generation;
  status.coordinator_address = CoordinatorAddress(job);
  const bool restarting_in_place = status.last_restart_strategy == restart_strategy::kInPlace;
  for (const ObservedPod& p : pods) {
    if (p.restart_attempt == status.restart_attempt) {
      current.push_back(&p);
    } else if (restarting_in_place && p.in_place && p.restart_attempt < status.restart_attempt) {
      waiting.push_back(&p);
    } else {
      old.push_back(&p);
    }
  }
  auto by_rank = [](const ObservedPod* a, const ObservedPod* b) { return a->rank < b->rank; };
  std::sort(current.begin(), current.end(), by_rank);
  std::sort(waiting.begin(), waiting.end(), by_rank);
}

bool DecisionPass::Runs(int32_t rank) const {
  if (!spec.elastic || view == nullptr || !view->heard || !view->layout ||
      view->attempt != status.restart_attempt) {
    return rank < spec.replicas;
  }
  return view->layout->Position(rank).has_value();
}

int32_t DecisionPass::RunningPods() const {
  if (!spec.elastic || view == nullptr || !view->heard || !view->layout ||
      view->attempt != status.restart_attempt) {
    return spec.replicas;
  }
  return view->layout->pods();
}

void DecisionPass::SetCondition(const char* type, bool is_true, const std::string& reason,
                                const std::string& message) {
  ::cohort::op::SetCondition(status.conditions,
                             Condition{type, kube::TrueOrFalse(is_true), reason, message,
                                       FormatRfc3339(now), job.generation});
}

void DecisionPass::Emit(const char* type, const char* reason, const std::string& message) {
  decision.events.push_back(Event{type, reason, message});
}

void DecisionPass::Requeue(absl::Duration after) {
  after = std::max(after, absl::Milliseconds(1));
  decision.requeue_after =
      decision.requeue_after ? std::min(*decision.requeue_after, after) : after;
}

void DecisionPass::DeleteAll(const std::vector<const ObservedPod*>& which) {
  for (const ObservedPod* p : which) {
    if (!p->terminating && deleting_.insert(p->name).second)
      decision.delete_pods.push_back(p->name);
  }
}

void DecisionPass::Finish(Phase phase, const char* reason, const std::string& message) {
  status.phase = phase;
  status.completion_time = FormatRfc3339(now);
  SetCondition(phase == Phase::kSucceeded ? condition::kSucceeded : condition::kFailed, true,
               reason, message);
  SetCondition(condition::kRunning, false, reason, message);
  Emit(phase == Phase::kSucceeded ? event_type::kNormal : event_type::kWarning, reason, message);
  if (spec.ttl_seconds_after_finished) Requeue(absl::Seconds(*spec.ttl_seconds_after_finished));
}

void DecisionPass::RestartGang(const char* kind, const char* condition_reason,
                               const char* event_type, const char* event_reason,
                               const std::string& why, const std::string& what_next,
                               GangRestart cause, absl::Duration backoff) {
  InPlacePlan plan = PlanInPlace(*this);
  const bool in_place = plan.blocker.empty();
  ++status.restart_attempt;
  status.last_restart_kind = kind;
  status.last_restart_strategy =
      in_place ? restart_strategy::kInPlace : restart_strategy::kRecreate;
  cause.kind = kind;
  cause.in_place = in_place;
  if (in_place) {
    for (const auto& [pod, why] : plan.replaced) {
      if (pod != nullptr) {
        DeleteAll({pod});
        cause.replaced.push_back(pod->name);
      }
    }
  } else {
    DeleteAll(current);
  }
  decision.restart = std::move(cause);
  decision.create_ranks.clear();
  status.phase = Phase::kRestarting;
  SetCondition(condition::kRestarting, true, condition_reason, why);
  SetCondition(condition::kRunning, false, reason::kRestarting, why);
  if (in_place && plan.replaced.empty()) {
    Emit(event_type, reason::kRestartedInPlace,
         absl::StrCat(why, what_next, "; in place: every pod stays, its processes restart"));
  } else if (in_place) {
    std::vector<std::string> replaced;
    for (const auto& [pod, gone] : plan.replaced) replaced.push_back(gone);
    Emit(event_type, reason::kRestartedInPlace,
         absl::StrCat(
             why, what_next, "; in place: ", absl::StrJoin(replaced, "; "),
             plan.replaced.size() == 1 ? ": it is replaced alone" : ": they are replaced alone",
             ", every other pod stays and its processes restart"));
  } else {
    Emit(event_type, event_reason, absl::StrCat(why, what_next));
    // A job that could restart in place but this restart cannot says why (one whose spec asks for
    // Recreate, or whose trainer has no command, never does: status.lastRestartStrategy says so).
    if (RestartsInPlace(spec)) {
      RecreateInstead(*this, absl::StrCat("cannot restart in place: ", plan.blocker));
    }
  }
  Requeue(backoff);
}

void DecisionPass::CountedRestart(const std::string& why, const char* condition_reason,
                                  GangRestart cause) {
  if (status.restarts >= spec.max_restarts) {
    DeleteAll(current);
    decision.create_ranks.clear();
    Finish(Phase::kFailed, reason::kMaxRestartsExceeded,
           absl::StrCat(why, "; no restarts left (maxRestarts ", spec.max_restarts, ")"));
    return;
  }
  ++status.restarts;
  RestartGang(restart_kind::kFailure, condition_reason, event_type::kWarning, reason::kGangRestart,
              why,
              absl::StrCat("; restarting the gang as restart attempt ", status.restart_attempt + 1,
                           " (restart ", status.restarts, " of ", spec.max_restarts, ")"),
              std::move(cause), RestartBackoff(spec, status.restarts));
}

void DecisionPass::Count() {
  // The size the job started at (a job without spec.elastic keeps it: validation refuses another
  // spec.replicas once it runs); an elastic job's is KeepElastic's.
  if (!spec.elastic && (status.replicas == 0 || status.start_time.empty()))
    status.replicas = spec.replicas;
  status.ready = status.active = status.succeeded = status.failed = 0;
  for (const ObservedPod* p : current) {
    if (p->ready) ++status.ready;
    if (!p->terminating && (p->phase == PodPhase::kPending || p->phase == PodPhase::kRunning))
      ++status.active;
    if (p->phase == PodPhase::kSucceeded) ++status.succeeded;
    if (Failed(*p)) ++status.failed;
  }
}

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
    if (const char* sig =
            *p.trainer_exit_code > 128 ? sigabbrev_np(*p.trainer_exit_code - 128) : nullptr) {
      absl::StrAppend(&out, " (SIG", sig,
                      *p.trainer_exit_code == 137 ? ": killed, or out of memory" : "", ")");
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

ExitKind ExitKindOf(const ObservedPod& p) {
  if (p.trainer_exit_code) {
    return ClassifyExit(ProcessExit::FromContainer(*p.trainer_exit_code, p.trainer_reason));
  }
  return p.phase == PodPhase::kFailed ? ExitKind::kError : ExitKind::kSucceeded;
}

const ObservedPod* RootCausePod(const std::vector<const ObservedPod*>& pods) {
  std::vector<ExitKind> kinds;
  for (const ObservedPod* p : pods) kinds.push_back(ExitKindOf(*p));
  std::optional<size_t> root = RootCause(kinds);
  return root ? pods[*root] : nullptr;
}

bool Follower(const ObservedPod& p) { return ExitKindOf(p) == ExitKind::kFollowed; }

bool Failed(const ObservedPod& p) { return ExitKindOf(p) != ExitKind::kSucceeded; }

}  // namespace cohort::op
