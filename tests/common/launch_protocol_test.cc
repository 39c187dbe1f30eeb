#include "common/process/launch_protocol.h"

#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

TEST(LaunchProtocol, EndedRoundTripsAMessageOfSeveralLines) {
  AttemptEnded e{
      .attempt = 4,
      .exit_code = 137,
      .finished_unix_ms = 1700000000123,
      .reason = "OOMKilled",
      .message =
          "Traceback:\n  x = y\ncohort-launch: restart attempt 4 ended with rank 3's status"};
  const std::string line = FormatEnded(e);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  std::optional<AttemptEnded> back = ParseEnded(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->attempt, 4);
  EXPECT_EQ(back->exit_code, 137);
  EXPECT_EQ(back->finished_unix_ms, 1700000000123);
  EXPECT_EQ(back->reason, "OOMKilled");
  EXPECT_EQ(back->message, e.message);
}

TEST(LaunchProtocol, AReasonThatIsNotOneWordIsSentAsError) {
  AttemptEnded e{.attempt = 0, .exit_code = 1, .reason = "two words"};
  std::optional<AttemptEnded> back = ParseEnded(FormatEnded(e));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->reason, "Error");
  EXPECT_EQ(back->message, "");
}

TEST(LaunchProtocol, AttemptLines) {
  EXPECT_EQ(FormatOrder({12, std::nullopt}), "attempt 12\n");
  EXPECT_EQ(FormatOrder({12, 3}), "attempt 12 pod 3\n");
  std::optional<AttemptOrder> plain = ParseOrder("attempt 12");
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->attempt, 12);
  EXPECT_EQ(plain->pod_index, std::nullopt);
  std::optional<AttemptOrder> as_pod = ParseOrder(FormatOrder({12, 3}));
  ASSERT_TRUE(as_pod.has_value());
  EXPECT_EQ(as_pod->attempt, 12);
  EXPECT_EQ(as_pod->pod_index, 3);
  // An elastic job's attempt: the pod's place in it, or none.
  const AttemptOrder placed{
      .attempt = 4,
      .placement =
          Placement{.position = 2, .pods = 6, .replica_groups = 3, .desired_replica_groups = 4}};
  EXPECT_EQ(FormatOrder(placed), "attempt 4 place 2 of 6 groups 3 of 4\n");
  std::optional<AttemptOrder> read = ParseOrder(FormatOrder(placed));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->placement, placed.placement);
  EXPECT_EQ(read->pod_index, std::nullopt);
  EXPECT_FALSE(read->idle);
  AttemptOrder spare_placed = placed;
  spare_placed.pod_index = 7;
  read = ParseOrder(FormatOrder(spare_placed));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->pod_index, 7);
  EXPECT_EQ(read->placement, placed.placement);
  const AttemptOrder idle{.attempt = 5, .idle = true};
  EXPECT_EQ(FormatOrder(idle), "attempt 5 idle\n");
  read = ParseOrder(FormatOrder(idle));
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(read->idle);
  EXPECT_EQ(read->placement, std::nullopt);
  for (const char* bad :
       {"attempt -1", "attempt x", "attempt 1 pod", "attempt 1 pod -2", "attempt 1 pad 2",
        "attempt 1 pod 2 extra", "ended 1 2 3 Error m", "attempt 1 place 2 of 6 groups 3",
        "attempt 1 place 6 of 6 groups 3 of 4", "attempt 1 place 2 in 6 groups 3 of 4",
        "attempt 1 idle now", "attempt 1 place 2 of 6 groups 3 of 4 idle"}) {
    EXPECT_EQ(ParseOrder(bad).has_value(), false) << bad;
  }
  EXPECT_EQ(ParseEnded("ended 1 two 3 Error m"), std::nullopt);
  EXPECT_EQ(ParseEnded("ended 1 2 3"), std::nullopt);
  EXPECT_EQ(ParseEnded("attempt 1"), std::nullopt);
}

}  // namespace
}  // namespace cohort::launch
