#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/kube_client.h"

namespace cohort::kube {

struct LeaderElectionOptions {
  std::string ns = "cohort-system";
  std::string name = "cohort-operator";               // The Lease.
  std::string identity;                               // This replica: unique (host name and pid).
  absl::Duration lease_duration = absl::Seconds(15);  // Others wait this long after a renewal.
  absl::Duration renew_deadline = absl::Seconds(10);  // The leader gives up if it cannot renew.
  absl::Duration retry_period = absl::Seconds(2);     // Between attempts.
};

// Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules: a replica takes the
// Lease when it is free or its holder has not renewed it for lease_duration (measured on this
// replica's clock from when it last saw the record change, so clock skew between replicas does
// not matter); the holder renews every retry_period and steps down if it could not renew within
// renew_deadline. Writes carry the resourceVersion read, so two candidates never both win.
// Not thread-safe: one loop calls it.
class LeaderElector {
 public:
  LeaderElector(KubeClient* client, Clock* clock, LeaderElectionOptions options);

  // One attempt: true while this replica holds the Lease. Errors are API failures (the caller
  // retries after retry_period).
  absl::StatusOr<bool> TryAcquireOrRenew();
  // Gives the Lease up (for a graceful shutdown), so another replica takes over at once.
  absl::Status Release();

  // Blocks until this replica leads (true) or `stop` is notified (false).
  bool AcquireBlocking(absl::Notification& stop);
  // Renews every retry_period until leadership is lost (returns false) or `stop` is notified
  // (returns true). Leadership is lost when another replica took the Lease, or when no renewal
  // succeeded within renew_deadline (the API server is unreachable: another replica may take
  // over once the lease runs out, so this one must stop acting first). Waits on the clock.
  bool RenewBlocking(absl::Notification& stop);

  const LeaderElectionOptions& options() const { return options_; }

 private:
  nlohmann::json Record(absl::Time now, const nlohmann::json& previous) const;

  KubeClient* const client_;
  Clock* const clock_;
  const LeaderElectionOptions options_;
  nlohmann::json observed_spec_;  // The Lease spec last seen, and when it changed.
  absl::Time observed_at_;
  absl::Time last_renewed_ = absl::InfinitePast();
};

}  // namespace cohort::kube
