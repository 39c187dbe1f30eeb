#pragma once

// What apiextensions-apiserver does to a custom resource on every write, against the structural
// schema (openAPIV3Schema) of its CustomResourceDefinition, in the same order:
//
//   request body -> prune unknown fields -> apply defaults -> validate -> stored
//                   fieldValidation=Strict: rejected (400),
//                   Warn (the default): dropped, one Warning header each,
//                   Ignore: dropped silently
//
// Messages are built the way the real server builds them (kube-openapi's validator errors turned
// into k8s.io/apimachinery field.Errors, then one Status), so kubectl, and anything written
// against a real cluster, sees the same text, quirks included:
//
//   DistributedJob.cohort.dev "train" is invalid: spec.replicas: Invalid value: "string":
//   spec.replicas in body must be of type integer: "string"
//
// Checked: type (an integral 4.0 is an integer), nullable, required, enum, minimum/maximum
// (exclusive), multipleOf, minLength/maxLength, pattern (ECMAScript, where Kubernetes uses RE2),
// the date-time and date formats, minItems/maxItems, uniqueItems, minProperties/maxProperties,
// additionalProperties (a schema), allOf, x-kubernetes-int-or-string,
// x-kubernetes-preserve-unknown-fields, x-kubernetes-embedded-resource, and x-kubernetes-list-type
// set/map uniqueness. Not checked: anyOf, oneOf, not, x-kubernetes-validations (CEL), other
// formats; no ratcheting (an update is checked whole, as a create is).
//
// Pure functions of their arguments: thread-safe.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localcluster/apiserver/object_store.h"

namespace cohort::local {

// One problem with one field: a metav1.StatusCause.
struct FieldError {
  // The metav1.CauseType: FieldValueInvalid, FieldValueTypeInvalid, FieldValueRequired,
  // FieldValueNotSupported, FieldValueDuplicate, FieldValueTooLong, FieldValueTooMany.
  std::string reason;
  std::string field;  // "spec.replicas", "spec.template.spec.containers[0].image".
  std::string
      message;  // Without the field: `Invalid value: 0: spec.replicas in body should be ...`.

  // "<field>: <message>", as the real server writes one error.
  std::string ToString() const;
  bool operator==(const FieldError&) const = default;
};

// The request's fieldValidation parameter: what to do with fields the schema does not declare.
enum class FieldValidation { kIgnore, kWarn, kStrict };
// "" is Warn, the server's default. Errors: InvalidArgument (with a Status body) for anything
// but Ignore, Warn and Strict; `options_kind` (CreateOptions, UpdateOptions, PatchOptions) names
// the request's options in it, as the real server does.
absl::StatusOr<FieldValidation> ParseFieldValidation(absl::string_view value,
                                                     absl::string_view options_kind);

// Removes every field of `object`, a whole custom resource, that `schema` does not declare
// (apiVersion and kind stay; metadata keeps the ObjectMeta fields). Returns the removed fields'
// paths ("spec.replicaz", "spec.items[0].x"), in document order.
std::vector<std::string> PruneUnknownFields(const nlohmann::json& schema, nlohmann::json& object);

// Fills every missing property that has a schema `default`, then the properties of what it
// filled; a null where the schema is not nullable takes the default, or is removed when there is
// none.
void ApplyDefaults(const nlohmann::json& schema, nlohmann::json& value);

// Validates `value` against `schema`. Errors name fields `field_prefix` + the path below `value`,
// while their messages use the path below `value` alone ("status" + ".ready" for a status write:
// `status.ready: Invalid value: "string": ready in body must be of type integer: "string"`).
std::vector<FieldError> ValidateAgainstSchema(const nlohmann::json& schema,
                                              const nlohmann::json& value,
                                              const std::string& field_prefix = "");

// x-kubernetes-embedded-resource (apiVersion and kind required) and x-kubernetes-list-type
// set/map (no duplicates) across the whole object: the checks the real server runs after the
// schema's.
std::vector<FieldError> ValidateStructure(const nlohmann::json& schema,
                                          const nlohmann::json& object);

// The Status of a 422 Invalid: `<Kind>.<group> "<name>" is invalid: <error>` (or `[<error>, ...]`
// for several), reason Invalid, details with one cause per error.
nlohmann::json InvalidStatus(const std::string& group, const std::string& kind,
                             const std::string& name, const std::vector<FieldError>& errors);
// An InvalidArgument that carries `status` (a Status object) as the body of its HTTP response.
absl::Status StatusError(const nlohmann::json& status);
// The Status object StatusError() attached, if any.
std::optional<nlohmann::json> StatusBody(const absl::Status& status);

// One write of a custom resource, as the request made it.
struct CustomResourceWrite {
  enum class Verb { kCreate, kUpdate, kPatch };
  Verb verb = Verb::kCreate;
  bool status_only = false;  // The status subresource.
  FieldValidation field_validation = FieldValidation::kWarn;
};

// Everything the server does to `object`, a custom resource of `type` about to be stored: prune
// (as `write.field_validation` says), default, validate (the whole object, or only its status for
// a status write). Under Warn, each pruned field adds `unknown field "<path>"` to `warnings`.
// Errors: FailedPrecondition (400 BadRequest) for unknown fields under Strict on a create or
// update (`DistributedJob in version "v1alpha1" cannot be handled as a DistributedJob: strict
// decoding error: unknown field "spec.replicaz"`); InvalidArgument with a Status body (422) for
// unknown fields under Strict on a patch and for values the schema rejects.
absl::Status AdmitCustomResource(const ResourceType& type, const CustomResourceWrite& write,
                                 nlohmann::json& object, std::vector<std::string>* warnings);

}  // namespace cohort::local
