#include "kube/conditions.h"

#include "common/rfc3339.h"
#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

using json = nlohmann::json;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
const absl::Time kT1 = kT0 + absl::Minutes(1);

TEST(SetConditionTest, ANewTypeIsAppendedWithTheTransitionTimeNow) {
  json conditions;  // Not an array yet: made one.
  EXPECT_TRUE(SetCondition(conditions, Condition("Ready", "True", "KubeletReady", "ready"), kT0));
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0], (json{{"type", "Ready"},
                                 {"status", "True"},
                                 {"reason", "KubeletReady"},
                                 {"message", "ready"},
                                 {"lastTransitionTime", FormatRfc3339(kT0)}}));
  EXPECT_TRUE(SetCondition(conditions, Condition("DisruptionTarget", "True", "", ""), kT1));
  ASSERT_EQ(conditions.size(), 2u);
  EXPECT_FALSE(conditions[1].contains("reason")) << "an empty reason is left out";
}

TEST(SetConditionTest, TheSameConditionAgainChangesNothing) {
  json conditions = json::array();
  SetCondition(conditions, Condition("Ready", "True", "R", "m"), kT0);
  const json before = conditions;
  EXPECT_FALSE(SetCondition(conditions, Condition("Ready", "True", "R", "m"), kT1));
  EXPECT_EQ(conditions, before);
}

TEST(SetConditionTest, ANewReasonKeepsTheTransitionTimeWhileTheStatusIsUnchanged) {
  json conditions = json::array();
  SetCondition(conditions, Condition("Progressing", "True", "ReplicaSetUpdated", "a"), kT0);
  EXPECT_TRUE(SetCondition(conditions,
                           Condition("Progressing", "True", "NewReplicaSetAvailable", "b"), kT1));
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0]["reason"], "NewReplicaSetAvailable");
  EXPECT_EQ(conditions[0]["message"], "b");
  EXPECT_EQ(conditions[0]["lastTransitionTime"], FormatRfc3339(kT0));
}

TEST(SetConditionTest, ANewStatusMovesTheTransitionTimeAndKeepsOtherTypes) {
  json conditions = json::array();
  SetCondition(conditions, Condition("PodScheduled", "True", "", ""), kT0);
  SetCondition(conditions, Condition("Ready", "True", "", ""), kT0);
  EXPECT_TRUE(SetCondition(
      conditions, Condition("Ready", "False", "NodeNotReady", "node n is not ready"), kT1));
  ASSERT_EQ(conditions.size(), 2u);
  EXPECT_EQ(conditions[0]["type"], "PodScheduled");
  EXPECT_EQ(conditions[1]["status"], "False");
  EXPECT_EQ(conditions[1]["lastTransitionTime"], FormatRfc3339(kT1));
}

TEST(SetConditionTest, OtherFieldsAreWrittenOnlyWithAChange) {
  json conditions = json::array();
  json c = Condition("Available", "True", "MinimumReplicasAvailable", "ok");
  c["lastUpdateTime"] = FormatRfc3339(kT0);
  SetCondition(conditions, c, kT0);
  c["lastUpdateTime"] = FormatRfc3339(kT1);
  EXPECT_FALSE(SetCondition(conditions, c, kT1));
  EXPECT_EQ(conditions[0]["lastUpdateTime"], FormatRfc3339(kT0));
}

TEST(ConditionStatusTest, ReadsTheStatusOfATypeAndEmptyWithoutOne) {
  json node = {{"status", {{"conditions", {{{"type", "Ready"}, {"status", "Unknown"}}}}}}};
  EXPECT_EQ(ConditionStatus(node, "Ready"), "Unknown");
  EXPECT_EQ(ConditionStatus(node, "MemoryPressure"), "");
  EXPECT_EQ(ConditionStatus(json{{"status", "not an object"}}, "Ready"), "");
  EXPECT_EQ(FindCondition(json("not an array"), "Ready"), nullptr);
  ASSERT_NE(FindCondition(node["status"]["conditions"], "Ready"), nullptr);
}

}  // namespace
}  // namespace cohort::kube
