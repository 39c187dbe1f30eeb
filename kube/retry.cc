#include "kube/retry.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace cohort::kube {

absl::Status RetryOnConflict(const std::function<absl::Status()>& attempt, int attempts) {
  absl::Status status;
  for (int i = 0; i < attempts; ++i) {
    status = attempt();
    if (!absl::IsAborted(status)) return status;
  }
  return status;
}

absl::Status UpdateStatusWith(KubeClient* client, const Resource& r, const std::string& ns,
                              const std::string& name,
                              const std::function<bool(nlohmann::json& object)>& change) {
  absl::Status status = RetryOnConflict([&]() -> absl::Status {
    absl::StatusOr<nlohmann::json> object = client->Get(r, ns, name);
    if (!object.ok()) return object.status();
    if (!change(*object)) return absl::OkStatus();
    return client->UpdateStatus(r, ns, *object).status();
  });
  if (!absl::IsAborted(status)) return status;
  return absl::AbortedError(absl::StrCat(r.plural, " ", ns.empty() ? "" : absl::StrCat(ns, "/"),
                                         name, " kept changing while its status was written (",
                                         kConflictAttempts, " tries): ", status.message()));
}

}  // namespace cohort::kube
