// The apply half of a reconcile pass: one function per action of a Decision (job_decision.h),
// called by Reconciler::Apply in the order that makes each one safe. Reconcile (reconciler.cc)
// observes the job and its pods, Decide (job_decision.cc) says what to do, and this file does it.
#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/log.h"
#include "kube/events.h"
#include "kube/json_fields.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/conditions.h"
#include "operator/reconciler/reconciler.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;

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
  if (OwnedByJob(*existing, job_uid)) return absl::OkStatus();
  absl::Status deleted = client->Delete(r, ns, name);
  if (!deleted.ok() && !absl::IsNotFound(deleted)) return deleted;
  return absl::UnavailableError(absl::StrCat(
      r.plural, "/", name, " belongs to an earlier job of the same name; deleted it, retrying"));
}

json EventObject(const DistributedJob& job, const Event& e, absl::Time now) {
  const kube::ObjectReference involved{absl::StrCat(kGroup, "/", kVersion), kKind, job.namespace_,
                                       job.name, job.uid};
  return kube::MakeEvent(involved, e.type, e.reason, e.message, "cohort-operator", now);
}

}  // namespace

absl::Status Reconciler::Apply(const DistributedJob& job, const Decision& d, absl::Time now,
                               ReconcileReport* report) {
  // A spare is labelled as its slot's pod before the order that gives it the slot: from the
  // order on, the pod's labels must say which slot it holds.
  if (absl::Status s = RelabelSpares(job, d); !s.ok()) return s;
  // A failed order stops the pass before anything is created or deleted: the next pass observes
  // again (the relabelled spares then count as their slots' pods) and orders again.
  if (absl::Status s = StartAttempt(job, d); !s.ok()) return s;
  if (absl::Status s = DrainAttempt(job, d); !s.ok()) return s;
  // Pods need the Service, the token Secret and the pod group before they are created.
  if (absl::Status s = EnsurePodPrerequisites(job, d, now); !s.ok()) return s;
  if (absl::Status s = CreatePods(job, d.create_ranks, d.status.restart_attempt, false, report);
      !s.ok())
    return s;
  if (absl::Status s = CreatePods(job, d.replace_ranks, d.status.restart_attempt, true, report);
      !s.ok())
    return s;
  if (absl::Status s = CreateSpares(job, d, report); !s.ok()) return s;
  // Deletions after creations: a pass that stops on an error has lost no pod it did not replace.
  if (absl::Status s = DeletePods(job, d.delete_pods, std::nullopt, report); !s.ok()) return s;
  if (absl::Status s = DeletePods(job, d.force_delete_pods, 0, report); !s.ok()) return s;
  if (d.delete_job) {
    absl::Status s = client_->Delete(kDistributedJobs, job.namespace_, job.name);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

absl::Status Reconciler::RelabelSpares(const DistributedJob& job, const Decision& d) {
  for (const auto& [spare, pod_index] : d.relabel_spares) {
    // Its name stays; the next pass sees it as that slot's pod of the attempt.
    const json patch = {{"metadata",
                         {{"labels",
                           {{kRankLabel, absl::StrCat(pod_index)},
                            {kRestartAttemptLabel, absl::StrCat(d.status.restart_attempt)}}}}}};
    absl::StatusOr<json> patched = client_->MergePatch(kube::kPods, job.namespace_, spare, patch);
    if (!patched.ok()) return patched.status();
  }
  return absl::OkStatus();
}

absl::Status Reconciler::StartAttempt(const DistributedJob& job, const Decision& d) {
  if (!d.start_attempt) return absl::OkStatus();
  if (attempts_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "restart attempt ", *d.start_attempt, " of job ", job.namespace_, "/", job.name,
        " was to be ordered in place, but this reconciler has no attempt watcher"));
  }
  // The pods stay: the hub tells every pod's sidecar, which tells cohort-launch; a spare that
  // takes a slot hears the slot's pod index.
  return attempts_->Start(absl::StrCat(job.namespace_, "/", job.name), *d.start_attempt,
                          d.spare_assignments, d.start_layout);
}

absl::Status Reconciler::DrainAttempt(const DistributedJob& job, const Decision& d) {
  if (!d.drain_attempt || attempts_ == nullptr) return absl::OkStatus();
  // Repeated on every pass until the processes ended: the hub takes a repeated drain.
  absl::Status s = attempts_->Drain(absl::StrCat(job.namespace_, "/", job.name),
                                    d.drain_attempt->first, d.drain_attempt->second);
  // The hub ran on meanwhile (a failure restarted the gang): the next pass decides anew.
  return absl::IsFailedPrecondition(s) ? absl::OkStatus() : s;
}

absl::Status Reconciler::EnsurePodPrerequisites(const DistributedJob& job, const Decision& d,
                                                absl::Time now) {
  // Only when pods are to be created, so a steady job costs no API calls for them.
  if (d.create_ranks.empty() && d.create_spares.empty()) return absl::OkStatus();
  const std::string& ns = job.namespace_;
  // Pods need the Service (their DNS names) and the token Secret (a mounted volume).
  if (absl::Status s = Ensure(client_, kube::kServices, ns, BuildService(job), job.uid); !s.ok())
    return s;
  // The token is random per job; an existing Secret keeps its token.
  if (absl::Status s =
          Ensure(client_, kube::kSecrets, ns, BuildTokenSecret(job, new_token_()), job.uid);
      !s.ok()) {
    return s;
  }
  // Spares alone join the group the gang's pods were created with (they are created alone only
  // without a gang scheduler).
  if (d.create_ranks.empty()) return absl::OkStatus();
  absl::Status s = EnsurePodGroup(job, d.status.restart_attempt);
  if (!s.ok()) {
    // Said where the user looks (kubectl describe), not only in the operator's log; the pass is
    // retried with backoff.
    const Event failed{event_type::kWarning, reason::kPodGroupUnavailable,
                       absl::StrCat("cannot create the pod group of restart attempt ",
                                    d.status.restart_attempt, ": ", s.message())};
    client_->Create(kube::kEvents, ns, EventObject(job, failed, now)).IgnoreError();
  }
  return s;
}

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
    if (name == current || !OwnedByJob(group, job.uid)) continue;
    absl::Status s = client_->Delete(r, job.namespace_, name);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return Ensure(client_, r, job.namespace_, BuildPodGroup(job, restart_attempt), job.uid);
}

absl::Status Reconciler::CreatePods(const DistributedJob& job, const std::vector<int32_t>& ranks,
                                    int32_t restart_attempt, bool replacements,
                                    ReconcileReport* report) {
  std::atomic<size_t> next{0};
  std::atomic<int> created{0};
  absl::Mutex mu;
  absl::Status first_error;
  auto work = [&] {
    for (size_t i; (i = next++) < ranks.size();) {
      // Built here, not up front: a 1,000-rank job's pod objects never all exist at once.
      const std::string name = replacements ? ReplacementPodName(job, ranks[i], restart_attempt)
                                            : PodName(job, ranks[i]);
      absl::StatusOr<json> r = client_->Create(kube::kPods, job.namespace_,
                                               BuildPod(job, ranks[i], restart_attempt, name));
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

absl::Status Reconciler::CreateSpares(const DistributedJob& job, const Decision& d,
                                      ReconcileReport* report) {
  for (int32_t sequence : d.create_spares) {
    absl::StatusOr<json> r = client_->Create(
        kube::kPods, job.namespace_, BuildSparePod(job, sequence, d.status.restart_attempt));
    if (!r.ok() && !absl::IsAlreadyExists(r.status())) return r.status();
    if (r.ok() && report != nullptr) ++report->pods_created;
  }
  return absl::OkStatus();
}

absl::Status Reconciler::DeletePods(const DistributedJob& job, const std::vector<std::string>& pods,
                                    std::optional<int64_t> grace_period_seconds,
                                    ReconcileReport* report) {
  for (const std::string& pod : pods) {
    absl::Status s = client_->Delete(kube::kPods, job.namespace_, pod, grace_period_seconds);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    if (report != nullptr) ++report->pods_deleted;
  }
  return absl::OkStatus();
}

absl::Status Reconciler::WriteStatus(const json& object, const DistributedJob& job,
                                     const Decision& d) {
  DistributedJob updated = job;
  updated.status = d.status;
  json new_status = StatusToJson(updated);
  if (object.contains("status") && object["status"] == new_status) return absl::OkStatus();
  json write = object;
  write["status"] = std::move(new_status);
  absl::StatusOr<json> written = client_->UpdateStatus(kDistributedJobs, job.namespace_, write);
  return written.status();  // Aborted on conflict: re-read next pass.
}

void Reconciler::EmitEvents(const DistributedJob& job, const std::vector<Event>& events,
                            absl::Time now) {
  for (const Event& e : events)
    client_->Create(kube::kEvents, job.namespace_, EventObject(job, e, now)).IgnoreError();
}

}  // namespace cohort::op
