// common/process/process_group.h: what the group does with children while a kill deadline runs.

#include "common/process/process_group.h"

#include <signal.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

ProcessGroup::Child Named(const std::string& label) {
  ProcessGroup::Child c;
  c.label = label;
  return c;
}

// A failure gives the other processes time to exit by themselves; one that is stopped (SIGSTOP, a
// debugger) cannot, so it is killed at once rather than at the deadline, and the job ends then.
TEST(ProcessGroup, KillDeadlineSet_AStoppedChildIsKilledAtOnce_TheOthersKeepTheirTime) {
  ProcessGroup group("test", {.take_signals = false});
  ProcessGroup::Child* stopped =
      group.Start(Named("stopped"), Subprocess::Options({"sleep", "600"}));
  ProcessGroup::Child* running =
      group.Start(Named("running"), Subprocess::Options({"sleep", "600"}));
  ASSERT_NE(stopped, nullptr);
  ASSERT_NE(running, nullptr);
  ASSERT_EQ(kill(stopped->process.pid(), SIGSTOP), 0);
  group.KillAllAt(absl::Now() + absl::Hours(1));

  const ProcessGroup::Hooks hooks;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (stopped->process.running() && absl::Now() < give_up)
    group.Step(hooks, absl::Milliseconds(50));
  EXPECT_FALSE(stopped->process.running());
  EXPECT_TRUE(stopped->killed);
  EXPECT_TRUE(running->process.running());
  EXPECT_FALSE(running->killed);
  running->process.Signal(SIGKILL);
  while (group.Step(hooks, absl::Milliseconds(50))) {
  }
}

// Without a deadline, a stopped child is left alone: stopping a process is no failure.
TEST(ProcessGroup, NoKillDeadline_AStoppedChildIsLeftAlone) {
  ProcessGroup group("test", {.take_signals = false});
  ProcessGroup::Child* stopped =
      group.Start(Named("stopped"), Subprocess::Options({"sleep", "600"}));
  ASSERT_NE(stopped, nullptr);
  ASSERT_EQ(kill(stopped->process.pid(), SIGSTOP), 0);
  const ProcessGroup::Hooks hooks;
  for (int i = 0; i < 10; ++i) group.Step(hooks, absl::Milliseconds(50));  // Turns of its loop.
  EXPECT_TRUE(stopped->process.running());
  EXPECT_FALSE(stopped->killed);
  stopped->process.Signal(SIGKILL);
  while (group.Step(hooks, absl::Milliseconds(50))) {
  }
}

}  // namespace
}  // namespace cohort
