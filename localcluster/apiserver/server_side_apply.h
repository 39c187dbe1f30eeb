#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort::local {

// Server-side apply and field ownership (metadata.managedFields), as far as Helm 4 (which applies
// server-side by default) and `kubectl apply --server-side` use them.
//
// A field is a path to a value that is not an object with members: a scalar, a list, or an
// empty object. Lists are atomic: one manager owns a list whole (Kubernetes merges some lists by
// key; here a second manager setting one item of a list another owns conflicts). Identity and
// bookkeeping fields (apiVersion, kind, metadata.name/namespace/uid/resourceVersion/generation/
// creationTimestamp/deletionTimestamp/managedFields) and, for kinds with a status subresource,
// status are nobody's. Ownership is written in Kubernetes' FieldsV1 form
// ({"f:spec": {"f:replicas": {}}}), so `kubectl get -o yaml --show-managed-fields` reads it.

// The object an apply by `manager` stores: `applied` created (when `current` is null) or merged
// into `current`. The manager comes to own exactly the fields of `applied`: fields it applied
// before and leaves out now are removed, unless another manager owns them too. Setting a field
// that another manager owns to a different value is a conflict: Aborted (409 Conflict) naming
// each field and its owner, unless `force`, which takes the fields over.
absl::StatusOr<nlohmann::json> ServerSideApply(const nlohmann::json* current,
                                               const nlohmann::json& applied,
                                               const std::string& manager, bool force,
                                               bool status_subresource, absl::Time now);

// After any other write (create, update, patch) by `manager`: it owns the fields whose values
// changed from `before` (null on create) to `after`, and no other manager owns them any more;
// fields gone from `after` are nobody's. Updates `after`'s metadata.managedFields (operation
// Update).
void RecordUpdate(const nlohmann::json* before, nlohmann::json& after, const std::string& manager,
                  bool status_subresource, absl::Time now);

// The field manager of a request: its fieldManager parameter, else its User-Agent up to the first
// '/' (as Kubernetes does: "kubectl", "helm").
std::string FieldManagerOf(const std::string& field_manager_param, const std::string& user_agent);

}  // namespace cohort::local
