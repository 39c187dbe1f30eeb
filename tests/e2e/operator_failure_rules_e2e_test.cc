// End to end, the operator: spec.failurePolicy.rules. The fixture and the shared helpers:
// operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

TEST_F(OperatorE2E, FailureRules_FailJobOnExitCode_FailsAtOnce_WithoutRulesRestarts) {
  auto op = Operator();
  const std::string rules = OneRule("FailJob", R"(onExitCodes: {operator: In, values: [3]})");
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-fail", 2, "k8s-rank1-exits-3", rules))
                .exit_code,
            0);
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-none", 2, "k8s-rank1-exits-3")).exit_code, 0);

  json failed = cluster_->WaitForJob("default", "e2e-rule-fail", Finished, kJobTimeout);
  ASSERT_EQ(Phase(failed), "Failed") << failed.dump(2) << Events(*cluster_, "e2e-rule-fail");
  EXPECT_EQ(StatusInt(failed, "restarts"), 0);
  EXPECT_EQ(StatusInt(failed, "restartAttempt"), 0);
  const std::string events = EventsOnceThereIs(*cluster_, "e2e-rule-fail", "FailurePolicy");
  EXPECT_THAT(events, HasSubstr("FailurePolicy: rank 1 (pod e2e-rule-fail-1) exited with code 3"));
  EXPECT_THAT(events,
              HasSubstr("rule 0 (FailJob, exit code 3 of container trainer): the job fails"));
  bool condition = false;
  for (const json& c : failed["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Failed" && c.value("reason", "") == "FailurePolicy") {
      condition = absl::StrContains(c.value("message", ""), "rule 0 (FailJob");
    }
  }
  EXPECT_TRUE(condition) << failed.dump(2);

  json restarted = cluster_->WaitForJob("default", "e2e-rule-none", Finished, kJobTimeout);
  ASSERT_EQ(Phase(restarted), "Succeeded")
      << restarted.dump(2) << Events(*cluster_, "e2e-rule-none");
  EXPECT_EQ(StatusInt(restarted, "restarts"), 1);
  EXPECT_EQ(restarted["status"].value("lastRestartKind", ""), "Failure");
}

// An OOM kill matched by its reason: rank 1's trainer outgrows its 100Mi memory limit, the
// kubelet kills it and reports OOMKilled (exit 137); an onTerminationReasons rule fails the job
// at once, naming the reason, where an exit code alone (137) would have been a counted restart.

TEST_F(OperatorE2E, FailureRules_OomKilledMatchedByReason_FailsTheJobNamingIt) {
  auto op = Operator();
  const std::string rules = OneRule("FailJob", "onTerminationReasons: [OOMKilled]");
  std::string yaml = absl::StrReplaceAll(JobYaml("e2e-rule-oom", 2, "k8s-rank1-oom", rules),
                                         {{R"(command: ["test-trainer", "k8s-rank1-oom"])",
                                           "command: [\"test-trainer\", \"k8s-rank1-oom\"]\n       "
                                           "   resources: {limits: {memory: 100Mi}}"}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-rule-oom", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Failed") << job.dump(2) << Events(*cluster_, "e2e-rule-oom");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  // The Failed condition is written with the phase (the Event only after the status write).
  std::string failed;
  for (const json& c : job["status"].value("conditions", json::array())) {
    if (c.value("type", "") == "Failed") failed = c.value("message", "");
  }
  EXPECT_THAT(failed, HasSubstr("rank 1 (pod e2e-rule-oom-1) exited with code 137"));
  EXPECT_THAT(failed,
              HasSubstr("rule 0 (FailJob, reason OOMKilled of container trainer): the job fails"));
  EXPECT_THAT(TrainerLog(*cluster_, "e2e-rule-oom", 1),
              HasSubstr("local kubelet: OOMKilled: resident memory"));
}

// RestartJobAndIgnoreMaxRestarts with maxRestarts 0: the exit-4 failure restarts anyway, is
// counted apart, and the next attempt succeeds.

TEST_F(OperatorE2E, FailureRules_IgnoreMaxRestarts_RestartsWithMaxRestartsZeroAndSucceeds) {
  auto op = Operator();
  const std::string rules =
      OneRule("RestartJobAndIgnoreMaxRestarts", R"(onExitCodes: {operator: In, values: [4]})");
  std::string yaml = absl::StrReplaceAll(JobYaml("e2e-rule-ignore", 2, "k8s-rank1-exits-4", rules),
                                         {{"maxRestarts: 2", "maxRestarts: 0"}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "e2e-rule-ignore", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-rule-ignore");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_EQ(StatusInt(job, "uncountedRestarts"), 1);
  EXPECT_EQ(StatusInt(job, "restartAttempt"), 1);
  EXPECT_THAT(
      Events(*cluster_, "e2e-rule-ignore"),
      HasSubstr("rule 0 (RestartJobAndIgnoreMaxRestarts, exit code 4 of container trainer)"));
}

// A DisruptionTarget rule: an evicted pod (the eviction subresource, as kubectl drain) fails the
// job instead of restarting it as a preemption.

TEST_F(OperatorE2E, FailureRules_DisruptionTargetRule_EvictionFailsTheJob) {
  auto op = Operator();
  const std::string rules =
      OneRule("FailJob", R"(onPodConditions: [{type: DisruptionTarget, status: "True"}])");
  ASSERT_EQ(cluster_->Kubectl({"apply"}, JobYaml("e2e-rule-evict", 2, "k8s-hold", rules)).exit_code,
            0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-rule-evict", AllReady, kJobTimeout)));
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-rule-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  json job = cluster_->WaitForJob("default", "e2e-rule-evict", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Failed") << job.dump(2) << Events(*cluster_, "e2e-rule-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-rule-evict", "FailurePolicy"),
              HasSubstr("rule 0 (FailJob, condition DisruptionTarget=True): the job fails"));
}

// An invalid rule is refused with the field named: by the CRD's schema at apply where it can
// say so, and by the operator (SpecValid=False) for what no schema says.

TEST_F(OperatorE2E, FailureRules_Invalid_RefusedNamingTheField) {
  auto op = Operator();
  LocalControlPlane::Result refused = cluster_->Kubectl(
      {"apply"}, JobYaml("e2e-rule-bad", 2, "k8s",
                         OneRule("Explode", R"(onExitCodes: {operator: In, values: [3]})")));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("action")) << refused.output;
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, JobYaml("e2e-rule-nomatcher", 2, "k8s", R"(  failurePolicy:
    rules:
      - action: FailJob
)"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob(
      "default", "e2e-rule-nomatcher",
      [](const json& j) {
        for (const json& c : j.value("status", json::object()).value("conditions", json::array())) {
          if (c.value("type", "") == "SpecValid" && c.value("status", "") == "False") return true;
        }
        return false;
      },
      kJobTimeout);
  EXPECT_THAT(job.dump(), HasSubstr("spec.failurePolicy.rules[0]: needs a matcher")) << job.dump(2);
}

// At scale: 64 ranks (64 trainers, 64 sidecars) through the operator; one trainer killed; every
// old pod must go (each kubelet confirms its deletion even while the API server is busy with 63
// others: once a final delete was lost and 2 pods stayed terminating for good) and the gang must
// restart and succeed.

}  // namespace
}  // namespace cohort::testing
