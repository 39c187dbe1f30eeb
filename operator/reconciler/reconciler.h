#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/kube_client.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/attempt_watcher.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

// What one pass did, for metrics.
struct ReconcileReport {
  int pods_created = 0;
  int pods_deleted = 0;
  std::optional<Phase> phase;              // The job's phase after the pass (nullopt if gone).
  std::vector<std::string> event_reasons;  // "GangRestart", "Preempted", ...
  std::optional<GangRestart> restart;      // The gang restart this pass decided, if any.
  // Restarting in place, this pass ordered the next attempt from the job's attempt hub (every pod
  // that stays had ended its processes of the last one).
  bool started_attempt = false;
  // Its Hung condition is True after the pass and it has not finished (docs/faults.md, "Hung
  // ranks"); a pass that named a new hang also has "HangDetected" among event_reasons.
  bool hung = false;
  absl::Time now = absl::InfinitePast();  // The time the pass judged the job at.
  absl::Time job_created = absl::InfinitePast();
  // An elastic job: the replica groups its running attempt runs, and those spec.replicas asks for.
  std::optional<std::pair<int32_t, int32_t>> replica_groups;
};

// One level-triggered reconcile pass of a DistributedJob (docs/operator.md, "What the operator
// does", and "How it is built"): observe, decide, apply.
//   Observe (reconciler.cc): get the job (NotFound: done), its pods (an earlier job's of the same
//     name are deleted first), their nodes' topology domains and what its attempt hub said last.
//   Decide (job_decision.cc): a pure function of what was observed, with a policy per concern
//     (startup, failures, in place, spares, hangs, preemption, lifecycle) -> a Decision.
//   Apply (reconciler_apply.cc): one function per action of the Decision, in a fixed order; then
//     write the status once, only if it changed, and emit the Events after the write succeeded.
// An invalid spec creates nothing.
//
// Thread-safe for different jobs; the work queue never hands one job to two workers.
class Reconciler {
 public:
  // Pods of one pass are created by up to `pod_create_parallelism` threads at once, so a
  // 1,000-rank job is created at the API server's pace (the client's rate limit), not one
  // round trip at a time.
  Reconciler(kube::KubeClient* client, Clock* clock,
             std::function<std::string()> new_token = nullptr, int pod_create_parallelism = 16,
             DecideOptions decide_options = {});

  // When to look at the job again (nullopt: on the next change only). Errors: Aborted (the
  // status write conflicted: requeue at once), Unavailable (API trouble: requeue with backoff),
  // others from the API.
  absl::StatusOr<std::optional<absl::Duration>> Reconcile(const std::string& ns,
                                                          const std::string& name,
                                                          ReconcileReport* report = nullptr);

  // Carries out `d`, decided for `job` at `now` (what a pass does after Decide), stopping at the
  // first error (the next pass observes again and decides anew). The order:
  //   1. relabel spares that take slots (before the order that gives them the slots);
  //   2. order the attempt from the hub (a failure stops here: nothing created or deleted), or
  //      drain the running one (an elastic job's resize);
  //   3. the Service, token Secret and pod group, when pods are to be created;
  //   4. create the gang's pods, the replacements, the spares;
  //   5. delete pods, then force-delete those of lost nodes (after the creations: a pass that
  //      stops has lost no pod it did not replace); 6. delete the job (TTL).
  // The status and Events are not written here (Reconcile does, after Apply succeeded).
  absl::Status Apply(const DistributedJob& job, const Decision& d, absl::Time now,
                     ReconcileReport* report = nullptr);

  // The streams to in-place jobs' attempt hubs (spec.restartStrategy: InPlace). Without one, no
  // restart is carried out in place. Set before the first pass.
  void set_attempt_watcher(AttemptWatcher* watcher) { attempts_ = watcher; }

 private:
  // What a pass reads before it decides. `job` unset: the pass ends here, looking again after
  // `look_again` (the job is gone or being deleted: never; an earlier job's pods still go: 1 s).
  struct Observation {
    nlohmann::json object;  // The job as read (its status is rewritten from it).
    std::optional<DistributedJob> job;
    std::vector<ObservedPod> pods;
    std::optional<AttemptView> view;
    std::optional<absl::Duration> look_again;
  };
  absl::StatusOr<Observation> Observe(const std::string& ns, const std::string& name);
  // Restarting in place: keeps the stream to the hub on the running pod 0 and returns what it
  // said last.
  std::optional<AttemptView> ObserveAttempts(const DistributedJob& job,
                                             const std::vector<ObservedPod>& pods);
  // Hot spares with a topology (SpareTopology()): the domains of the nodes of rank 0's pod and of
  // the spares (ObservedPod::domain), from the nodes' labels (cached: a node's rack does not move).
  void FillTopologyDomains(const DistributedJob& job, std::vector<ObservedPod>& pods);
  // The job's token, from its Secret (cached by job uid).
  absl::StatusOr<std::string> JobToken(const DistributedJob& job);
  static void FillReport(const DistributedJob& job, const Decision& d, absl::Time now,
                         ReconcileReport& report);

  // Apply's steps, one per action of Decision (reconciler_apply.cc).
  absl::Status RelabelSpares(const DistributedJob& job, const Decision& d);
  absl::Status StartAttempt(const DistributedJob& job, const Decision& d);
  absl::Status DrainAttempt(const DistributedJob& job, const Decision& d);
  // The Service and token Secret when any pod is to be created; the pod group
  // (spec.scheduling.podGroup) when the gang's pods are, earlier attempts' groups deleted.
  absl::Status EnsurePodPrerequisites(const DistributedJob& job, const Decision& d, absl::Time now);
  absl::Status EnsurePodGroup(const DistributedJob& job, int32_t restart_attempt);
  // Named PodName, or ReplacementPodName when `replacements` (children.h).
  absl::Status CreatePods(const DistributedJob& job, const std::vector<int32_t>& ranks,
                          int32_t restart_attempt, bool replacements, ReconcileReport* report);
  absl::Status CreateSpares(const DistributedJob& job, const Decision& d, ReconcileReport* report);
  absl::Status DeletePods(const DistributedJob& job, const std::vector<std::string>& pods,
                          std::optional<int64_t> grace_period_seconds, ReconcileReport* report);
  // Writes d.status over the job read as `object`, unless it is unchanged (Aborted on conflict).
  absl::Status WriteStatus(const nlohmann::json& object, const DistributedJob& job,
                           const Decision& d);
  void EmitEvents(const DistributedJob& job, const std::vector<Event>& events, absl::Time now);

  kube::KubeClient* const client_;
  Clock* const clock_;
  std::function<std::string()> new_token_;
  const int pod_create_parallelism_;
  const DecideOptions decide_options_;
  AttemptWatcher* attempts_ = nullptr;
  absl::Mutex tokens_mu_;
  std::map<std::string, std::string> tokens_ ABSL_GUARDED_BY(tokens_mu_);  // By job uid.
  absl::Mutex domains_mu_;
  std::map<std::string, std::string> domains_
      ABSL_GUARDED_BY(domains_mu_);  // By "<node>\n<label>".
};

}  // namespace cohort::op
