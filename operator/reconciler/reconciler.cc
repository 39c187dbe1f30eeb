#include "operator/reconciler/reconciler.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"
#include "common/log.h"
#include "common/token.h"
#include "kube/json_fields.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/job_decision.h"

namespace cohort::op {

using json = nlohmann::json;

Reconciler::Reconciler(kube::KubeClient* client, Clock* clock,
                       std::function<std::string()> new_token, int pod_create_parallelism,
                       DecideOptions decide_options)
    : client_(client),
      clock_(clock),
      new_token_(new_token ? std::move(new_token) : GenerateToken),
      pod_create_parallelism_(std::max(1, pod_create_parallelism)),
      decide_options_(decide_options) {}

void Reconciler::FillTopologyDomains(const DistributedJob& job, std::vector<ObservedPod>& pods) {
  const std::optional<TopologyRequest> topology = SpareTopology(job);
  if (!topology || job.spec.spares <= 0) return;
  for (ObservedPod& p : pods) {
    if ((p.rank != 0 && p.rank >= 0) || p.node.empty()) continue;  // Rank 0's pod and the spares.
    const std::string key = absl::StrCat(p.node, "\n", topology->node_label);
    {
      absl::MutexLock lock(&domains_mu_);
      if (auto it = domains_.find(key); it != domains_.end()) {
        p.domain = it->second;
        continue;
      }
    }
    absl::StatusOr<json> node = client_->Get(kube::kNodes, "", p.node);
    if (!node.ok()) {
      // Unknown: a required topology then gives the pod's slot no spare (it gets a replacement).
      // Said once per node when it will not change (no RBAC to read it).
      LogWarning("job ", job.namespace_, "/", job.name, ": cannot read node ", p.node,
                 "'s topology label ", topology->node_label, ": ", node.status().ToString());
      if (!absl::IsPermissionDenied(node.status()))
        continue;  // A node may come (back) under its name.
    } else {
      p.domain = kube::StringMember(kube::Member(kube::Member(*node, "metadata"), "labels"),
                                    topology->node_label.c_str());
    }
    absl::MutexLock lock(&domains_mu_);
    domains_[key] = p.domain;
  }
}

absl::StatusOr<std::string> Reconciler::JobToken(const DistributedJob& job) {
  {
    absl::MutexLock lock(&tokens_mu_);
    if (auto it = tokens_.find(job.uid); it != tokens_.end()) return it->second;
  }
  absl::StatusOr<json> secret = client_->Get(kube::kSecrets, job.namespace_, SecretName(job));
  if (!secret.ok()) return secret.status();
  std::string token = kube::StringMember(kube::Member(*secret, "stringData"), kTokenKey);
  if (token.empty() &&
      !absl::Base64Unescape(kube::StringMember(kube::Member(*secret, "data"), kTokenKey), &token)) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret ", SecretName(job), ": ", kTokenKey, " is not base64"));
  }
  absl::MutexLock lock(&tokens_mu_);
  tokens_[job.uid] = token;
  return token;
}

std::optional<AttemptView> Reconciler::ObserveAttempts(const DistributedJob& job,
                                                       const std::vector<ObservedPod>& pods) {
  if (attempts_ == nullptr) return std::nullopt;
  const std::string key = absl::StrCat(job.namespace_, "/", job.name);
  const Phase phase = job.status.phase;
  if (job.spec.restart_strategy != RestartStrategy::kInPlace) {
    attempts_->Forget(key);
    return std::nullopt;
  }
  if (phase == Phase::kSucceeded || phase == Phase::kFailed || phase == Phase::kSuspended) {
    attempts_->Close(key);  // Nothing more to start; the pods are still counted by the last view.
    return attempts_->View(key);
  }
  // The hub runs in pod 0's sidecar: the newest pod 0 that runs.
  const ObservedPod* pod0 = nullptr;
  for (const ObservedPod& p : pods) {
    if (p.rank != 0 || p.terminating || p.ip.empty() || p.phase != ObservedPod::Phase::kRunning)
      continue;
    if (pod0 == nullptr || p.restart_attempt > pod0->restart_attempt) pod0 = &p;
  }
  if (pod0 != nullptr) {
    absl::StatusOr<std::string> token = JobToken(job);
    if (token.ok()) {
      attempts_->Watch(
          key,
          absl::StrCat(pod0->ip, ":", job.spec.coordinator_port + env::kAttemptControlPortOffset),
          *token);
    } else {
      LogWarning("job ", key,
                 ": cannot read its token for the attempt hub: ", token.status().ToString());
    }
  }
  return attempts_->View(key);
}

absl::StatusOr<Reconciler::Observation> Reconciler::Observe(const std::string& ns,
                                                            const std::string& name) {
  Observation o;
  absl::StatusOr<json> object = client_->Get(kDistributedJobs, ns, name);
  if (absl::IsNotFound(object.status())) {
    if (attempts_ != nullptr) attempts_->Forget(absl::StrCat(ns, "/", name));
    return o;  // Nothing to do, ever.
  }
  if (!object.ok()) return object.status();
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(*object);
  if (!job.ok()) return job.status();
  if (job->namespace_.empty()) job->namespace_ = ns;
  if (job->being_deleted) return o;
  absl::StatusOr<json> pod_list =
      client_->List(kube::kPods, ns, absl::StrCat(kJobNameLabel, "=", job->name),
                    kube::KubeClient::ListFields::kWithoutSpec);
  if (!pod_list.ok()) return pod_list.status();
  std::vector<std::string> stale;  // Pods of an earlier job of the same name.
  for (const json& p : kube::ArrayMember(*pod_list, "items")) {
    if (!OwnedByJob(p, job->uid)) {
      // Without a name there is nothing to delete (and an empty name would address the collection).
      if (std::string pod = kube::StringMember(kube::Member(p, "metadata"), "name"); !pod.empty())
        stale.push_back(pod);
    } else if (std::optional<ObservedPod> observed = ObservePod(p, TrainerName(*job))) {
      o.pods.push_back(*observed);
    }
  }
  if (!stale.empty()) {
    // A job deleted and created again under the same name: its predecessor's pods are being
    // garbage-collected. Judging or replacing them would be wrong (their names collide with the
    // new pods'), so make sure they go and look again when they are gone.
    for (const std::string& pod : stale) {
      absl::Status s = client_->Delete(kube::kPods, ns, pod);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
    }
    o.look_again = absl::Seconds(1);
    return o;
  }
  FillTopologyDomains(*job, o.pods);
  o.view = ObserveAttempts(*job, o.pods);
  o.object = *std::move(object);
  o.job = *std::move(job);
  return o;
}

absl::StatusOr<std::optional<absl::Duration>> Reconciler::Reconcile(const std::string& ns,
                                                                    const std::string& name,
                                                                    ReconcileReport* report) {
  absl::StatusOr<Observation> o = Observe(ns, name);
  if (!o.ok()) return o.status();
  if (!o->job) return o->look_again;

  const DistributedJob& job = *o->job;
  const absl::Time now = clock_->Now();
  const Decision d = Decide(job, o->pods, now, decide_options_, o->view ? &*o->view : nullptr);
  if (absl::Status s = Apply(job, d, now, report); !s.ok()) return s;
  if (d.delete_job) return std::optional<absl::Duration>();
  if (absl::Status s = WriteStatus(o->object, job, d); !s.ok()) return s;
  if (report != nullptr) FillReport(job, d, now, *report);
  EmitEvents(job, d.events, now);  // Only after the status they describe is recorded.
  return d.requeue_after;
}

void Reconciler::FillReport(const DistributedJob& job, const Decision& d, absl::Time now,
                            ReconcileReport& report) {
  report.phase = d.status.phase;
  for (const Event& e : d.events) report.event_reasons.push_back(e.reason);
  report.restart = d.restart;
  report.started_attempt = d.start_attempt.has_value();
  const Condition* hung = FindCondition(d.status.conditions, condition::kHung);
  report.hung = hung != nullptr && hung->status == "True" && d.status.phase != Phase::kSucceeded &&
                d.status.phase != Phase::kFailed;
  report.now = now;
  report.job_created = job.created_at;
  if (job.spec.elastic) {
    report.replica_groups = {d.status.replica_groups, DesiredReplicaGroups(job.spec)};
  }
}

}  // namespace cohort::op
