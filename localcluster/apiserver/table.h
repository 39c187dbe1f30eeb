#pragma once

// What `kubectl get` prints: the Table the local API server answers a request for one with
// (Accept: application/json;as=Table), with a CRD's printer columns or a kind's usual ones.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localcluster/apiserver/object_store.h"

namespace cohort::local {

// "5s", "3m", "2h", "4d": kubectl's AGE.
std::string HumanAge(absl::Duration d);

// A meta.k8s.io/v1 Table of `objects` of kind `t` at `now` (for the ages), at `resource_version`.
nlohmann::json ToTable(const ResourceType& t, const std::vector<nlohmann::json>& objects,
                       absl::Time now, const std::string& resource_version);

}  // namespace cohort::local
