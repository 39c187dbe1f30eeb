// The local API server's handling of custom resources against their CRD's schema: pruning,
// defaults, validation, and errors worded as a real API server words them (the expected strings
// are the real server's for the same input).
#include "localcluster/apiserver/schema_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/localcluster/crd_fixture.h"

namespace cohort::local {
namespace {

using json = nlohmann::json;
using testing::DistributedJobSchema;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Job;

FieldError TypeError(const std::string& field, const std::string& detail) {
  return {"FieldValueTypeInvalid", field, detail};
}
FieldError InvalidError(const std::string& field, const std::string& detail) {
  return {"FieldValueInvalid", field, detail};
}

// --- Pruning ---

TEST(PruneUnknownFields, UndeclaredFieldsRemovedAndNamedByPath) {
  json job = Job();
  job["spec"]["replicaz"] = 3;
  job["spec"]["sidecar"] = {{"image", "s:1"}, {"imagee", "typo"}};
  job["specc"] = {{"x", 1}};
  job["metadata"]["labelz"] = {{"a", "b"}};
  job["metadata"]["labels"] = {{"a", "b"}};
  std::vector<std::string> pruned = PruneUnknownFields(DistributedJobSchema(), job);
  EXPECT_THAT(pruned,
              ElementsAre("metadata.labelz", "spec.replicaz", "spec.sidecar.imagee", "specc"));
  EXPECT_FALSE(job["spec"].contains("replicaz"));
  EXPECT_FALSE(job.contains("specc"));
  EXPECT_EQ(job["spec"]["sidecar"], json({{"image", "s:1"}}));
  EXPECT_EQ(job["metadata"]["labels"]["a"], "b") << "ObjectMeta fields stay";
  EXPECT_EQ(job["apiVersion"], "cohort.dev/v1alpha1");
  EXPECT_EQ(job["kind"], "DistributedJob");
}

TEST(PruneUnknownFields, PreserveUnknownFieldsKeepsTheWholeSubtree) {
  json job = Job();
  job["spec"]["template"]["spec"]["anything"] = {{"goes", {1, 2}}};
  job["spec"]["sidecar"] = {{"resources", {{"limits", {{"cpu", "1"}}}, {"vendorThing", true}}}};
  EXPECT_THAT(PruneUnknownFields(DistributedJobSchema(), job), IsEmpty());
  EXPECT_TRUE(job["spec"]["template"]["spec"].contains("anything"));
  EXPECT_TRUE(job["spec"]["sidecar"]["resources"]["vendorThing"]);
}

TEST(PruneUnknownFields, ListItemsAreNamedByIndex) {
  json schema = {
      {"type", "object"},
      {"properties",
       {{"items",
         {{"type", "array"},
          {"items", {{"type", "object"}, {"properties", {{"a", {{"type", "string"}}}}}}}}}}}};
  json object = {{"items", {{{"a", "x"}}, {{"a", "y"}, {"b", 1}}}}};
  EXPECT_THAT(PruneUnknownFields(schema, object), ElementsAre("items[1].b"));
  EXPECT_EQ(object["items"][1], json({{"a", "y"}}));
}

TEST(PruneUnknownFields, EmbeddedResourceKeepsApiVersionKindAndObjectMeta) {
  json schema = {{"type", "object"},
                 {"properties",
                  {{"child",
                    {{"type", "object"},
                     {"x-kubernetes-embedded-resource", true},
                     {"properties", {{"spec", {{"type", "object"}}}}}}}}}};
  json object = {{"child",
                  {{"apiVersion", "v1"},
                   {"kind", "ConfigMap"},
                   {"metadata", {{"name", "c"}, {"bogus", 1}}},
                   {"spec", json::object()},
                   {"extra", 1}}}};
  EXPECT_THAT(PruneUnknownFields(schema, object),
              ElementsAre("child.extra", "child.metadata.bogus"));
  EXPECT_EQ(object["child"]["kind"], "ConfigMap");
  EXPECT_EQ(object["child"]["metadata"], json({{"name", "c"}}));
}

// --- Defaults ---

TEST(ApplyDefaults, MissingFieldsAndTheirChildrenGetTheSchemaDefaults) {
  json job = Job();
  job["spec"].erase("replicas");
  ApplyDefaults(DistributedJobSchema(), job);
  const json& spec = job["spec"];
  EXPECT_EQ(spec["replicas"], 1);
  EXPECT_EQ(spec["coordinatorPort"], 8476);
  EXPECT_EQ(spec["maxRestarts"], 3);
  EXPECT_EQ(spec["restartBackoff"], "10s");
  EXPECT_EQ(spec["suspend"], false);
  // sidecar defaults to {}, whose own fields then get theirs.
  EXPECT_EQ(spec["sidecar"], json({{"image", "ghcr.io/cohort-dev/cohort-sidecar:0.1.0"},
                                   {"imagePullPolicy", "IfNotPresent"},
                                   {"heartbeatTimeout", "10s"}}));
  EXPECT_FALSE(spec.contains("ttlSecondsAfterFinished")) << "no default, nothing set";
}

TEST(ApplyDefaults, ValuesGivenAreKeptAndNullsTakeTheDefaultOrGo) {
  json job = Job();
  job["spec"]["maxRestarts"] = 0;
  job["spec"]["replicas"] = nullptr;
  job["spec"]["ttlSecondsAfterFinished"] = nullptr;
  job["spec"]["sidecar"] = {{"image", "mine:2"}};
  ApplyDefaults(DistributedJobSchema(), job);
  EXPECT_EQ(job["spec"]["maxRestarts"], 0);
  EXPECT_EQ(job["spec"]["replicas"], 1);
  EXPECT_FALSE(job["spec"].contains("ttlSecondsAfterFinished"));
  EXPECT_EQ(job["spec"]["sidecar"]["image"], "mine:2");
  EXPECT_EQ(job["spec"]["sidecar"]["imagePullPolicy"], "IfNotPresent");
}

// --- Validation against the project's CRD, with the real server's wording ---

struct Case {
  std::string name;
  std::function<void(json&)> change;
  std::vector<FieldError> expected;
};

class CrdValidationTest : public ::testing::TestWithParam<Case> {};

TEST_P(CrdValidationTest, ErrorsAsTheApiServerWritesThem) {
  json job = Job();
  GetParam().change(job);
  ApplyDefaults(DistributedJobSchema(), job);
  std::vector<FieldError> errors = ValidateAgainstSchema(DistributedJobSchema(), job);
  std::vector<FieldError> structure = ValidateStructure(DistributedJobSchema(), job);
  errors.insert(errors.end(), structure.begin(), structure.end());
  std::vector<std::string> got, want;
  for (const FieldError& e : errors) got.push_back(e.reason + " " + e.ToString());
  for (const FieldError& e : GetParam().expected) want.push_back(e.reason + " " + e.ToString());
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(
    Table, CrdValidationTest,
    ::testing::Values(
        Case{"Valid", [](json&) {}, {}},
        Case{"IntegralFloatIsAnInteger", [](json& j) { j["spec"]["replicas"] = 4.0; }, {}},
        Case{"ReplicasString",
             [](json& j) { j["spec"]["replicas"] = "four"; },
             {TypeError("spec.replicas",
                        "Invalid value: \"string\": spec.replicas in body must be of type integer: "
                        "\"string\"")}},
        Case{"ReplicasFraction",
             [](json& j) { j["spec"]["replicas"] = 2.5; },
             {TypeError("spec.replicas",
                        "Invalid value: \"number\": spec.replicas in body must be of type integer: "
                        "\"number\"")}},
        Case{"ReplicasZero",
             [](json& j) { j["spec"]["replicas"] = 0; },
             {InvalidError(
                 "spec.replicas",
                 "Invalid value: 0: spec.replicas in body should be greater than or equal to 1")}},
        Case{"ReplicasTooMany",
             [](json& j) { j["spec"]["replicas"] = 100001; },
             {InvalidError("spec.replicas",
                           "Invalid value: 100001: spec.replicas in body should be less than or "
                           "equal to 100000")}},
        Case{"SuspendString",
             [](json& j) { j["spec"]["suspend"] = "yes"; },
             {TypeError("spec.suspend",
                        "Invalid value: \"string\": spec.suspend in body must be of type boolean: "
                        "\"string\"")}},
        Case{"TemplateNotObject",
             [](json& j) { j["spec"]["template"] = 3; },
             {TypeError("spec.template",
                        "Invalid value: \"integer\": spec.template in body must be of type object: "
                        "\"integer\"")}},
        Case{"NoTemplate",
             [](json& j) { j["spec"].erase("template"); },
             {{"FieldValueRequired", "spec.template", "Required value"}}},
        Case{"NoSpec",
             [](json& j) { j.erase("spec"); },
             {{"FieldValueRequired", "spec", "Required value"}}},
        Case{"PullPolicyNotInEnum",
             [](json& j) {
               j["spec"]["sidecar"] = {{"imagePullPolicy", "Sometimes"}};
             },
             {{"FieldValueNotSupported", "spec.sidecar.imagePullPolicy",
               "Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", "
               "\"Never\""}}},
        Case{"EmptySidecarImage",
             [](json& j) {
               j["spec"]["sidecar"] = {{"image", ""}};
             },
             {InvalidError("spec.sidecar.image",
                           "Invalid value: \"\": spec.sidecar.image in body should be at least 1 "
                           "chars long")}},
        Case{"BadTransitionTime",
             [](json& j) {
               j["status"] = {{"conditions",
                               {{{"type", "Running"},
                                 {"status", "True"},
                                 {"lastTransitionTime", "yesterday"}}}}};
             },
             {TypeError("status.conditions[0].lastTransitionTime",
                        "Invalid value: \"yesterday\": status.conditions[0].lastTransitionTime in "
                        "body must be of "
                        "type date-time: \"yesterday\"")}},
        Case{"ConditionWithoutStatus",
             [](json& j) {
               j["status"] = {{"conditions", {{{"type", "Running"}}}}};
             },
             {{"FieldValueRequired", "status.conditions[0].status", "Required value"}}},
        Case{"DuplicateConditionType",
             [](json& j) {
               j["status"] = {{"conditions",
                               {{{"type", "Running"}, {"status", "True"}},
                                {{"type", "Running"}, {"status", "False"}}}}};
             },
             {{"FieldValueDuplicate", "status.conditions[1]",
               "Duplicate value: map[string]interface {}{\"type\":\"Running\"}"}}},
        Case{"SeveralProblems",
             [](json& j) {
               j["spec"]["replicas"] = 0;
               j["spec"]["suspend"] = 1;
               j["spec"].erase("template");
             },
             {InvalidError(
                  "spec.replicas",
                  "Invalid value: 0: spec.replicas in body should be greater than or equal to 1"),
              TypeError("spec.suspend",
                        "Invalid value: \"integer\": spec.suspend in body must be of type boolean: "
                        "\"integer\""),
              {"FieldValueRequired", "spec.template", "Required value"}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(ValidateAgainstSchema, StatusWrite_FieldsPrefixedMessagesRelativeToStatus) {
  // A status write is checked against the status schema alone, as the real server does: the
  // field names the whole path, the message the path below status.
  json status_schema = DistributedJobSchema()["properties"]["status"];
  std::vector<FieldError> errors =
      ValidateAgainstSchema(status_schema, {{"phase", "Bogus"}, {"ready", "x"}}, "status");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(
      errors[0].ToString(),
      "status.phase: Unsupported value: \"Bogus\": supported values: \"Pending\", \"Running\", "
      "\"Restarting\", \"Succeeded\", \"Failed\", \"Suspended\"");
  EXPECT_EQ(
      errors[1].ToString(),
      "status.ready: Invalid value: \"string\": ready in body must be of type integer: \"string\"");
}

// --- The remaining keywords, on small schemas ---

std::vector<std::string> Errors(const json& schema, const json& value) {
  std::vector<std::string> out;
  for (const FieldError& e : ValidateAgainstSchema(schema, value))
    out.push_back(e.reason + " " + e.ToString());
  for (const FieldError& e : ValidateStructure(schema, value))
    out.push_back(e.reason + " " + e.ToString());
  return out;
}
json Object(const std::string& field, json property) {
  return {{"type", "object"}, {"properties", {{field, std::move(property)}}}};
}

TEST(ValidateAgainstSchema, IntOrString) {
  json schema = Object("port", {{"x-kubernetes-int-or-string", true}});
  EXPECT_THAT(Errors(schema, {{"port", 80}}), IsEmpty());
  EXPECT_THAT(Errors(schema, {{"port", "http"}}), IsEmpty());
  EXPECT_THAT(
      Errors(schema, {{"port", true}}),
      ElementsAre(
          "FieldValueTypeInvalid port: Invalid value: \"boolean\": port in body must be of type "
          "integer,string: \"boolean\""));
}

TEST(ValidateAgainstSchema, StringsPatternAndLength) {
  json schema = Object("code", {{"type", "string"}, {"pattern", "^[a-z]+$"}, {"maxLength", 3}});
  EXPECT_THAT(Errors(schema, {{"code", "abc"}}), IsEmpty());
  EXPECT_THAT(
      Errors(schema, {{"code", "ABCD"}}),
      ElementsAre(
          "FieldValueTooLong code: Too long: may not be more than 3 bytes",
          "FieldValueInvalid code: Invalid value: \"ABCD\": code in body should match '^[a-z]+$'"));
  EXPECT_THAT(Errors(Object("one", {{"type", "string"}, {"maxLength", 1}}), {{"one", "ab"}}),
              ElementsAre("FieldValueTooLong one: Too long: may not be more than 1 byte"));
}

TEST(ValidateAgainstSchema, NumbersExclusiveBoundsMultipleOfAndFloats) {
  EXPECT_THAT(
      Errors(Object("n", {{"type", "integer"}, {"minimum", 0}, {"exclusiveMinimum", true}}),
             {{"n", 0}}),
      ElementsAre("FieldValueInvalid n: Invalid value: 0: n in body should be greater than 0"));
  EXPECT_THAT(
      Errors(Object("n", {{"type", "integer"}, {"multipleOf", 4}}), {{"n", 6}}),
      ElementsAre("FieldValueInvalid n: Invalid value: 6: n in body should be a multiple of 4"));
  EXPECT_THAT(
      Errors(Object("x", {{"type", "number"}, {"maximum", 1000000}}), {{"x", 2500000.5}}),
      ElementsAre(
          "FieldValueInvalid x: Invalid value: 2.5000005e+06: x in body should be less than or "
          "equal to 1e+06"));
  EXPECT_THAT(Errors(Object("x", {{"type", "number"}, {"maximum", 0.5}}), {{"x", 0.75}}),
              ElementsAre("FieldValueInvalid x: Invalid value: 0.75: x in body should be less than "
                          "or equal to 0.5"));
}

TEST(ValidateAgainstSchema, ListsItemsBoundsUniquenessAndSets) {
  json schema = Object(
      "l", {{"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 1}, {"maxItems", 2}});
  EXPECT_THAT(Errors(schema, {{"l", {1, 2}}}), IsEmpty());
  EXPECT_THAT(
      Errors(schema, {{"l", json::array()}}),
      ElementsAre("FieldValueInvalid l: Invalid value: 0: l in body should have at least 1 items"));
  EXPECT_THAT(
      Errors(schema, {{"l", {1, "x", 3}}}),
      ElementsAre(
          "FieldValueTypeInvalid l[1]: Invalid value: \"string\": l[1] in body must be of type "
          "integer: \"string\"",
          "FieldValueTooMany l: Too many: 3: must have at most 2 items"));
  EXPECT_THAT(
      Errors(Object("u", {{"type", "array"}, {"uniqueItems", true}}), {{"u", {1, 1}}}),
      ElementsAre(
          "FieldValueInvalid u: Invalid value: \"\": u in body shouldn't contain duplicates"));
  EXPECT_THAT(Errors(Object("s", {{"type", "array"},
                                  {"x-kubernetes-list-type", "set"},
                                  {"items", {{"type", "string"}}}}),
                     {{"s", {"a", "b", "a"}}}),
              ElementsAre("FieldValueDuplicate s[2]: Duplicate value: \"a\""));
}

TEST(ValidateAgainstSchema, NullOnlyWhereNullable) {
  EXPECT_THAT(Errors(Object("n", {{"type", "string"}, {"nullable", true}}), {{"n", nullptr}}),
              IsEmpty());
  EXPECT_THAT(
      Errors(Object("n", {{"type", "string"}}), {{"n", nullptr}}),
      ElementsAre(
          "FieldValueTypeInvalid n: Invalid value: \"null\": n in body must be of type string: "
          "\"null\""));
}

TEST(ValidateAgainstSchema, AdditionalPropertiesSchemaChecksEveryValue) {
  json schema = Object("m", {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}});
  EXPECT_THAT(
      Errors(schema, {{"m", {{"a", 1}, {"b", "two"}}}}),
      ElementsAre(
          "FieldValueTypeInvalid m.b: Invalid value: \"string\": m.b in body must be of type "
          "integer: \"string\""));
}

TEST(ValidateAgainstSchema, EmbeddedResourceNeedsApiVersionAndKind) {
  json schema = Object("child", {{"type", "object"},
                                 {"x-kubernetes-embedded-resource", true},
                                 {"x-kubernetes-preserve-unknown-fields", true}});
  EXPECT_THAT(Errors(schema, {{"child", {{"apiVersion", "v1"}, {"kind", "Pod"}}}}), IsEmpty());
  EXPECT_THAT(Errors(schema, {{"child", {{"kind", ""}}}}),
              ElementsAre("FieldValueRequired child.apiVersion: Required value: must not be empty",
                          "FieldValueInvalid child.kind: Invalid value: \"\": must not be empty"));
}

// --- The Status of a rejected write ---

TEST(InvalidStatus, OneErrorInTheMessageCausesInTheDetails) {
  json status = InvalidStatus("cohort.dev", "DistributedJob", "train",
                              {TypeError("spec.replicas",
                                         "Invalid value: \"string\": spec.replicas in body must be "
                                         "of type integer: \"string\"")});
  EXPECT_EQ(
      status["message"],
      "DistributedJob.cohort.dev \"train\" is invalid: spec.replicas: Invalid value: \"string\": "
      "spec.replicas in body must be of type integer: \"string\"");
  EXPECT_EQ(status["code"], 422);
  EXPECT_EQ(status["reason"], "Invalid");
  EXPECT_EQ(status["status"], "Failure");
  EXPECT_EQ(status["details"],
            json::parse(R"({"name":"train","group":"cohort.dev","kind":"DistributedJob",
      "causes":[{"reason":"FieldValueTypeInvalid","field":"spec.replicas",
                 "message":"Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""}]})"));
}

TEST(InvalidStatus, SeveralErrorsInBracketsOnce) {
  FieldError a = {"FieldValueRequired", "spec.template", "Required value"};
  FieldError b = {"FieldValueRequired", "spec", "Required value"};
  json status = InvalidStatus("cohort.dev", "DistributedJob", "x", {a, b, a});
  EXPECT_EQ(status["message"],
            "DistributedJob.cohort.dev \"x\" is invalid: [spec.template: Required value, spec: "
            "Required value]");
  EXPECT_EQ(status["details"]["causes"].size(), 3u);
}

TEST(StatusError, CarriesTheStatusBody) {
  json body = InvalidStatus("g", "K", "n", {{"FieldValueRequired", "f", "Required value"}});
  absl::Status s = StatusError(body);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_EQ(std::string(s.message()), body["message"].get<std::string>());
  ASSERT_TRUE(StatusBody(s).has_value());
  EXPECT_EQ(*StatusBody(s), body);
  EXPECT_FALSE(StatusBody(absl::InvalidArgumentError("plain")).has_value());
}

TEST(ParseFieldValidation, DefaultWarnAndUnknownValuesRejected) {
  EXPECT_EQ(*ParseFieldValidation("", "CreateOptions"), FieldValidation::kWarn);
  EXPECT_EQ(*ParseFieldValidation("Strict", "CreateOptions"), FieldValidation::kStrict);
  EXPECT_EQ(*ParseFieldValidation("Ignore", "CreateOptions"), FieldValidation::kIgnore);
  absl::StatusOr<FieldValidation> bad = ParseFieldValidation("strict", "PatchOptions");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: "
            "\"strict\": supported "
            "values: \"\", \"Ignore\", \"Strict\", \"Warn\"");
}

// --- The whole write ---

ResourceType DistributedJobs() {
  ResourceType t{
      "cohort.dev", "v1alpha1", "distributedjobs", "distributedjob", "DistributedJob", true,
      true,         {}};
  t.schema = std::make_shared<const json>(DistributedJobSchema());
  return t;
}

TEST(AdmitCustomResource, UnknownFieldPerFieldValidation) {
  json job = Job();
  job["spec"]["replicaz"] = 3;
  std::vector<std::string> warnings;

  json strict = job;
  absl::Status s = AdmitCustomResource(
      DistributedJobs(), {CustomResourceWrite::Verb::kCreate, false, FieldValidation::kStrict},
      strict, &warnings);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;  // 400 BadRequest.
  EXPECT_EQ(s.message(),
            "DistributedJob in version \"v1alpha1\" cannot be handled as a DistributedJob: strict "
            "decoding error: "
            "unknown field \"spec.replicaz\"");

  json warned = job;
  ASSERT_TRUE(
      AdmitCustomResource(DistributedJobs(),
                          {CustomResourceWrite::Verb::kCreate, false, FieldValidation::kWarn},
                          warned, &warnings)
          .ok());
  EXPECT_THAT(warnings, ElementsAre("unknown field \"spec.replicaz\""));
  EXPECT_FALSE(warned["spec"].contains("replicaz"));
  EXPECT_EQ(warned["spec"]["coordinatorPort"], 8476) << "defaults applied";

  warnings.clear();
  json ignored = job;
  ASSERT_TRUE(
      AdmitCustomResource(DistributedJobs(),
                          {CustomResourceWrite::Verb::kUpdate, false, FieldValidation::kIgnore},
                          ignored, &warnings)
          .ok());
  EXPECT_THAT(warnings, IsEmpty());
  EXPECT_FALSE(ignored["spec"].contains("replicaz"));
}

TEST(AdmitCustomResource, StrictPatch_InvalidQuotingThePatchedObject) {
  json job = Job();
  job["spec"]["replicaz"] = 3;
  json patched = job;
  absl::Status s = AdmitCustomResource(
      DistributedJobs(), {CustomResourceWrite::Verb::kPatch, false, FieldValidation::kStrict},
      patched, nullptr);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  std::optional<json> body = StatusBody(s);
  ASSERT_TRUE(body.has_value());
  EXPECT_EQ((*body)["code"], 422);
  const json& cause = (*body)["details"]["causes"][0];
  EXPECT_EQ(cause["field"], "patch");
  EXPECT_THAT(cause["message"].get<std::string>(), HasSubstr("\\\"replicaz\\\":3"));
  EXPECT_THAT(cause["message"].get<std::string>(),
              HasSubstr("\": strict decoding error: unknown field \"spec.replicaz\""));
  EXPECT_THAT((*body)["message"].get<std::string>(),
              ::testing::StartsWith(" \"\" is invalid: patch: Invalid value: "));
}

TEST(AdmitCustomResource, InvalidValue_422NamingTheObject) {
  json job = Job("bad");
  job["spec"]["replicas"] = "four";
  absl::Status s = AdmitCustomResource(DistributedJobs(), {}, job, nullptr);
  ASSERT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(s.message(),
            "DistributedJob.cohort.dev \"bad\" is invalid: spec.replicas: Invalid value: "
            "\"string\": spec.replicas in "
            "body must be of type integer: \"string\"");
}

TEST(AdmitCustomResource, StatusWriteChecksOnlyTheStatus) {
  json job = Job();
  job["status"] = {{"phase", "Running"}, {"ready", 2}};
  EXPECT_TRUE(AdmitCustomResource(DistributedJobs(), {CustomResourceWrite::Verb::kUpdate, true},
                                  job, nullptr)
                  .ok());
  job["status"]["ready"] = "two";
  absl::Status s = AdmitCustomResource(DistributedJobs(),
                                       {CustomResourceWrite::Verb::kUpdate, true}, job, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(
      s.message(),
      HasSubstr("status.ready: Invalid value: \"string\": ready in body must be of type integer"));
}

TEST(AdmitCustomResource, NoSchemaNoChecks) {
  ResourceType pods{"", "v1", "pods", "pod", "Pod", true, true, {}};
  json pod = {{"metadata", {{"name", "p"}}}, {"spec", {{"whatever", 1}}}};
  json before = pod;
  EXPECT_TRUE(
      AdmitCustomResource(
          pods, {CustomResourceWrite::Verb::kCreate, false, FieldValidation::kStrict}, pod, nullptr)
          .ok());
  EXPECT_EQ(pod, before);
}

}  // namespace
}  // namespace cohort::local
