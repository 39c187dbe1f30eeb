// Who follows the attempt hub as which pod (coordination/attempts/slot_registry.h): pods, spares
// holding no slot, the slots spares took, and who is refused.

#include "coordination/attempts/slot_registry.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coordination {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

attemptspb::SpareAssignment Give(int32_t pod_index, std::string spare) {
  attemptspb::SpareAssignment a;
  a.set_pod_index(pod_index);
  a.set_spare(std::move(spare));
  return a;
}

// Pods 1-3 follow under their names (streams 1-3); spare "s0" follows holding no slot (stream 10).
class SlotRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    slots_.FollowLocally();
    for (int32_t pod = 1; pod <= 3; ++pod)
      ASSERT_TRUE(slots_.Follow(pod, pod, "", absl::StrCat("job-", pod)).refused.ok());
    ASSERT_TRUE(slots_.Follow(10, 0, "s0", "job-spare0").refused.ok());
  }
  SlotRegistry slots_;
};

TEST_F(SlotRegistryTest, PodsAndSparesFollow_GoneStreamsFollowNoMore) {
  EXPECT_THAT(slots_.Following(), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(slots_.spares(), ElementsAre(Pair("s0", 10u)));
  // Pod 2's sidecar follows again (a new stream): it replaces the old one, which ends quietly.
  SlotRegistry::Admission again = slots_.Follow(20, 2, "", "job-2");
  EXPECT_TRUE(again.refused.ok());
  EXPECT_THAT(again.endings, IsEmpty());
  EXPECT_FALSE(slots_.Gone(2)) << "the old stream follows nothing any more";
  EXPECT_TRUE(slots_.Gone(20));
  EXPECT_THAT(slots_.Following(), ElementsAre(0, 1, 3));
  // A spare that follows anew ends its old stream.
  SlotRegistry::Admission spare = slots_.Follow(11, 0, "s0", "job-spare0");
  ASSERT_EQ(spare.endings.size(), 1u);
  EXPECT_EQ(spare.endings[0].stream, 10u);
  EXPECT_TRUE(absl::IsAlreadyExists(spare.endings[0].why));
  EXPECT_TRUE(slots_.Gone(11));
  EXPECT_THAT(slots_.spares(), IsEmpty());
}

TEST_F(SlotRegistryTest, WhichAssignmentsCanBeCarriedOut) {
  struct Case {
    std::vector<attemptspb::SpareAssignment> assignments;
    std::string why;  // "" when they can.
  };
  for (const Case& c : std::vector<Case>{
           {{}, ""},
           {{Give(2, "s0")}, ""},
           {{Give(0, "s0")}, "rank 0's pod hosts the coordination service"},
           {{Give(-1, "s0")}, "there is no such pod"},
           {{Give(2, "s9")}, "spare 's9' does not follow the attempt hub"},
           {{Give(2, "s0"), Give(3, "s0")}, "spare 's0' is given two slots"},
           {{Give(2, "s0"), Give(2, "s0")}, "pod index 2 is given twice"},
       }) {
    SCOPED_TRACE(c.why);
    std::string why = slots_.CheckAssignments(c.assignments);
    if (c.why.empty()) {
      EXPECT_EQ(why, "");
    } else {
      EXPECT_THAT(why, HasSubstr(c.why));
    }
  }
}

TEST_F(SlotRegistryTest, ASpareTakesASlot_ThePodItDisplacedIsNeverLetBack) {
  std::optional<SlotRegistry::Ending> old = slots_.GiveSlot(2, "s0", 5);
  ASSERT_TRUE(old.has_value()) << "pod 2's stream still followed";
  EXPECT_EQ(old->stream, 2u);
  EXPECT_THAT(std::string(old->why.message()),
              HasSubstr("was given to spare s0 in restart attempt 5"));
  EXPECT_THAT(slots_.followers(), ElementsAre(Pair(1, 1u), Pair(2, 10u), Pair(3, 3u)));
  EXPECT_THAT(slots_.spares(), IsEmpty());
  EXPECT_EQ(slots_.HolderOf(2), "s0");

  struct Case {
    int32_t pod_index;
    std::string spare, name;
    std::string refused;  // "" when admitted.
  };
  for (const Case& c : std::vector<Case>{
           // The displaced pod's sidecar, still up (evicted) or back (its node returned).
           {2, "", "job-2", "pod job-2 no longer holds pod index 2: a spare took its slot"},
           // A replacement pod while the spare follows.
           {2, "", "job-2-r5", "pod index 2 is held by spare s0, which took it in a restart"},
           // Another spare claiming the slot.
           {2, "s1", "job-spare1", "spare s1 does not hold pod index 2 (spare s0 does)"},
           {3, "s0", "job-spare0", "spare s0 does not hold pod index 3"},
       }) {
    SCOPED_TRACE(c.refused);
    SlotRegistry::Admission a = slots_.Follow(99, c.pod_index, c.spare, c.name);
    EXPECT_TRUE(absl::IsFailedPrecondition(a.refused)) << a.refused;
    EXPECT_EQ(a.refused.message(), c.refused);
  }
  // The spare, back after a broken stream (restarted as the slot's sidecar).
  SlotRegistry::Admission back = slots_.Follow(30, 2, "s0", "job-spare0");
  EXPECT_TRUE(back.refused.ok());
  ASSERT_EQ(back.endings.size(), 1u);
  EXPECT_EQ(back.endings[0].stream, 10u) << "its old stream ends";
  // The spare goes for good: a replacement pod takes the slot back, the displaced pod still not.
  EXPECT_TRUE(slots_.Gone(30));
  EXPECT_FALSE(slots_.Follow(31, 2, "", "job-2").refused.ok());
  EXPECT_TRUE(slots_.Follow(32, 2, "", "job-2-r6").refused.ok());
  EXPECT_EQ(slots_.HolderOf(2), "");
  EXPECT_THAT(slots_.Following(), ElementsAre(0, 1, 2, 3));
}

TEST_F(SlotRegistryTest, DropStreams_NobodyFollowsButTheTakenSlotsStayKnown) {
  slots_.GiveSlot(3, "s0", 1);
  slots_.DropStreams();
  EXPECT_THAT(slots_.Following(), ElementsAre(0)) << "rank 0's sidecar follows in process";
  EXPECT_THAT(slots_.spares(), IsEmpty());
  EXPECT_EQ(slots_.HolderOf(3), "s0");
  EXPECT_FALSE(slots_.Follow(40, 3, "", "job-3").refused.ok());
}

}  // namespace
}  // namespace cohort::coordination
