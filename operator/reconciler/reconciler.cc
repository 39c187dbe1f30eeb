#include "operator/reconciler/reconciler.h"

#include <atomic>
#include <thread>

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
namespace {

using json = nlohmann::json;

// Whether `object`'s controller is the job with this uid. An object without a controller
// reference that carries the job-name label is treated as the job's (made by hand).
bool OwnedBy(const json& object, const std::string& job_uid) {
  if (job_uid.empty()) return true;
  for (const json& ref : kube::ArrayMember(kube::Member(object, "metadata"), "ownerReferences")) {
    if (kube::BoolMember(ref, "controller")) return kube::StringMember(ref, "uid") == job_uid;
  }
  return true;
}

// Creates an object of job `job_uid` unless it exists already. One left by an earlier job of the
// same name (still being garbage-collected) is deleted, and the pass retried (Unavailable).
absl::Status Ensure(kube::KubeClient* client, const kube::Resource& r, const std::string& ns,
                    const json& obj, const std::string& job_uid) {
  absl::StatusOr<json> created = client->Create(r, ns, obj);
  if (created.ok()) return absl::OkStatus();
  if (!absl::IsAlreadyExists(created.status())) return created.status();
  std::string name = obj["metadata"].value("name", "");
  absl::StatusOr<json> existing = client->Get(r, ns, name);
  if (absl::IsNotFound(existing.status()))
    return absl::UnavailableError(absl::StrCat(r.plural, "/", name, " vanished; retrying"));
  if (!existing.ok()) return existing.status();
  if (OwnedBy(*existing, job_uid)) return absl::OkStatus();
  absl::Status deleted = client->Delete(r, ns, name);
  if (!deleted.ok() && !absl::IsNotFound(deleted)) return deleted;
  return absl::UnavailableError(absl::StrCat(
      r.plural, "/", name, " belongs to an earlier job of the same name; deleted it, retrying"));
}

json EventObject(const DistributedJob& job, const Event& e, absl::Time now, int index) {
  static std::atomic<uint64_t> sequence{0};
  std::string stamp = FormatRfc3339(now);
  return {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata",
       {{"name", absl::StrCat(job.name, ".", absl::ToUnixNanos(now), ".", index, ".", ++sequence)},
        {"namespace", job.namespace_}}},
      {"involvedObject",
       {{"apiVersion", absl::StrCat(kGroup, "/", kVersion)},
        {"kind", kKind},
        {"name", job.name},
        {"namespace", job.namespace_},
        {"uid", job.uid}}},
      {"type", e.type},
      {"reason", e.reason},
      {"message", e.message},
      {"firstTimestamp", stamp},
      {"lastTimestamp", stamp},
      {"count", 1},
      {"source", {{"component", "cohort-operator"}}},
      {"reportingComponent", "cohort-operator"}};
}

}  // namespace

Reconciler::Reconciler(kube::KubeClient* client, Clock* clock,
                       std::function<std::string()> new_token, int pod_create_parallelism,
                       DecideOptions decide_options)
    : client_(client),
      clock_(clock),
      new_token_(new_token ? std::move(new_token) : GenerateToken),
      pod_create_parallelism_(std::max(1, pod_create_parallelism)),
      decide_options_(decide_options) {}

absl::Status Reconciler::EnsurePodGroup(const DistributedJob& job, int32_t restart_attempt) {
  const PodGroupProvider provider = job.spec.scheduling.pod_group.provider;
  if (provider == PodGroupProvider::kNone) return absl::OkStatus();
  const std::string api_version = PodGroupApiVersion(provider);
  const kube::Resource r{api_version.substr(0, api_version.find('/')),
                         api_version.substr(api_version.find('/') + 1), "podgroups"};
  absl::StatusOr<json> groups =
      client_->List(r, job.namespace_, absl::StrCat(kJobNameLabel, "=", job.name));
  if (!groups.ok()) {
    const char* hint = provider == PodGroupProvider::kVolcano ? " (is the Volcano CRD installed?)"
                       : provider == PodGroupProvider::kWorkload
                           ? " (does the cluster serve scheduling.k8s.io/v1beta1? "
                             "Kubernetes 1.37 with that API and gang scheduling "
                             "enabled)"
                           : " (is the scheduler-plugins CRD installed?)";
    return absl::Status(
        groups.status().code(),
        absl::StrCat("listing ", r.plural, ".", r.group, hint, ": ", groups.status().message()));
  }
  const std::string current = PodGroupName(job, restart_attempt);
  for (const json& group : kube::ArrayMember(*groups, "items")) {
    const std::string name = kube::StringMember(kube::Member(group, "metadata"), "name");
    if (name == current || !OwnedBy(group, job.uid)) continue;
    absl::Status s = client_->Delete(r, job.namespace_, name);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return Ensure(client_, r, job.namespace_, BuildPodGroup(job, restart_attempt), job.uid);
}

absl::Status Reconciler::CreatePods(const DistributedJob& job, const std::vector<int32_t>& ranks,
                                    int32_t restart_attempt, bool replacements,
                                    ReconcileReport* report) {
  const std::string& ns = job.namespace_;
  std::atomic<size_t> next{0};
  std::atomic<int> created{0};
  absl::Mutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i; (i = next++) < ranks.size();) {
      // Built here, not up front: a 1,000-rank job's pod objects never all exist at once.
      const std::string name = replacements ? ReplacementPodName(job, ranks[i], restart_attempt)
                                            : PodName(job, ranks[i]);
      absl::StatusOr<json> r =
          client_->Create(kube::kPods, ns, BuildPod(job, ranks[i], restart_attempt, name));
      if (r.ok()) {
        ++created;
      } else if (!absl::IsAlreadyExists(r.status())) {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = r.status();
        next = ranks.size();  // Stop early: the next pass retries what is missing.
      }
    }
  };
  size_t threads = std::min<size_t>(ranks.size(), pod_create_parallelism_);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (report != nullptr) report->pods_created += created;
  return first_error;
}

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

absl::StatusOr<std::optional<absl::Duration>> Reconciler::Reconcile(const std::string& ns,
                                                                    const std::string& name,
                                                                    ReconcileReport* report) {
  absl::StatusOr<json> object = client_->Get(kDistributedJobs, ns, name);
  if (absl::IsNotFound(object.status())) {
    if (attempts_ != nullptr) attempts_->Forget(absl::StrCat(ns, "/", name));
    return std::optional<absl::Duration>();
  }
  if (!object.ok()) return object.status();
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(*object);
  if (!job.ok()) return job.status();
  if (job->namespace_.empty()) job->namespace_ = ns;
  if (job->being_deleted) return std::optional<absl::Duration>();

  absl::StatusOr<json> pod_list =
      client_->List(kube::kPods, ns, absl::StrCat(kJobNameLabel, "=", job->name),
                    kube::KubeClient::ListFields::kWithoutSpec);
  if (!pod_list.ok()) return pod_list.status();
  std::vector<ObservedPod> pods;
  std::vector<std::string> stale;  // Pods of an earlier job of the same name.
  for (const json& p : kube::ArrayMember(*pod_list, "items")) {
    if (!OwnedBy(p, job->uid)) {
      // Without a name there is nothing to delete (and an empty name would address the collection).
      if (std::string pod = kube::StringMember(kube::Member(p, "metadata"), "name"); !pod.empty())
        stale.push_back(pod);
    } else if (std::optional<ObservedPod> observed = ObservePod(p, TrainerName(*job))) {
      pods.push_back(*observed);
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
    return std::optional<absl::Duration>(absl::Seconds(1));
  }

  absl::Time now = clock_->Now();
  FillTopologyDomains(*job, pods);
  const std::optional<AttemptView> view = ObserveAttempts(*job, pods);
  Decision d = Decide(*job, pods, now, decide_options_, view ? &*view : nullptr);
  for (const auto& [spare, pod_index] : d.relabel_spares) {
    // Before the order that gives it the slot: from then on, the pod's labels say which slot it
    // holds (its name stays; the next pass sees it as that slot's pod of the attempt).
    const json patch = {{"metadata",
                         {{"labels",
                           {{kRankLabel, absl::StrCat(pod_index)},
                            {kRestartAttemptLabel, absl::StrCat(d.status.restart_attempt)}}}}}};
    absl::StatusOr<json> patched = client_->MergePatch(kube::kPods, ns, spare, patch);
    if (!patched.ok()) return patched.status();
  }
  if (d.start_attempt) {
    // The pods stay: the hub tells every pod's sidecar, which tells cohort-launch; a spare that
    // takes a slot hears the slot's pod index.
    if (absl::Status s =
            attempts_->Start(absl::StrCat(ns, "/", name), *d.start_attempt, d.spare_assignments);
        !s.ok()) {
      return s;
    }
  }
  if (!d.create_ranks.empty() || !d.create_spares.empty()) {
    // Pods need the Service (their DNS names) and the token Secret (a mounted volume). Only
    // then are they ensured, so a steady job costs no API calls for them.
    if (absl::Status s = Ensure(client_, kube::kServices, ns, BuildService(*job), job->uid);
        !s.ok())
      return s;
    // The token is random per job; an existing Secret keeps its token.
    if (absl::Status s =
            Ensure(client_, kube::kSecrets, ns, BuildTokenSecret(*job, new_token_()), job->uid);
        !s.ok()) {
      return s;
    }
    // Spares alone join the group the gang's pods were created with (they are created alone only
    // without a gang scheduler).
    absl::Status s =
        d.create_ranks.empty() ? absl::OkStatus() : EnsurePodGroup(*job, d.status.restart_attempt);
    if (!s.ok()) {
      // Said where the user looks (kubectl describe), not only in the operator's log; the pass is
      // retried with backoff.
      client_
          ->Create(kube::kEvents, ns,
                   EventObject(*job,
                               Event{event_type::kWarning, reason::kPodGroupUnavailable,
                                     absl::StrCat("cannot create the pod group of restart attempt ",
                                                  d.status.restart_attempt, ": ", s.message())},
                               now, 0))
          .IgnoreError();
      return s;
    }
  }
  if (absl::Status s = CreatePods(*job, d.create_ranks, d.status.restart_attempt, false, report);
      !s.ok())
    return s;
  if (absl::Status s = CreatePods(*job, d.replace_ranks, d.status.restart_attempt, true, report);
      !s.ok())
    return s;
  for (int32_t sequence : d.create_spares) {
    absl::StatusOr<json> r =
        client_->Create(kube::kPods, ns, BuildSparePod(*job, sequence, d.status.restart_attempt));
    if (!r.ok() && !absl::IsAlreadyExists(r.status())) return r.status();
    if (r.ok() && report != nullptr) ++report->pods_created;
  }
  for (const std::string& pod : d.delete_pods) {
    absl::Status s = client_->Delete(kube::kPods, ns, pod);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    if (report != nullptr) ++report->pods_deleted;
  }
  for (const std::string& pod : d.force_delete_pods) {
    absl::Status s = client_->Delete(kube::kPods, ns, pod, /*grace_period_seconds=*/0);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    if (report != nullptr) ++report->pods_deleted;
  }
  if (d.delete_job) {
    absl::Status s = client_->Delete(kDistributedJobs, ns, name);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    return std::optional<absl::Duration>();
  }

  DistributedJob updated = *job;
  updated.status = d.status;
  json new_status = StatusToJson(updated);
  if (!object->contains("status") || (*object)["status"] != new_status) {
    json write = *object;
    write["status"] = new_status;
    absl::StatusOr<json> written = client_->UpdateStatus(kDistributedJobs, ns, write);
    if (!written.ok()) return written.status();  // Aborted on conflict: re-read next pass.
  }
  if (report != nullptr) {
    report->phase = d.status.phase;
    for (const Event& e : d.events) report->event_reasons.push_back(e.reason);
    report->restart = d.restart;
    report->started_attempt = d.start_attempt.has_value();
    const Condition* hung = FindCondition(d.status.conditions, condition::kHung);
    report->hung = hung != nullptr && hung->status == "True" &&
                   d.status.phase != Phase::kSucceeded && d.status.phase != Phase::kFailed;
    report->now = now;
    report->job_created = job->created_at;
  }
  // Events only after the status they describe is recorded.
  for (size_t i = 0; i < d.events.size(); ++i) {
    client_->Create(kube::kEvents, ns, EventObject(*job, d.events[i], now, static_cast<int>(i)))
        .IgnoreError();
  }
  return d.requeue_after;
}

}  // namespace cohort::op
