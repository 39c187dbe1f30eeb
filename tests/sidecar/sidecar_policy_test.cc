// The sidecar's decisions (sidecar/sidecar_policy.h) as tables: whether a SIGTERM or SIGINT is a
// preemption notice or a reason to stop, and which exit code the sidecar leaves with. The
// end-to-end cases (a preemption forwarded by cohort-run, a program without libdist) are in
// tests/integration/launcher_test.cc.

#include "sidecar/sidecar_policy.h"

#include <signal.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cohort::sidecar {
namespace {

// ---- OnSignal: (signal, count, trainer state, flag) -> action ----------------------------------

struct SignalCase {
  std::string name;
  int signo;
  int count;
  bool attached;
  bool preempt_before_attach;
  bool ever_attached;
  SignalAction want;
};

// gtest names each row by its `name` (below); printing it too keeps ctest's listing readable.
void PrintTo(const SignalCase& c, std::ostream* os) { *os << c.name; }

class SidecarSignalTest : public ::testing::TestWithParam<SignalCase> {};

TEST_P(SidecarSignalTest, Table) {
  const SignalCase& c = GetParam();
  EXPECT_EQ(OnSignal(c.signo, c.count, c.attached, c.preempt_before_attach, c.ever_attached),
            c.want);
}

constexpr SignalAction kReport = SignalAction::kReportPreemption;
constexpr SignalAction kReportBefore = SignalAction::kReportPreemptionBeforeAttach;
constexpr SignalAction kStop = SignalAction::kStop;

INSTANTIATE_TEST_SUITE_P(
    Signals, SidecarSignalTest,
    ::testing::Values(
        // signo, count, attached, --preempt-before-attach, ever attached -> action.
        SignalCase{"FirstSigtermTrainerAttached_Preemption", SIGTERM, 1, true, false, true,
                   kReport},
        SignalCase{"FirstSigtermTrainerAttachedWithFlag_Preemption", SIGTERM, 1, true, true, true,
                   kReport},
        SignalCase{"SecondSigtermTrainerAttached_Stop", SIGTERM, 2, true, false, true, kStop},
        SignalCase{"SigintTrainerAttached_Stop", SIGINT, 1, true, false, true, kStop},
        SignalCase{"SigintBeforeAttachWithFlag_Stop", SIGINT, 1, false, true, false, kStop},
        // No trainer yet: only --preempt-before-attach makes the SIGTERM a notice.
        SignalCase{"FirstSigtermNoTrainer_Stop", SIGTERM, 1, false, false, false, kStop},
        SignalCase{"FirstSigtermNoTrainerWithFlag_PreemptionBeforeAttach", SIGTERM, 1, false, true,
                   false, kReportBefore},
        SignalCase{"SecondSigtermNoTrainerWithFlag_Stop", SIGTERM, 2, false, true, false, kStop},
        // A trainer that came and went: the flag no longer applies.
        SignalCase{"FirstSigtermTrainerGoneWithFlag_Stop", SIGTERM, 1, false, true, true, kStop},
        SignalCase{"FirstSigtermTrainerGone_Stop", SIGTERM, 1, false, false, true, kStop}),
    [](const ::testing::TestParamInfo<SignalCase>& info) { return info.param.name; });

// ---- ExitCode: (each rank's trainer, rank 0's service) -> exit code ----------------------------

constexpr TrainerEnd kShutDown{TrainerOutcome::kShutDown, true};
constexpr TrainerEnd kFailed{TrainerOutcome::kFailed, true};
constexpr TrainerEnd kFailedNeverAttached{TrainerOutcome::kFailed, false};
// Stopped by a signal while attached, and without ever attaching.
constexpr TrainerEnd kStoppedAttached{TrainerOutcome::kRunning, true};
constexpr TrainerEnd kStoppedIdle{TrainerOutcome::kRunning, false};

constexpr CoordinatorEnd kJobOk{true, true};
constexpr CoordinatorEnd kTimedOut{false, true};
constexpr CoordinatorEnd kJobFailed{true, false};

struct ExitCase {
  std::string name;
  std::vector<TrainerEnd> trainers;
  std::optional<CoordinatorEnd> coordinator;  // Rank 0's sidecar only.
  int want;
};

void PrintTo(const ExitCase& c, std::ostream* os) { *os << c.name; }

class SidecarExitCodeTest : public ::testing::TestWithParam<ExitCase> {};

TEST_P(SidecarExitCodeTest, Table) {
  const ExitCase& c = GetParam();
  EXPECT_EQ(ExitCode(c.trainers, c.coordinator), c.want);
}

INSTANTIATE_TEST_SUITE_P(
    Outcomes, SidecarExitCodeTest,
    ::testing::Values(
        ExitCase{"ShutDown_Ok", {kShutDown}, std::nullopt, kExitOk},
        ExitCase{"Failed_Failed", {kFailed}, std::nullopt, kExitFailed},
        ExitCase{
            "DiedBeforeAttachCompleted_Failed", {kFailedNeverAttached}, std::nullopt, kExitFailed},
        // A program that does not use libdist, stopped by a signal: nothing failed.
        ExitCase{"StoppedNeverAttached_Ok", {kStoppedIdle}, std::nullopt, kExitOk},
        // Stopped while a trainer was attached: it did not finish.
        ExitCase{"StoppedWhileAttached_Failed", {kStoppedAttached}, std::nullopt, kExitFailed},
        ExitCase{"EveryRankShutDown_Ok", {kShutDown, kShutDown, kShutDown}, std::nullopt, kExitOk},
        ExitCase{"OneRankOfThePodFailed_Failed",
                 {kShutDown, kFailed, kShutDown},
                 std::nullopt,
                 kExitFailed},
        ExitCase{"ShutDownAndIdle_Ok", {kShutDown, kStoppedIdle}, std::nullopt, kExitOk},
        ExitCase{"NoRanks_Ok", {}, std::nullopt, kExitOk},
        // Rank 0: the service's end counts too.
        ExitCase{"Rank0JobOk_Ok", {kShutDown}, kJobOk, kExitOk},
        ExitCase{"Rank0ServiceTimedOut_Failed", {kShutDown}, kTimedOut, kExitFailed},
        ExitCase{"Rank0JobFailedElsewhere_Failed", {kShutDown}, kJobFailed, kExitFailed},
        ExitCase{"Rank0IdleButJobFailed_Failed", {kStoppedIdle}, kJobFailed, kExitFailed},
        ExitCase{"Rank0TrainerFailedJobOk_Failed", {kFailed}, kJobOk, kExitFailed}),
    [](const ::testing::TestParamInfo<ExitCase>& info) { return info.param.name; });

// Rank 0, restarting in place: which ends of a pod's processes the attempt's coordination
// service hears of (ProcessExit::FromContainer is how the hub's AttemptEnd reads).
TEST(ShouldTellCoordinator, OnlyNewsIsTold) {
  struct Case {
    const char* name;
    int exit_code;
    const char* reason;
    bool joined;
    bool tell;
  };
  for (const Case& c : std::vector<Case>{
           {"success", 0, "Completed", true, false},
           {"a follower's exit: the job's own doing", kPeerFailureExitCode, "Error", true, false},
           {"preempted after joining: it told the job", kPreemptedExitCode, "Error", true, false},
           {"preempted before joining: the others wait", kPreemptedExitCode, "Error", false, true},
           {"its own error", 1, "Error", true, true},
           {"an error before joining", 1, "Error", false, true},
           {"killed by a signal", 128 + SIGKILL, "Error", true, true},
           {"the OOM killer", 128 + SIGKILL, "OOMKilled", true, true},
       }) {
    SCOPED_TRACE(c.name);
    const ExitKind kind = ClassifyExit(ProcessExit::FromContainer(c.exit_code, c.reason));
    EXPECT_EQ(ShouldTellCoordinator(kind, c.joined), c.tell);
  }
}

}  // namespace
}  // namespace cohort::sidecar
