// What an exit means and which of several caused a failure: the one table cohort-launch,
// cohort-run and the operator decide by (common/exit_codes.h).
#include "common/exit_codes.h"

#include <signal.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cohort {
namespace {

struct ExitCase {
  std::string name;
  ProcessExit exit;
  ExitKind kind;
  FailureCause cause;
};

class ClassifyExitTable : public ::testing::TestWithParam<ExitCase> {};

TEST_P(ClassifyExitTable, Row) {
  EXPECT_EQ(ClassifyExit(GetParam().exit), GetParam().kind);
  EXPECT_EQ(FailureCauseOf(GetParam().kind), GetParam().cause);
}

int Exited(int code) { return code << 8; }  // A wait status, as waitpid writes it.

INSTANTIATE_TEST_SUITE_P(
    Exits, ClassifyExitTable,
    ::testing::Values(
        ExitCase{"ExitZero_Succeeded", ProcessExit::FromWaitStatus(Exited(0), false),
                 ExitKind::kSucceeded, FailureCause::kUnspecified},
        ExitCase{"ExitZeroAfterTheSupervisorsStop_StillSucceeded",
                 ProcessExit::FromWaitStatus(Exited(0), true), ExitKind::kSucceeded,
                 FailureCause::kUnspecified},
        ExitCase{"OwnErrorCode_Error", ProcessExit::FromWaitStatus(Exited(3), false),
                 ExitKind::kError, FailureCause::kProcessExited},
        ExitCase{"Exit75_FollowedAPeer", ProcessExit::FromWaitStatus(Exited(75), false),
                 ExitKind::kFollowed, FailureCause::kUnspecified},
        ExitCase{"Exit76_Preempted", ProcessExit::FromWaitStatus(Exited(76), false),
                 ExitKind::kPreempted, FailureCause::kPreempted},
        ExitCase{"KilledByNobodyInTheGroup_Killed", ProcessExit::FromWaitStatus(SIGKILL, false),
                 ExitKind::kKilled, FailureCause::kKilledBySignal},
        ExitCase{"SegfaultIsASignalToo_Killed", ProcessExit::FromWaitStatus(SIGSEGV, false),
                 ExitKind::kKilled, FailureCause::kKilledBySignal},
        ExitCase{"KilledByTheSupervisor_Stopped", ProcessExit::FromWaitStatus(SIGKILL, true),
                 ExitKind::kStopped, FailureCause::kProcessExited},
        ExitCase{"ErrorAfterTheSupervisorsStop_Stopped",
                 ProcessExit::FromWaitStatus(Exited(1), true), ExitKind::kStopped,
                 FailureCause::kProcessExited},
        ExitCase{"ContainerOomKilled_OutOfMemory", ProcessExit::FromContainer(137, "OOMKilled"),
                 ExitKind::kOutOfMemory, FailureCause::kOutOfMemory},
        ExitCase{"Container137Error_Killed", ProcessExit::FromContainer(137, "Error"),
                 ExitKind::kKilled, FailureCause::kKilledBySignal},
        ExitCase{"Container139_Killed", ProcessExit::FromContainer(139, ""), ExitKind::kKilled,
                 FailureCause::kKilledBySignal},
        ExitCase{"Container76_Preempted", ProcessExit::FromContainer(76, "Error"),
                 ExitKind::kPreempted, FailureCause::kPreempted},
        ExitCase{"Container1_Error", ProcessExit::FromContainer(1, "Error"), ExitKind::kError,
                 FailureCause::kProcessExited},
        ExitCase{"ContainerCompleted_Succeeded", ProcessExit::FromContainer(0, "Completed"),
                 ExitKind::kSucceeded, FailureCause::kUnspecified}),
    [](const ::testing::TestParamInfo<ExitCase>& info) { return info.param.name; });

TEST(ProcessExit, FromWaitStatus_CodeAsAShellReportsIt) {
  EXPECT_EQ(ProcessExit::FromWaitStatus(Exited(3), false).code, 3);
  EXPECT_EQ(ProcessExit::FromWaitStatus(SIGTERM, false).code, 128 + SIGTERM);
  EXPECT_TRUE(ProcessExit::FromWaitStatus(SIGTERM, false).signaled);
}

struct RootCaseRow {
  std::string name;
  std::vector<ExitKind> exits;  // In the order they happened.
  std::optional<size_t> root;
};

class RootCauseTable : public ::testing::TestWithParam<RootCaseRow> {};

TEST_P(RootCauseTable, Row) { EXPECT_EQ(RootCause(GetParam().exits), GetParam().root); }

using K = ExitKind;
INSTANTIATE_TEST_SUITE_P(
    Exits, RootCauseTable,
    ::testing::Values(
        RootCaseRow{"None_NoCause", {}, std::nullopt},
        RootCaseRow{"AllSucceeded_NoCause", {K::kSucceeded, K::kSucceeded}, std::nullopt},
        RootCaseRow{"FollowersThenTheErrorTheyFollowed_TheError",
                    {K::kFollowed, K::kFollowed, K::kError},
                    2},
        RootCaseRow{"ErrorThenAKill_TheKill", {K::kError, K::kKilled}, 1},
        RootCaseRow{"OomBeforeAKill_TheFirstOfTheMostLikely", {K::kKilled, K::kOutOfMemory}, 1},
        RootCaseRow{"TwoErrors_TheFirst", {K::kSucceeded, K::kError, K::kError}, 1},
        RootCaseRow{"PreemptedAndACrashDuringTheCheckpoint_TheCrash",
                    {K::kPreempted, K::kPreempted, K::kError},
                    2},
        RootCaseRow{"PreemptedAndFollowers_ThePreemption", {K::kFollowed, K::kPreempted}, 1},
        RootCaseRow{
            "OnlyStoppedOnes_TheFirstStopped", {K::kSucceeded, K::kStopped, K::kStopped}, 1},
        RootCaseRow{"FollowerBeforeStopped_TheFollower", {K::kStopped, K::kFollowed}, 1}),
    [](const ::testing::TestParamInfo<RootCaseRow>& info) { return info.param.name; });

}  // namespace
}  // namespace cohort
