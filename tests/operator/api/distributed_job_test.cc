#include "operator/api/distributed_job.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/operator/job_builder.h"

namespace cohort::op {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;
using testing::JobBuilder;

TEST(ParseDistributedJob, MinimalJob_DefaultsApplied) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(JobBuilder().Build());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "train");
  EXPECT_EQ(job->namespace_, "ml");
  EXPECT_EQ(job->spec.replicas, 4);
  EXPECT_EQ(job->spec.coordinator_port, 8476);
  EXPECT_EQ(job->spec.max_restarts, 3);
  EXPECT_EQ(job->spec.restart_backoff, absl::Seconds(10));
  EXPECT_FALSE(job->spec.suspend);
  EXPECT_FALSE(job->spec.ttl_seconds_after_finished.has_value());
  EXPECT_EQ(job->spec.sidecar.heartbeat_timeout, absl::Seconds(10));
  EXPECT_THAT(Validate(*job), IsEmpty());
  EXPECT_EQ(CoordinatorAddress(*job), "train-0.train.ml.svc:8476");
}

TEST(ParseDistributedJob, EveryField) {
  json obj = JobBuilder()
                 .Spec("coordinatorPort", 9000)
                 .Spec("maxRestarts", 0)
                 .Spec("restartBackoff", "30s")
                 .Spec("suspend", true)
                 .Spec("ttlSecondsAfterFinished", 600)
                 .Spec("activeDeadlineSeconds", 3600)
                 .Spec("sidecar", {{"image", "sidecar:2"},
                                   {"heartbeatTimeout", "3s"},
                                   {"resources", {{"limits", {{"cpu", "1"}}}}}})
                 .Build();
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(obj);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.coordinator_port, 9000);
  EXPECT_EQ(job->spec.max_restarts, 0);
  EXPECT_EQ(job->spec.restart_backoff, absl::Seconds(30));
  EXPECT_TRUE(job->spec.suspend);
  EXPECT_EQ(job->spec.ttl_seconds_after_finished, 600);
  EXPECT_EQ(job->spec.active_deadline_seconds, 3600);
  EXPECT_EQ(job->spec.sidecar.image, "sidecar:2");
  EXPECT_EQ(job->spec.sidecar.heartbeat_timeout, absl::Seconds(3));
  EXPECT_EQ(job->spec.sidecar.resources["limits"]["cpu"], "1");
}

TEST(ParseDistributedJob, HangDetectionAndPolicy) {
  absl::StatusOr<DistributedJob> defaults = ParseDistributedJob(JobBuilder().Build());
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->spec.hang_detection.timeout_seconds.has_value());  // Automatic.
  EXPECT_EQ(defaults->spec.hang_policy, HangPolicy::kRestart);
  for (auto [name, policy] :
       {std::pair{"Restart", HangPolicy::kRestart}, std::pair{"Fail", HangPolicy::kFail},
        std::pair{"Alert", HangPolicy::kAlert}}) {
    absl::StatusOr<DistributedJob> job =
        ParseDistributedJob(JobBuilder()
                                .Spec("hangPolicy", name)
                                .Spec("hangDetection", {{"timeoutSeconds", 900}})
                                .Build());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec.hang_policy, policy);
    EXPECT_EQ(HangPolicyName(policy), std::string(name));
    EXPECT_EQ(job->spec.hang_detection.timeout_seconds, 900);
    EXPECT_THAT(Validate(*job), IsEmpty());
  }
  absl::StatusOr<DistributedJob> off =
      ParseDistributedJob(JobBuilder().Spec("hangDetection", {{"timeoutSeconds", 0}}).Build());
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->spec.hang_detection.timeout_seconds, 0);
  EXPECT_THAT(Validate(*off), IsEmpty());
  absl::StatusOr<DistributedJob> empty =
      ParseDistributedJob(JobBuilder().Spec("hangDetection", json::object()).Build());
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->spec.hang_detection.timeout_seconds.has_value());
}

// With restartStrategy Recreate nothing finds a hang: Restart and Fail are refused (ValidateTest
// below), but an unset policy and Alert are not, nor a job that already started (created when the
// CRD defaulted hangPolicy to Restart for every job).
TEST(Validate, HangPolicyWithRecreate_UnsetAlertOrAlreadyStartedAccepted) {
  absl::StatusOr<DistributedJob> unset =
      ParseDistributedJob(JobBuilder().Spec("restartStrategy", "Recreate").Build());
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->spec.hang_policy_set);
  EXPECT_EQ(unset->spec.hang_policy, HangPolicy::kRestart);
  EXPECT_THAT(Validate(*unset), IsEmpty());
  absl::StatusOr<DistributedJob> alert = ParseDistributedJob(
      JobBuilder().Spec("restartStrategy", "Recreate").Spec("hangPolicy", "Alert").Build());
  ASSERT_TRUE(alert.ok());
  EXPECT_TRUE(alert->spec.hang_policy_set);
  EXPECT_THAT(Validate(*alert), IsEmpty());
  absl::StatusOr<DistributedJob> started = ParseDistributedJob(
      JobBuilder().Spec("restartStrategy", "Recreate").Spec("hangPolicy", "Restart").Build());
  ASSERT_TRUE(started.ok());
  EXPECT_THAT(Validate(*started), ::testing::SizeIs(1));
  started->status.start_time = "2026-12-01T10:00:00Z";
  EXPECT_THAT(Validate(*started), IsEmpty());
}

struct ParseErrorCase {
  std::string name;
  json object;
  std::string expected;
};

class ParseErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(ParseErrorTest, WrongShape_InvalidArgumentNamingField) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(GetParam().object);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseErrorTest,
    ::testing::Values(ParseErrorCase{"NotObject", json::array(), "JSON object"},
                      ParseErrorCase{"NoName",
                                     JobBuilder().Set("/metadata/name"_json_pointer, "").Build(),
                                     "metadata.name: required"},
                      ParseErrorCase{"MetadataNotObject",
                                     JobBuilder().Set("/metadata"_json_pointer, 3).Build(),
                                     "metadata: expected an object"}),
    [](const ::testing::TestParamInfo<ParseErrorCase>& info) { return info.param.name; });

// A spec field of the wrong type does not stop the parse: the job is still reported on (a
// SpecValid condition), and Validate() names the field, the value and how to write it.
struct SpecTypeCase {
  std::string name;
  json object;
  std::string expected;  // Substring of the one expected error.
};

class SpecTypeTest : public ::testing::TestWithParam<SpecTypeCase> {};

TEST_P(SpecTypeTest, WrongType_ParsedAndOneErrorNamingFieldValueAndFix) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(GetParam().object);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "train");
  std::vector<std::string> errors = Validate(*job);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Table, SpecTypeTest,
    ::testing::Values(
        SpecTypeCase{
            "ReplicasString", JobBuilder().Spec("replicas", "four").Build(),
            "spec.replicas: expected an integer, got \"four\"; write a whole number without "
            "quotes, e.g. replicas: 4"},
        SpecTypeCase{"ReplicasFraction", JobBuilder().Spec("replicas", 2.5).Build(),
                     "spec.replicas: expected an integer, got 2.5"},
        SpecTypeCase{"ReplicasOutOfRange", JobBuilder().Spec("replicas", 5'000'000'000).Build(),
                     "spec.replicas: 5000000000 is out of range"},
        SpecTypeCase{
            "SuspendString", JobBuilder().Spec("suspend", "yes").Build(),
            "spec.suspend: expected true or false, got \"yes\"; write true or false without "
            "quotes"},
        SpecTypeCase{
            "BadBackoff", JobBuilder().Spec("restartBackoff", "soon").Build(),
            "spec.restartBackoff: 'soon' is not a duration; write it like 30s, 250ms, 5m or a "
            "number of seconds"},
        SpecTypeCase{"BackoffObject", JobBuilder().Spec("restartBackoff", {{"s", 1}}).Build(),
                     "spec.restartBackoff: expected a duration like \"30s\", got {\"s\":1}"},
        SpecTypeCase{"TtlString", JobBuilder().Spec("ttlSecondsAfterFinished", "1h").Build(),
                     "spec.ttlSecondsAfterFinished: expected an integer, got \"1h\""},
        SpecTypeCase{"TemplateNotObject", JobBuilder().Spec("template", 3).Build(),
                     "spec.template: expected an object (a pod template), got 3"},
        SpecTypeCase{"SpecNotObject", JobBuilder().Set("/spec"_json_pointer, "x").Build(),
                     "spec: expected an object, got \"x\""},
        SpecTypeCase{"SidecarImageNumber", JobBuilder().Spec("sidecar", {{"image", 5}}).Build(),
                     "spec.sidecar.image: expected a string, got 5; put the value in quotes"},
        SpecTypeCase{"HangTimeoutString",
                     JobBuilder().Spec("hangDetection", {{"timeoutSeconds", "10m"}}).Build(),
                     "spec.hangDetection.timeoutSeconds: expected an integer, got \"10m\"; write a "
                     "whole number "
                     "without quotes, e.g. timeoutSeconds: 4"},
        SpecTypeCase{"HangDetectionNotObject", JobBuilder().Spec("hangDetection", 600).Build(),
                     "spec.hangDetection: expected an object with timeoutSeconds, got 600"},
        SpecTypeCase{"SidecarHeartbeat",
                     JobBuilder().Spec("sidecar", {{"heartbeatTimeout", "often"}}).Build(),
                     "spec.sidecar.heartbeatTimeout: 'often' is not a duration"}),
    [](const ::testing::TestParamInfo<SpecTypeCase>& info) { return info.param.name; });

TEST(ParseDistributedJob, Scheduling_ParsedAndValidatedNamingTheField) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(
      JobBuilder()
          .Spec(
              "scheduling",
              {{"queueName", "team-a"},
               {"schedulerName", "my-coscheduler"},
               {"podGroup",
                {{"provider", "coscheduling"}, {"minMember", 2}, {"scheduleTimeoutSeconds", 30}}}})
          .Build());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.scheduling.queue_name, "team-a");
  EXPECT_EQ(job->spec.scheduling.scheduler_name, "my-coscheduler");
  EXPECT_EQ(job->spec.scheduling.pod_group.provider, PodGroupProvider::kCoscheduling);
  EXPECT_EQ(job->spec.scheduling.pod_group.min_member, 2);
  EXPECT_EQ(job->spec.scheduling.pod_group.schedule_timeout_seconds, 30);
  EXPECT_THAT(Validate(*job), IsEmpty());
  for (const auto& [name, provider] : {std::pair{"volcano", PodGroupProvider::kVolcano},
                                       std::pair{"workload", PodGroupProvider::kWorkload}}) {
    absl::StatusOr<DistributedJob> j = ParseDistributedJob(
        JobBuilder().Spec("scheduling", {{"podGroup", {{"provider", name}}}}).Build());
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ(j->spec.scheduling.pod_group.provider, provider) << name;
    EXPECT_THAT(Validate(*j), IsEmpty()) << name;
  }

  auto errors = [](json scheduling) {
    absl::StatusOr<DistributedJob> j =
        ParseDistributedJob(JobBuilder().Spec("scheduling", scheduling).Build());
    return j.ok() ? ::testing::PrintToString(Validate(*j)) : std::string(j.status().message());
  };
  EXPECT_THAT(errors({{"queueName", "-team"}}),
              HasSubstr("spec.scheduling.queueName: '-team' must be a label value"));
  EXPECT_THAT(errors({{"schedulerName", "Volcano_2"}}),
              HasSubstr("spec.scheduling.schedulerName: 'Volcano_2'"));
  EXPECT_THAT(errors({{"podGroup", json::object()}}), HasSubstr("provider: '' is not a provider"));
  EXPECT_THAT(errors({{"podGroup", {{"provider", "yunikorn"}}}}),
              HasSubstr("'yunikorn' is not a provider"));
  EXPECT_THAT(
      errors({{"podGroup", {{"provider", "volcano"}, {"minMember", 5}}}}),
      HasSubstr("spec.scheduling.podGroup.minMember: must be between 1 and replicas (4), got 5"));
  EXPECT_THAT(errors({{"podGroup", {{"provider", "coscheduling"}, {"scheduleTimeoutSeconds", 0}}}}),
              HasSubstr("scheduleTimeoutSeconds: must be at least 1"));
  // Only scheduler-plugins' PodGroup has a timeout: written for another provider, it is refused
  // rather than silently ignored.
  EXPECT_THAT(errors({{"podGroup", {{"provider", "volcano"}, {"scheduleTimeoutSeconds", 30}}}}),
              HasSubstr("scheduleTimeoutSeconds: only provider coscheduling has it"));
  EXPECT_THAT(errors({{"podGroup", {{"provider", "workload"}, {"scheduleTimeoutSeconds", 30}}}}),
              HasSubstr("Kubernetes' PodGroup waits until its pods are placed: remove the field"));
}

TEST(ParseDistributedJob, IntegralFloat_AcceptedAsInteger) {
  // What a client that decodes JSON numbers as floating point writes back.
  absl::StatusOr<DistributedJob> job =
      ParseDistributedJob(JobBuilder().Spec("replicas", 4.0).Build());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec.replicas, 4);
  EXPECT_THAT(Validate(*job), IsEmpty());
}

TEST(ParseDistributedJob, SeveralWrongTypes_EveryOneReported) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(JobBuilder()
                                                               .Spec("replicas", "four")
                                                               .Spec("restartBackoff", "soon")
                                                               .Spec("suspend", 1)
                                                               .Build());
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> errors = Validate(*job);
  ASSERT_EQ(errors.size(), 3u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr("spec.replicas"));
  EXPECT_THAT(errors[1], HasSubstr("spec.restartBackoff"));
  EXPECT_THAT(errors[2], HasSubstr("spec.suspend"));
}

struct ValidationCase {
  std::string name;
  json object;
  std::string expected;  // Substring of the one expected error.
};

class ValidateTest : public ::testing::TestWithParam<ValidationCase> {};

TEST_P(ValidateTest, InvalidSpec_OneClearError) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(GetParam().object);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> errors = Validate(*job);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Table, ValidateTest,
    ::testing::Values(
        ValidationCase{"ZeroReplicas", JobBuilder().Spec("replicas", 0).Build(),
                       "spec.replicas: must be between 1 and 100000 (got 0)"},
        ValidationCase{"PortTooHigh", JobBuilder().Spec("coordinatorPort", 70000).Build(),
                       "spec.coordinatorPort: must be a port between 1 and 65533 (got 70000)"},
        ValidationCase{"NegativeRestarts", JobBuilder().Spec("maxRestarts", -1).Build(),
                       "spec.maxRestarts: must be 0 or more"},
        ValidationCase{"NegativeTtl", JobBuilder().Spec("ttlSecondsAfterFinished", -5).Build(),
                       "spec.ttlSecondsAfterFinished"},
        ValidationCase{"ZeroDeadline", JobBuilder().Spec("activeDeadlineSeconds", 0).Build(),
                       "spec.activeDeadlineSeconds: must be at least 1"},
        ValidationCase{"NoTemplate", JobBuilder().Erase("template").Build(),
                       "spec.template: required"},
        ValidationCase{
            "NoContainers",
            JobBuilder().Spec("template", {{"spec", {{"containers", json::array()}}}}).Build(),
            "must list at least one container"},
        ValidationCase{
            "ContainerWithoutImage",
            JobBuilder().Spec("template", {{"spec", {{"containers", {{{"name", "t"}}}}}}}).Build(),
            "containers[0].image: required"},
        ValidationCase{
            "ReservedContainerName",
            JobBuilder()
                .Spec("template",
                      {{"spec", {{"containers", {{{"name", "cohort-sidecar"}, {"image", "x"}}}}}}})
                .Build(),
            "reserved"},
        ValidationCase{
            "RestartPolicyAlways",
            JobBuilder().Set("/spec/template/spec/restartPolicy"_json_pointer, "Always").Build(),
            "restartPolicy: must be Never or unset"},
        ValidationCase{"UpperCaseName", JobBuilder("Train").Build(), "must be a DNS label"},
        ValidationCase{"PodNameTooLong",
                       JobBuilder(std::string(60, 'a')).Spec("replicas", 1000).Build(),
                       "longer than 63 characters"},
        ValidationCase{"TinyHeartbeat",
                       JobBuilder().Spec("sidecar", {{"heartbeatTimeout", "10ms"}}).Build(),
                       "spec.sidecar.heartbeatTimeout: must be at least 100ms"},
        ValidationCase{"ZeroProcessesPerPod", JobBuilder().Spec("processesPerPod", 0).Build(),
                       "spec.processesPerPod: must be between 1 and 256, or \"auto\" (got 0)"},
        ValidationCase{"NegativeProcessesPerPod", JobBuilder().Spec("processesPerPod", -2).Build(),
                       "spec.processesPerPod: must be between 1 and 256"},
        ValidationCase{"TooManyProcessesPerPod", JobBuilder().Spec("processesPerPod", 257).Build(),
                       "(got 257)"},
        ValidationCase{"AutoMisspelled", JobBuilder().Spec("processesPerPod", "Auto").Build(),
                       "spec.processesPerPod: \"Auto\" is neither a whole number nor \"auto\""},
        ValidationCase{"TooManyProcessesInAll",
                       JobBuilder().Spec("replicas", 1000).Spec("processesPerPod", 200).Build(),
                       "replicas x processesPerPod = 200000 processes"},
        ValidationCase{"UnknownLauncher", JobBuilder().Spec("launcher", "mpirun").Build(),
                       "spec.launcher: 'mpirun' is not a launcher; write Cohort"},
        ValidationCase{
            "LabelNotAString",
            JobBuilder()
                .Set("/spec/template/metadata"_json_pointer, {{"labels", {{"team", 7}}}})
                .Build(),
            "spec.template.metadata.labels.team: 7 is not a string; put the value in quotes"},
        ValidationCase{"AnnotationsNotAMap",
                       JobBuilder()
                           .Set("/spec/template/metadata"_json_pointer, {{"annotations", "x=y"}})
                           .Build(),
                       "spec.template.metadata.annotations: expected a map of strings"},
        ValidationCase{
            "EnvNotAList",
            JobBuilder().Set("/spec/template/spec/containers/0/env"_json_pointer, "A=1").Build(),
            "spec.template.spec.containers[0].env: expected a list of {name, value}"},
        ValidationCase{"EnvValueNotAString",
                       JobBuilder()
                           .Set("/spec/template/spec/containers/0/env"_json_pointer,
                                {{{"name", "STEPS"}, {"value", 100}}})
                           .Build(),
                       "spec.template.spec.containers[0].env[0].value: 100 is not a string"},
        ValidationCase{
            "EnvWithoutName",
            JobBuilder()
                .Set("/spec/template/spec/containers/0/env"_json_pointer, {{{"value", "1"}}})
                .Build(),
            "spec.template.spec.containers[0].env[0]: needs a name"},
        ValidationCase{"NegativeHangTimeout",
                       JobBuilder().Spec("hangDetection", {{"timeoutSeconds", -1}}).Build(),
                       "spec.hangDetection.timeoutSeconds: must be 0 or more (got -1); leave it "
                       "out for the automatic "
                       "timeout, or write 0 to turn hang detection off"},
        ValidationCase{
            "UnknownHangPolicy", JobBuilder().Spec("hangPolicy", "Kill").Build(),
            "spec.hangPolicy: 'Kill' is not a hang policy; write Restart (restart the gang, "
            "counted "
            "against maxRestarts), Fail (the job fails) or Alert (say so and keep running)"},
        ValidationCase{
            "HangPolicyRestartWithRecreate",
            JobBuilder().Spec("restartStrategy", "Recreate").Spec("hangPolicy", "Restart").Build(),
            "spec.hangPolicy: Restart needs spec.restartStrategy: InPlace (hangs are "
            "found by the attempt hub of a gang that restarts in place; with Recreate "
            "nothing would detect one): set spec.restartStrategy: InPlace, or remove "
            "spec.hangPolicy"},
        ValidationCase{
            "HangPolicyFailWithRecreate",
            JobBuilder().Spec("restartStrategy", "Recreate").Spec("hangPolicy", "Fail").Build(),
            "spec.hangPolicy: Fail needs spec.restartStrategy: InPlace"},
        ValidationCase{"SparesWithoutCommand", JobBuilder().Spec("spares", 1).Build(),
                       "spec.spares: 1 spares need the gang to restart in place"},
        ValidationCase{
            "SparesWithRecreate",
            JobBuilder()
                .Spec("spares", 2)
                .Spec("restartStrategy", "Recreate")
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "set spec.restartStrategy: InPlace"},
        ValidationCase{"NegativeSpares", JobBuilder().Spec("spares", -1).Build(),
                       "spec.spares: must be between 0 and 1000 (got -1)"},
        ValidationCase{
            "SpareNameTooLong",
            JobBuilder(std::string(52, 'a'))
                .Spec("spares", 1)
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spare pods are named '" + std::string(52, 'a') + "-spare0' onwards"},
        ValidationCase{"ElasticWithoutCommand",
                       JobBuilder().Spec("elastic", {{"minReplicas", 2}}).Build(),
                       "spec.elastic: an elastic job resizes by restarting its processes in place"},
        ValidationCase{
            "ElasticMinAboveReplicas",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 5}})
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spec.elastic.minReplicas: must be between 1 and spec.replicas (4) (got 5)"},
        ValidationCase{
            "ElasticReplicasNotWholeGroups",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 3}, {"podsPerGroup", 3}})
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spec.replicas: 4 is not a whole number of replica groups of 3 pods"},
        ValidationCase{
            "ElasticMinNotWholeGroups",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 1}, {"podsPerGroup", 2}})
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spec.elastic.minReplicas: 1 is not a whole number of replica groups of 2 pods"},
        ValidationCase{
            "ElasticWithRecreate",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 2}})
                .Spec("restartStrategy", "Recreate")
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "set spec.restartStrategy: InPlace"},
        ValidationCase{
            "ElasticWithTorchrun",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 2}})
                .Spec("launcher", "Torchrun")
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"torchrun", "t.py"})
                .Build(),
            "spec.elastic: not with spec.launcher: Torchrun"},
        ValidationCase{
            "ElasticWithAQueue",
            JobBuilder()
                .Spec("elastic", {{"minReplicas", 2}})
                .Spec("scheduling", {{"queueName", "team-a"}})
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spec.elastic: not with spec.scheduling's queueName or podGroup"},
        ValidationCase{
            "ElasticWithoutMinReplicas",
            JobBuilder()
                .Spec("elastic", {{"podsPerGroup", 2}})
                .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
                .Build(),
            "spec.elastic.minReplicas: required"},
        ValidationCase{"SeveralProcessesWithoutCommand",
                       JobBuilder().Spec("processesPerPod", 2).Build(),
                       "containers[0].command: required when Cohort starts 2 processes per pod"}),
    [](const ::testing::TestParamInfo<ValidationCase>& info) { return info.param.name; });

TEST(ParseDistributedJob, Elastic_FieldsAndDefaults) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(
      JobBuilder()
          .Spec("elastic", {{"minReplicas", 2}, {"podsPerGroup", 2}, {"shrinkAfterSeconds", 5}})
          .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
          .Build());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->spec.elastic.has_value());
  EXPECT_EQ(job->spec.elastic->min_replicas, 2);
  EXPECT_EQ(job->spec.elastic->pods_per_group, 2);
  EXPECT_EQ(job->spec.elastic->shrink_after_seconds, 5);
  EXPECT_EQ(DesiredReplicaGroups(job->spec), 2);
  EXPECT_THAT(Validate(*job), ::testing::IsEmpty());
  job = ParseDistributedJob(
      JobBuilder()
          .Spec("elastic", {{"minReplicas", 1}})
          .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
          .Build());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec.elastic->pods_per_group, 1);
  EXPECT_EQ(job->spec.elastic->shrink_after_seconds, 60);
  EXPECT_EQ(DesiredReplicaGroups(job->spec), 4);
  EXPECT_FALSE(ParseDistributedJob(JobBuilder().Build())->spec.elastic.has_value());
  EXPECT_EQ(DesiredReplicaGroups(ParseDistributedJob(JobBuilder().Build())->spec), 0);
}

// kubectl scale of a running job without spec.elastic: refused, naming the ways to a new size;
// before it started, or elastic, any valid size goes.
TEST(Validate, ReplicasChangedOnARunningJobWithoutElastic_Refused) {
  DistributedJob job = *ParseDistributedJob(JobBuilder().Spec("replicas", 6).Build());
  job.status.replicas = 4;
  EXPECT_THAT(Validate(job), ::testing::IsEmpty()) << "not started yet";
  job.status.start_time = "2026-12-02T10:00:00Z";
  std::vector<std::string> errors = Validate(job);
  ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr("spec.replicas: 6 is not the size the running job started at "
                                   "(4): a job without spec.elastic keeps its size"));
  job = *ParseDistributedJob(
      JobBuilder()
          .Spec("replicas", 6)
          .Spec("elastic", {{"minReplicas", 2}})
          .Set("/spec/template/spec/containers/0/command"_json_pointer, {"python", "t.py"})
          .Build());
  job.status.replicas = 4;
  job.status.start_time = "2026-12-02T10:00:00Z";
  EXPECT_THAT(Validate(job), ::testing::IsEmpty()) << "an elastic job resizes";
}

TEST(ProcessesPerPod, NumberAutoAndNumericString_Resolve) {
  auto resolved = [](json spec_value, json limits) {
    JobBuilder b;
    b.Spec("processesPerPod", spec_value);
    b.Set("/spec/template/spec/containers/0/command"_json_pointer, json::array({"python"}));
    if (!limits.is_null())
      b.Set("/spec/template/spec/containers/0/resources/limits"_json_pointer, limits);
    absl::StatusOr<DistributedJob> job = ParseDistributedJob(b.Build());
    EXPECT_TRUE(job.ok());
    EXPECT_THAT(Validate(*job), ::testing::IsEmpty()) << spec_value;
    return ResolvedProcessesPerPod(*job);
  };
  EXPECT_EQ(resolved(8, json()), 8);
  EXPECT_EQ(resolved("4", json()), 4);
  EXPECT_EQ(resolved("auto", json{{"nvidia.com/gpu", 8}}), 8);
  EXPECT_EQ(resolved("auto", json{{"nvidia.com/gpu", "2"}}), 2);
  EXPECT_EQ(resolved("auto", json{{"cpu", "4"}}), 1);
  EXPECT_EQ(resolved("auto", json()), 1);
}

TEST(ProcessesPerPod, Unset_OneProcessPerPodAndCohortLaunches) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(JobBuilder().Build());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(ResolvedProcessesPerPod(*job), 1);
  EXPECT_EQ(TotalProcesses(*job), 4);
  EXPECT_EQ(job->spec.launcher, Launcher::kCohort);
}

TEST(ProcessesPerPod, TorchrunLauncher_NoCommandNeeded) {
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(
      JobBuilder().Spec("processesPerPod", 2).Spec("launcher", "Torchrun").Build());
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec.launcher, Launcher::kTorchrun);
  EXPECT_THAT(Validate(*job), ::testing::IsEmpty());
}

// kubectl get's columns: the processes per pod in force, the spares of a job that has some.
TEST(StatusToJson, PrinterColumnsShowWhatIsInForce) {
  DistributedJob job =
      *ParseDistributedJob(JobBuilder().Spec("processesPerPod", 4).Spec("spares", 2).Build());
  job.status.ready_spares = 1;
  json st = StatusToJson(job);
  EXPECT_EQ(st["processesPerPod"], 4);
  EXPECT_EQ(st["sparesText"], "1/2");
  // The scale subresource's status: the pods the running attempt has, their processes, and the
  // selector of the job's pods.
  job.status.replicas = 3;
  st = StatusToJson(job);
  EXPECT_EQ(st["replicas"], 3);
  EXPECT_EQ(st["processes"], 12);
  EXPECT_EQ(st["selector"], "cohort.dev/job-name=train");

  json gpus = JobBuilder().Spec("processesPerPod", "auto").Build();
  gpus["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 8;
  DistributedJob auto_job = *ParseDistributedJob(gpus);
  EXPECT_EQ(StatusToJson(auto_job)["processesPerPod"], 8) << "auto: one per GPU";
  EXPECT_FALSE(StatusToJson(auto_job).contains("sparesText"));
}

TEST(StatusToJson, RoundTripsThroughParse) {
  DistributedJob written = *ParseDistributedJob(JobBuilder().Build());
  DistributedJobStatus& st = written.status;
  st.phase = Phase::kRestarting;
  st.restarts = 2;
  st.preemptions = 1;
  st.ready = 3;
  st.replicas = 4;
  st.coordinator_address = "train-0.train.ml.svc:8476";
  st.observed_generation = 4;
  st.last_hang_id = 12;
  st.spares = 1;
  st.ready_spares = 1;
  st.spares_created = 3;
  st.slots = {{1, "train-spare2"}};
  st.replica_groups = 3;
  st.dropped_replica_groups = {2};
  st.conditions.push_back(Condition{"Running", "False", "GangRestarting",
                                    "rank 2 exited with code 1", "2026-11-22T13:00:00Z", 4});
  json obj = JobBuilder().Build();
  obj["status"] = StatusToJson(written);
  EXPECT_EQ(obj["status"]["readyText"], "3/4");
  absl::StatusOr<DistributedJob> job = ParseDistributedJob(obj);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->status.phase, Phase::kRestarting);
  EXPECT_EQ(job->status.restarts, 2);
  EXPECT_EQ(job->status.preemptions, 1);
  EXPECT_EQ(job->status.replicas, 4);
  EXPECT_EQ(job->status.coordinator_address, "train-0.train.ml.svc:8476");
  EXPECT_EQ(job->status.last_hang_id, 12);
  EXPECT_FALSE(obj["status"].contains("sparesText")) << "the job has no spares: " << obj["status"];
  EXPECT_EQ(obj["status"]["processesPerPod"], 1) << "the default, in force";
  EXPECT_EQ(job->status.spares, 1);
  EXPECT_EQ(job->status.ready_spares, 1);
  EXPECT_EQ(job->status.spares_created, 3);
  EXPECT_EQ(job->status.slots, (std::map<int32_t, std::string>{{1, "train-spare2"}}));
  EXPECT_EQ(job->status.dropped_replica_groups, std::vector<int32_t>{2});
  EXPECT_THAT(job->status.conditions, ElementsAre(st.conditions[0]));
}

}  // namespace
}  // namespace cohort::op
