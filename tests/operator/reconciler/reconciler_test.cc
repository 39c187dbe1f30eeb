#include "operator/reconciler/reconciler.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/job_decision.h"
#include "tests/kube/fake_kube_client.h"
#include "tests/operator/job_builder.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using kube::testing::FakeKubeClient;
using ::testing::Contains;
using ::testing::HasSubstr;
using testing::JobBuilder;

class ReconcilerTest : public ::testing::Test {
 protected:
  void Apply(json obj) { ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", obj).ok()); }
  absl::StatusOr<std::optional<absl::Duration>> Pass() {
    return reconciler_.Reconcile("ml", "train");
  }
  DistributedJob Job() {
    return *ParseDistributedJob(kube_.Object(kDistributedJobs, "ml", "train"));
  }
  void SetPods(const std::function<void(int rank, json& status)>& f) {
    for (int r = 0; r < 4; ++r) {
      kube_.Modify(kube::kPods, "ml", absl::StrCat("train-", r),
                   [&](json& pod) { f(r, pod["status"]); });
    }
  }
  std::vector<std::string> EventReasons() {
    std::vector<std::string> reasons;
    json events = *kube_.List(kube::kEvents, "ml", "");
    for (const json& e : events["items"]) reasons.push_back(e["reason"]);
    return reasons;
  }
  static void Running(json& status) {
    status = {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
  }

  FakeClock clock_;
  FakeKubeClient kube_;
  Reconciler reconciler_{&kube_, &clock_, [] { return std::string("fixed-token"); }};
};

TEST_F(ReconcilerTest, NewJob_CreatesServiceSecretAndEveryRank) {
  Apply(JobBuilder().Build());
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(kube_.Count(kube::kServices), 1u);
  // Written as stringData, stored base64-encoded in data, as the API server does.
  EXPECT_EQ(kube_.Object(kube::kSecrets, "ml", "train-token")["data"]["token"], "Zml4ZWQtdG9rZW4=");
  EXPECT_EQ(kube_.Count(kube::kPods), 4u);
  EXPECT_EQ(kube_.Object(kube::kPods, "ml", "train-3")["metadata"]["labels"]["cohort.dev/rank"],
            "3");
  DistributedJob job = Job();
  EXPECT_EQ(job.status.phase, Phase::kPending);
  EXPECT_EQ(job.status.coordinator_address, "train-0.train.ml.svc:8476");
  EXPECT_THAT(EventReasons(), Contains("Started"));
}

TEST_F(ReconcilerTest, PodsRunning_StatusRunningOnceWithoutRewrites) {
  Apply(JobBuilder().Build());
  ASSERT_TRUE(Pass().ok());
  SetPods([](int, json& s) { Running(s); });
  ASSERT_TRUE(Pass().ok());
  DistributedJob job = Job();
  EXPECT_EQ(job.status.phase, Phase::kRunning);
  EXPECT_EQ(job.status.ready, 4);
  EXPECT_FALSE(job.status.start_time.empty());
  int writes = kube_.status_writes();
  size_t creates = kube_.created().size();
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(kube_.status_writes(), writes) << "nothing changed, so nothing is written";
  EXPECT_EQ(kube_.created().size(), creates) << "a steady job costs no create calls";
  EXPECT_EQ(kube_.Count(kube::kPods), 4u) << "no duplicate pods";
}

TEST_F(ReconcilerTest, RankFails_GangDeletedRestartCountedThenRecreated) {
  Apply(JobBuilder().Build());
  ASSERT_TRUE(Pass().ok());
  SetPods([](int, json& s) { Running(s); });
  ASSERT_TRUE(Pass().ok());
  SetPods([](int r, json& s) {
    if (r == 1) {
      s = {{"phase", "Failed"},
           {"containerStatuses",
            {{{"name", "trainer"},
              {"state", {{"terminated", {{"exitCode", 3}, {"message", "bad batch"}}}}}}}}};
    }
  });
  absl::StatusOr<std::optional<absl::Duration>> requeue = Pass();
  ASSERT_TRUE(requeue.ok());
  EXPECT_EQ(*requeue, absl::Seconds(10));
  EXPECT_EQ(kube_.Count(kube::kPods), 0u);
  DistributedJob job = Job();
  EXPECT_EQ(job.status.phase, Phase::kRestarting);
  EXPECT_EQ(job.status.restarts, 1);
  EXPECT_EQ(job.status.restart_attempt, 1);
  EXPECT_THAT(EventReasons(), Contains("GangRestart"));
  clock_.Advance(absl::Seconds(10));
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(kube_.Count(kube::kPods), 4u);
  EXPECT_EQ(kube_.Object(kube::kPods, "ml",
                         "train-0")["metadata"]["labels"]["cohort.dev/restart-attempt"],
            "1");
}

TEST_F(ReconcilerTest, InvalidSpec_NothingCreatedConditionAndEvent) {
  Apply(JobBuilder().Spec("replicas", 0).Build());
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(kube_.Count(kube::kPods), 0u);
  EXPECT_EQ(kube_.Count(kube::kServices), 0u);
  DistributedJob job = Job();
  const Condition* c = FindCondition(job.status.conditions, "SpecValid");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_THAT(c->message, HasSubstr("spec.replicas"));
  EXPECT_THAT(EventReasons(), Contains("InvalidSpec"));
}

// A field the operator cannot even parse (a cluster whose CRD has no schema lets it through) is the
// user's to fix: a condition and an Event say which field, what it holds and how to write it; no
// pods, and no retry loop: the next look comes from the watch when the job is edited.
TEST_F(ReconcilerTest, UnparsableFields_SpecValidFalseEventNoPodsAndNoRetry) {
  Apply(JobBuilder().Spec("restartBackoff", "soon").Spec("replicas", "four").Build());
  absl::StatusOr<std::optional<absl::Duration>> requeue = Pass();
  ASSERT_TRUE(requeue.ok()) << "a spec error is not retried with backoff: " << requeue.status();
  EXPECT_FALSE(requeue->has_value()) << "nothing to look at again until the job changes";
  EXPECT_EQ(kube_.Count(kube::kPods), 0u);
  EXPECT_EQ(kube_.Count(kube::kServices), 0u);
  EXPECT_EQ(kube_.Count(kube::kSecrets), 0u);
  json status = kube_.Object(kDistributedJobs, "ml", "train")["status"];
  std::string message;
  for (const json& c : status["conditions"]) {
    if (c["type"] == "SpecValid") {
      EXPECT_EQ(c["status"], "False");
      EXPECT_EQ(c["reason"], "InvalidSpec");
      message = c["message"];
    }
  }
  EXPECT_THAT(message, HasSubstr("spec.replicas: expected an integer, got \"four\""));
  EXPECT_THAT(message, HasSubstr("write a whole number without quotes"));
  EXPECT_THAT(message,
              HasSubstr("spec.restartBackoff: 'soon' is not a duration; write it like 30s"));
  EXPECT_THAT(EventReasons(), ::testing::ElementsAre("InvalidSpec"));
  json events = *kube_.List(kube::kEvents, "ml", "");
  EXPECT_EQ(events["items"][0]["type"], "Warning");
  EXPECT_EQ(events["items"][0]["message"], message);

  // Looking again changes nothing: no second write, no second Event.
  int writes = kube_.status_writes();
  requeue = Pass();
  ASSERT_TRUE(requeue.ok()) << requeue.status();
  EXPECT_FALSE(requeue->has_value());
  EXPECT_EQ(kube_.status_writes(), writes);
  EXPECT_EQ(EventReasons().size(), 1u);

  // The user fixes the spec: the next pass (from the watch) starts the job.
  kube_.Modify(kDistributedJobs, "ml", "train", [](json& job) {
    job["spec"]["replicas"] = 2;
    job["spec"]["restartBackoff"] = "5s";
    job["metadata"]["generation"] = 2;
  });
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(kube_.Count(kube::kPods), 2u);
  const Condition* valid = FindCondition(Job().status.conditions, "SpecValid");
  ASSERT_NE(valid, nullptr);
  EXPECT_EQ(valid->status, "True");
}

TEST_F(ReconcilerTest, JobGone_NothingToDo) {
  absl::StatusOr<std::optional<absl::Duration>> requeue = Pass();
  ASSERT_TRUE(requeue.ok());
  EXPECT_FALSE(requeue->has_value());
  EXPECT_EQ(kube_.Count(kube::kPods), 0u);
}

TEST_F(ReconcilerTest, TtlAfterSuccess_DeletesTheJob) {
  Apply(JobBuilder().Spec("ttlSecondsAfterFinished", 30).Build());
  ASSERT_TRUE(Pass().ok());
  SetPods([](int, json& s) { Running(s); });
  ASSERT_TRUE(Pass().ok());
  SetPods([](int, json& s) {
    s = {{"phase", "Succeeded"},
         {"containerStatuses",
          {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  });
  ASSERT_TRUE(Pass().ok());
  EXPECT_EQ(Job().status.phase, Phase::kSucceeded);
  clock_.Advance(absl::Seconds(30));
  ASSERT_TRUE(Pass().ok());
  EXPECT_THAT(kube_.deleted(), Contains("distributedjobs/train"));
}

TEST_F(ReconcilerTest, RecreatedUnderSameName_PredecessorsPodsNeitherJudgedNorKept) {
  Apply(JobBuilder().Build());
  ASSERT_TRUE(Pass().ok());
  SetPods([](int, json& s) {
    s = {{"phase", "Succeeded"},
         {"containerStatuses",
          {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 0}}}}}}}}};
  });
  // kubectl delete + apply: the new job has a new uid while the old pods still exist (a busy
  // garbage collector has not removed them yet).
  kube_.PauseGarbageCollection(true);
  ASSERT_TRUE(kube_.Delete(kDistributedJobs, "ml", "train").ok());
  json again = JobBuilder().Build();
  again["metadata"]["uid"] = "u-2";
  Apply(again);
  absl::StatusOr<std::optional<absl::Duration>> requeue = Pass();
  ASSERT_TRUE(requeue.ok()) << requeue.status();
  EXPECT_TRUE(requeue->has_value()) << "look again once the old pods are gone";
  EXPECT_EQ(kube_.Count(kube::kPods), 0u) << "the old job's pods are deleted";
  EXPECT_NE(Job().status.phase, Phase::kSucceeded) << "the old job's results are not the new job's";

  // The old Service and Secret are replaced too, so the new pods do not lose them to the
  // garbage collector later.
  absl::StatusOr<std::optional<absl::Duration>> pass = Pass();
  EXPECT_TRUE(absl::IsUnavailable(pass.status())) << pass.status();
  for (int i = 0; i < 3 && !pass.ok(); ++i) pass = Pass();  // One stale object per pass.
  ASSERT_TRUE(pass.ok()) << pass.status();
  std::string uid = "u-2";
  EXPECT_EQ(kube_.Count(kube::kPods), 4u);
  EXPECT_EQ(
      kube_.Object(kube::kSecrets, "ml", "train-token")["metadata"]["ownerReferences"][0]["uid"],
      uid);
  EXPECT_EQ(kube_.Object(kube::kServices, "ml", "train")["metadata"]["ownerReferences"][0]["uid"],
            uid);
}

}  // namespace
}  // namespace cohort::op
