#include "kube/events.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace cohort::kube {
namespace {

TEST(MakeEvent, AboutTheObjectInItsNamespace_NamedUniquely) {
  const ObjectReference job{"cohort.dev/v1alpha1", "DistributedJob", "ml", "train", "u-1"};
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  nlohmann::json e =
      MakeEvent(job, "Warning", "GangRestart", "rank 2 failed", "cohort-operator", now);
  EXPECT_EQ(e["kind"], "Event");
  EXPECT_EQ(e["metadata"]["namespace"], "ml");
  EXPECT_EQ(e["involvedObject"], nlohmann::json({{"apiVersion", "cohort.dev/v1alpha1"},
                                                 {"kind", "DistributedJob"},
                                                 {"name", "train"},
                                                 {"namespace", "ml"},
                                                 {"uid", "u-1"}}));
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "GangRestart");
  EXPECT_EQ(e["message"], "rank 2 failed");
  EXPECT_EQ(e["firstTimestamp"], "2027-01-15T08:00:00Z");
  EXPECT_EQ(e["lastTimestamp"], e["firstTimestamp"]);
  EXPECT_EQ(e["count"], 1);
  EXPECT_EQ(e["source"]["component"], "cohort-operator");
  EXPECT_EQ(e["reportingComponent"], "cohort-operator");
  // Two Events at the same instant (one pass emits several) get names of their own.
  std::set<std::string> names;
  for (int i = 0; i < 3; ++i)
    names.insert(
        MakeEvent(job, "Normal", "Started", "", "cohort-operator", now)["metadata"]["name"]);
  EXPECT_EQ(names.size(), 3u);
  EXPECT_EQ(names.begin()->rfind("train.", 0), 0u);
}

}  // namespace
}  // namespace cohort::kube
