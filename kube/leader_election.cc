#include "kube/leader_election.h"

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/rfc3339.h"
#include "kube/json_fields.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;

// A Lease's spec as an object whatever the server sent (a hand-edited Lease may have any
// shape): fields of the wrong type read as absent, never throw.
json SpecOf(const json& lease) {
  const json& spec = Member(lease, "spec");
  return spec.is_object() ? spec : json::object();
}

}  // namespace

LeaderElector::LeaderElector(KubeClient* client, Clock* clock, LeaderElectionOptions options)
    : client_(client), clock_(clock), options_(std::move(options)) {}

json LeaderElector::Record(absl::Time now, const json& previous) const {
  json spec = previous.is_object() ? previous : json::object();
  bool transition = StringMember(spec, "holderIdentity") != options_.identity;
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = absl::ToInt64Seconds(options_.lease_duration);
  spec["renewTime"] = FormatRfc3339Micro(now);
  if (transition) {
    spec["acquireTime"] = FormatRfc3339Micro(now);
    spec["leaseTransitions"] =
        IntMember(spec, "leaseTransitions").value_or(0) + (previous.is_object() ? 1 : 0);
  }
  return spec;
}

absl::StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  absl::Time now = clock_->Now();
  absl::StatusOr<json> lease = client_->Get(kLeases, options_.ns, options_.name);
  if (absl::IsNotFound(lease.status())) {
    json object = {{"apiVersion", "coordination.k8s.io/v1"},
                   {"kind", "Lease"},
                   {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                   {"spec", Record(now, json())}};
    absl::StatusOr<json> created = client_->Create(kLeases, options_.ns, object);
    if (absl::IsAlreadyExists(created.status())) return false;  // Another replica was quicker.
    if (!created.ok()) return created.status();
    observed_spec_ = SpecOf(*created);
    observed_at_ = now;
    last_renewed_ = now;
    return true;
  }
  if (!lease.ok()) return lease.status();
  if (!lease->is_object()) {
    return absl::InternalError(absl::StrCat("Lease ", options_.ns, "/", options_.name,
                                            " is not an object: ", lease->dump()));
  }
  json spec = SpecOf(*lease);
  if (spec != observed_spec_) {
    observed_spec_ = spec;
    observed_at_ = now;
  }
  std::string holder = StringMember(spec, "holderIdentity");
  bool mine = holder == options_.identity;
  absl::Duration duration = absl::Seconds(IntMember(spec, "leaseDurationSeconds").value_or(15));
  if (!holder.empty() && !mine && now < observed_at_ + duration) return false;  // Held by another.
  json write = *lease;
  write["spec"] = Record(now, spec);
  absl::StatusOr<json> updated = client_->Update(kLeases, options_.ns, write);
  if (absl::IsAborted(updated.status())) return false;  // Someone else wrote it first.
  if (!updated.ok()) return updated.status();
  if (!mine)
    LogInfo("leader election: ", options_.identity, " acquired Lease ", options_.ns, "/",
            options_.name);
  observed_spec_ = SpecOf(*updated);
  observed_at_ = now;
  last_renewed_ = now;
  return true;
}

absl::Status LeaderElector::Release() {
  absl::StatusOr<json> lease = client_->Get(kLeases, options_.ns, options_.name);
  if (!lease.ok()) return lease.status();
  if (!lease->is_object() || StringMember(SpecOf(*lease), "holderIdentity") != options_.identity) {
    return absl::OkStatus();
  }
  json write = *lease;
  write["spec"] = SpecOf(*lease);
  write["spec"]["holderIdentity"] = "";
  write["spec"]["leaseDurationSeconds"] = 1;
  return client_->Update(kLeases, options_.ns, write).status();
}

bool LeaderElector::AcquireBlocking(absl::Notification& stop) {
  while (!stop.HasBeenNotified()) {
    absl::StatusOr<bool> leading = TryAcquireOrRenew();
    if (!leading.ok()) LogWarning("leader election: ", leading.status().message());
    if (leading.ok() && *leading) return true;
    clock_->WaitFor(stop, options_.retry_period);
  }
  return false;
}

bool LeaderElector::RenewBlocking(absl::Notification& stop) {
  while (!clock_->WaitFor(stop, options_.retry_period)) {
    absl::StatusOr<bool> leading = TryAcquireOrRenew();
    if (!leading.ok()) LogWarning("leader election: cannot renew: ", leading.status().message());
    if (leading.ok() && !*leading) return false;  // Someone else holds it now.
    if (clock_->Now() - last_renewed_ > options_.renew_deadline) return false;
  }
  return true;
}

}  // namespace cohort::kube
