#include "common/attempt_layout.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(AttemptLayout, PositionsAreDenseInPodOrder_AbsentPodsHaveNone) {
  // 4 groups of 2 pods, group 2 (pods 4 and 5) left out.
  const AttemptLayout layout = LayoutWithout(8, 2, {2}, 4);
  EXPECT_EQ(layout.absent, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(layout.pods(), 6);
  EXPECT_EQ(layout.replica_groups, 3);
  EXPECT_EQ(layout.desired_replica_groups, 4);
  EXPECT_EQ(layout.Problem(), "");
  const std::optional<int32_t> expected[] = {0, 1, 2, 3, std::nullopt, std::nullopt, 4, 5};
  for (int32_t pod = 0; pod < 8; ++pod) {
    EXPECT_EQ(layout.Position(pod), expected[pod]) << "pod " << pod;
    if (expected[pod]) EXPECT_EQ(layout.PodAt(*expected[pod]), pod) << "pod " << pod;
  }
  EXPECT_EQ(layout.Position(8), std::nullopt);
  EXPECT_EQ(layout.Position(-1), std::nullopt);
  EXPECT_EQ(layout.PodAt(6), std::nullopt);
  EXPECT_EQ(layout.Describe(), "pods 0-3, 6-7 (6 of 8; 3 of 4 replica groups)");
}

TEST(AttemptLayout, Table) {
  struct Case {
    AttemptLayout layout;
    std::string problem;
    std::string described;  // Of a layout that can be run.
  };
  const Case cases[] = {
      {LayoutWithout(4, 1, {}, 4), "", "pods 0-3 (4 of 4; 4 of 4 replica groups)"},
      {LayoutWithout(4, 1, {1, 3}, 4), "", "pods 0, 2 (2 of 4; 2 of 4 replica groups)"},
      {LayoutWithout(6, 3, {1}, 2), "", "pods 0-2 (3 of 6; 1 of 2 replica groups)"},
      {AttemptLayout{.slots = 3}, "", "pods 0-2 (3 of 3)"},
      {AttemptLayout{.slots = 0}, "an attempt needs at least one pod (slots 0)", ""},
      {AttemptLayout{.slots = 3, .absent = {0}},
       "absent pod index 0 is not one of 1..2 (pod 0 hosts the coordination service)", ""},
      {AttemptLayout{.slots = 3, .absent = {3}},
       "absent pod index 3 is not one of 1..2 (pod 0 hosts the coordination service)", ""},
      {AttemptLayout{.slots = 4, .absent = {2, 1}},
       "absent pod indexes must be sorted and distinct (1)", ""},
      {AttemptLayout{.slots = 5, .absent = {1}, .replica_groups = 3, .desired_replica_groups = 5},
       "3 replica groups do not divide 4 pods", ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.layout.Problem(), c.problem) << c.layout.slots;
    if (c.problem.empty()) EXPECT_EQ(c.layout.Describe(), c.described);
  }
}

}  // namespace
}  // namespace cohort
