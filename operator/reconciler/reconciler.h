#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/client/kube_client.h"

namespace cohort::op {

// One level-triggered reconcile pass of a DistributedJob (STYLE.md, "Kubernetes side"):
// get the job (NotFound: done) -> observe its pods -> Decide() -> before creating pods, make sure
// the Service and token Secret exist -> create and delete pods -> write the status once, only if
// it changed -> emit the Events after the write succeeded. An invalid spec creates nothing.
//
// Thread-safe for different jobs; the work queue never hands one job to two workers.
class Reconciler {
 public:
  Reconciler(KubeClient* client, Clock* clock,
             std::function<std::string()> new_token = nullptr);

  // When to look at the job again (nullopt: on the next change only). Errors: Aborted (the
  // status write conflicted: requeue at once), Unavailable (API trouble: requeue with backoff),
  // others from the API.
  absl::StatusOr<std::optional<absl::Duration>> Reconcile(const std::string& ns,
                                                          const std::string& name);

 private:
  KubeClient* const client_;
  Clock* const clock_;
  std::function<std::string()> new_token_;
};

}  // namespace cohort::op
