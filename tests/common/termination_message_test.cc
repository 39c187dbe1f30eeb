// The follower's line (libdist writes it, cohort-operator reads its cause back) and the one cause
// table everything names a cause from.
#include "common/termination_message.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/failure_cause.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

TEST(TerminationMessage, EveryCauseRoundTrips) {
  for (const FailureCauseInfo& info : kFailureCauses) {
    std::string line =
        FormatPeerFailureLine("rank 2 (pod demo-2) failed because its process died", info.cause);
    EXPECT_THAT(line, HasSubstr(absl::StrCat("Exiting with code ", kPeerFailureExitCode)));
    EXPECT_EQ(line.back(), '\n');
    EXPECT_EQ(ParsePeerFailureCause(line), info.cause) << line;
  }
}

TEST(TerminationMessage, TheLastMarkerCountsWhateverTheMessageSays) {
  // A termination message is the log's tail: earlier lines, and a message that itself quotes
  // a marker, come before the handler's own.
  std::string tail = absl::StrCat(
      "step 7\n",
      FormatPeerFailureLine("peer said \"[cause: crash]\"", FailureCause::kHeartbeatTimeout));
  EXPECT_EQ(ParsePeerFailureCause(tail), FailureCause::kHeartbeatTimeout);
  EXPECT_EQ(ParsePeerFailureCause("Traceback (most recent call last): ..."), std::nullopt);
  EXPECT_EQ(ParsePeerFailureCause("[cause: something new]"), std::nullopt);
  EXPECT_EQ(ParsePeerFailureCause("[cause: crash"), std::nullopt) << "cut off before the ]";
}

TEST(FailureCauses, LabelsWordsAndWireNumbersAreEachDistinct) {
  std::set<std::string> labels, words;
  std::set<int32_t> wires;
  for (const FailureCauseInfo& info : kFailureCauses) {
    EXPECT_TRUE(labels.insert(info.label).second) << info.label;
    EXPECT_TRUE(words.insert(info.words).second) << info.words;
    EXPECT_TRUE(wires.insert(info.wire).second) << info.wire;
    EXPECT_EQ(FailureCauseFromWire(info.wire), info.cause);
    EXPECT_EQ(FailureCauseFromWords(info.words), info.cause);
    EXPECT_EQ(&InfoOf(info.cause), &info);
  }
  EXPECT_EQ(FailureCauseFromWire(99), std::nullopt);
  EXPECT_EQ(InfoOf(static_cast<FailureCause>(99)).cause, FailureCause::kUnspecified);
}

}  // namespace
}  // namespace cohort
