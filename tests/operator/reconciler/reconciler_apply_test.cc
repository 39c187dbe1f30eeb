// Reconciler::Apply: each action of a Decision carried out, in the order reconciler.h promises.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/api/distributed_job.h"
#include "operator/reconciler/children.h"
#include "operator/reconciler/reconciler.h"
#include "tests/kube/fake_kube_client.h"
#include "tests/operator/fake_attempt_watcher.h"
#include "tests/operator/job_builder.h"

namespace cohort::op {
namespace {

using json = nlohmann::json;
using kube::testing::FakeKubeClient;
using ::testing::ElementsAre;
using testing::FakeAttemptWatcher;
using testing::JobBuilder;

// An in-place job with a spare whose four pods (attempt 0) and spare exist.
class ApplyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    json object = JobBuilder().Spec("spares", 1).Spec("restartStrategy", "InPlace").Build();
    ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", object).ok());
    job_ = *ParseDistributedJob(kube_.Object(kDistributedJobs, "ml", "train"));
    job_.namespace_ = "ml";
    for (int32_t rank = 0; rank < 4; ++rank)
      ASSERT_TRUE(kube_.Create(kube::kPods, "ml", BuildPod(job_, rank, 0)).ok());
    ASSERT_TRUE(kube_.Create(kube::kPods, "ml", BuildSparePod(job_, 0, 0)).ok());
    reconciler_.set_attempt_watcher(&hub_);
    kube_.TakeCalls();
  }
  std::string Label(const std::string& pod, const char* label) {
    return kube_.Object(kube::kPods, "ml", pod)["metadata"]["labels"].value(label, "");
  }
  bool Exists(const std::string& pod) { return kube_.Get(kube::kPods, "ml", pod).ok(); }
  // Pod 2 is gone; the spare takes its slot in restart attempt 1.
  static Decision SpareTakesSlot2() {
    Decision d;
    d.status.restart_attempt = 1;
    d.start_attempt = 1;
    d.relabel_spares = {{"train-spare0", 2}};
    d.spare_assignments = {{2, "train-spare0"}};
    d.delete_pods = {"train-2"};
    return d;
  }

  FakeClock clock_;
  FakeKubeClient kube_;
  FakeAttemptWatcher hub_;
  Reconciler reconciler_{&kube_, &clock_, [] { return std::string("fixed-token"); }};
  DistributedJob job_;
};

TEST_F(ApplyTest, SpareRelabelledBeforeTheOrderThatGivesItTheSlot) {
  std::string rank_at_order, attempt_at_order;
  hub_.on_start = [&](int32_t) {
    rank_at_order = Label("train-spare0", kRankLabel);
    attempt_at_order = Label("train-spare0", kRestartAttemptLabel);
    return absl::OkStatus();
  };
  ASSERT_TRUE(reconciler_.Apply(job_, SpareTakesSlot2(), clock_.Now()).ok());
  EXPECT_EQ(rank_at_order, "2") << "the spare's labels name its slot when the order goes out";
  EXPECT_EQ(attempt_at_order, "1");
  EXPECT_EQ(hub_.started, 1);
  EXPECT_THAT(hub_.assignments, ElementsAre(std::pair<int32_t, std::string>{2, "train-spare0"}));
  EXPECT_EQ(Label("train-spare0", kSpareLabel), "train-spare0") << "it stays known as a spare";
  EXPECT_FALSE(Exists("train-2"));
}

TEST_F(ApplyTest, FailedOrder_StopsThePassBeforeAnythingIsCreatedOrDeleted) {
  hub_.on_start = [](int32_t) {
    return absl::FailedPreconditionError("spare 'train-spare0' does not follow the attempt hub");
  };
  Decision d = SpareTakesSlot2();
  d.replace_ranks = {3};
  d.create_spares = {1};
  ReconcileReport report;
  absl::Status s = reconciler_.Apply(job_, d, clock_.Now(), &report);
  EXPECT_THAT(kube_.TakeCalls(), ElementsAre("patch /pods")) << "the relabel, then nothing";
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("does not follow"));
  EXPECT_FALSE(hub_.started.has_value());
  EXPECT_TRUE(Exists("train-2")) << "no pod deleted after a failed order";
  EXPECT_FALSE(Exists(ReplacementPodName(job_, 3, 1)));
  EXPECT_FALSE(Exists(SparePodName(job_, 1)));
  EXPECT_EQ(report.pods_created + report.pods_deleted, 0);
  // The relabel (made before the order) stays: the next pass sees the spare in its slot and
  // orders again.
  EXPECT_EQ(Label("train-spare0", kRankLabel), "2");
}

TEST_F(ApplyTest, CreationsBeforeDeletions_AFailedCreateDeletesNothing) {
  kube_.FailCalls("create /pods", absl::UnavailableError("the API server is away"));
  Decision d;
  d.status.restart_attempt = 1;
  d.replace_ranks = {1};
  d.delete_pods = {"train-1"};
  absl::Status s = reconciler_.Apply(job_, d, clock_.Now());
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(Exists("train-1")) << "the pod stays until its replacement was created";

  kube_.FailCalls("create /pods", absl::OkStatus());
  ReconcileReport report;
  ASSERT_TRUE(reconciler_.Apply(job_, d, clock_.Now(), &report).ok());
  EXPECT_TRUE(Exists(ReplacementPodName(job_, 1, 1)));
  EXPECT_FALSE(Exists("train-1"));
  EXPECT_EQ(report.pods_created, 1);
  EXPECT_EQ(report.pods_deleted, 1);
}

TEST_F(ApplyTest, ServiceAndSecretOnlyWhenPodsAreCreated) {
  Decision deletes_only;
  deletes_only.delete_pods = {"train-3"};
  ASSERT_TRUE(reconciler_.Apply(job_, deletes_only, clock_.Now()).ok());
  EXPECT_THAT(kube_.TakeCalls(), ElementsAre("delete /pods"));
  EXPECT_EQ(kube_.Count(kube::kServices), 0u);

  Decision spare_only;
  spare_only.create_spares = {1};
  ASSERT_TRUE(reconciler_.Apply(job_, spare_only, clock_.Now()).ok());
  EXPECT_EQ(kube_.Count(kube::kServices), 1u);
  EXPECT_EQ(kube_.Count(kube::kSecrets), 1u);
  EXPECT_TRUE(Exists(SparePodName(job_, 1)));
}

TEST_F(ApplyTest, PodGroupUnavailable_WarningEventAndNoPods) {
  json object =
      JobBuilder("gang").Spec("scheduling", {{"podGroup", {{"provider", "volcano"}}}}).Build();
  ASSERT_TRUE(kube_.Create(kDistributedJobs, "ml", object).ok());
  DistributedJob gang = *ParseDistributedJob(kube_.Object(kDistributedJobs, "ml", "gang"));
  kube_.FailCalls("list scheduling.volcano.sh/podgroups",
                  absl::NotFoundError("the server could not find the requested resource"));
  Decision d;
  d.create_ranks = {0, 1, 2, 3};
  absl::Status s = reconciler_.Apply(gang, d, clock_.Now());
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("is the Volcano CRD installed?"));
  EXPECT_FALSE(Exists("gang-0"));
  json events = *kube_.List(kube::kEvents, "ml", "");
  ASSERT_EQ(events["items"].size(), 1u);
  EXPECT_EQ(events["items"][0]["reason"], "PodGroupUnavailable");
  EXPECT_EQ(events["items"][0]["type"], "Warning");
}

TEST_F(ApplyTest, DeleteJob_AfterItsPodsAndForceDeletes) {
  Decision d;
  d.delete_pods = {"train-0"};
  d.force_delete_pods = {"train-1"};
  d.delete_job = true;
  ASSERT_TRUE(reconciler_.Apply(job_, d, clock_.Now()).ok());
  EXPECT_THAT(kube_.deleted(),
              ElementsAre("pods/train-0", "pods/train-1", "distributedjobs/train"));
}

}  // namespace
}  // namespace cohort::op
