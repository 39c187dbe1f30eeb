#include "kube/informer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kube/fake_kube_client.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using testing::FakeKubeClient;

json Pod(const std::string& name, const std::string& job = "train") {
  return {{"metadata", {{"name", name}, {"labels", {{"cohort.dev/job-name", job}}}}}};
}

// Each test drives the informer one list-and-watch cycle at a time (RunOnce); the fake's watch
// delivers what happened since the version asked for, then ends like a server's timeout.
class InformerTest : public ::testing::Test {
 protected:
  InformerTest()
      : informer_(
            &kube_, kPods, "ml", "cohort.dev/job-name=train",
            [this](const std::string& type, const json& pod) {
              seen_.push_back(absl::StrCat(type, " ", pod["metadata"].value("name", "")));
            },
            absl::Milliseconds(1)) {}

  std::vector<std::string> Take() { return std::exchange(seen_, {}); }

  FakeKubeClient kube_;
  std::vector<std::string> seen_;
  Informer informer_;
};

TEST_F(InformerTest, FirstCycleListsWhatExistsThenWatchesOnlyChanges) {
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-0")).ok());
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("other-0", "other")).ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  EXPECT_THAT(Take(), ElementsAre("ADDED train-0"))
      << "the label selector leaves other jobs' pods out";
  EXPECT_EQ(informer_.lists(), 1);

  kube_.Modify(kPods, "ml", "train-0", [](json& p) { p["status"]["phase"] = "Running"; });
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-1")).ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  EXPECT_THAT(Take(), ElementsAre("MODIFIED train-0", "ADDED train-1"));
  EXPECT_EQ(informer_.lists(), 1) << "a stream the server ended resumes; it does not list again";
}

TEST_F(InformerTest, ResumedStreamDoesNotRepeatEvents) {
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-0")).ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  Take();
  ASSERT_TRUE(informer_.RunOnce().ok());  // Nothing happened: only a bookmark.
  ASSERT_TRUE(informer_.RunOnce().ok());
  EXPECT_TRUE(Take().empty());
  ASSERT_TRUE(kube_.Delete(kPods, "ml", "train-0").ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  EXPECT_THAT(Take(), ElementsAre("DELETED train-0"));
}

TEST_F(InformerTest, GoneRelistsAndReportsWhatChangedWhileAway) {
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-0")).ok());
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-1")).ok());
  ASSERT_TRUE(informer_.RunOnce().ok());
  Take();

  // Changes the informer never saw as events: the server forgot them (410 Gone).
  ASSERT_TRUE(kube_.Delete(kPods, "ml", "train-0").ok());
  kube_.Modify(kPods, "ml", "train-1", [](json& p) { p["status"]["phase"] = "Failed"; });
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-2")).ok());
  kube_.Compact();
  absl::Status gone = informer_.RunOnce();
  EXPECT_TRUE(IsGone(gone)) << gone;
  EXPECT_TRUE(Take().empty());

  ASSERT_TRUE(informer_.RunOnce().ok());
  EXPECT_EQ(informer_.lists(), 2);
  EXPECT_THAT(Take(), ElementsAre("MODIFIED train-1", "ADDED train-2", "DELETED train-0"));
}

TEST_F(InformerTest, StartedInformerSyncsAndStops) {
  ASSERT_TRUE(kube_.Create(kPods, "ml", Pod("train-0")).ok());
  informer_.Start();
  EXPECT_TRUE(informer_.WaitForSync(absl::Seconds(10)));
  kube_.CloseWatches();  // Watches return at once from now on, so Stop() is prompt.
  informer_.Stop();
  EXPECT_THAT(Take(), ::testing::Contains("ADDED train-0"));
}

}  // namespace
}  // namespace cohort::kube
