// cohort-launch's loop over the attempts its sidecar orders (launcher/attempt_loop.h), with the
// sidecar's end of the launch socket played by the test over a socketpair and real processes.

#include "launcher/attempt_loop.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/process/launch_protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

// The sidecar's end of a launch socket.
class Sidecar {
 public:
  Sidecar() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    mine_ = fds[0];
    launcher_ = fds[1];
    reader_ = LineReader(mine_);
  }
  ~Sidecar() { Close(); }
  int TakeLauncherEnd() { return std::exchange(launcher_, -1); }
  void Say(const std::string& line) {
    const std::string l = line + "\n";
    EXPECT_EQ(write(mine_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // The next line cohort-launch wrote (blocking); "" once it closed the socket.
  std::string Hear() {
    while (lines_.empty()) {
      std::vector<std::string> more;
      const bool open = reader_.Read(&more);
      lines_.insert(lines_.end(), more.begin(), more.end());
      if (!open && lines_.empty()) return "";
    }
    std::string l = lines_.front();
    lines_.erase(lines_.begin());
    return l;
  }
  // Whether cohort-launch wrote anything not heard yet.
  bool Unheard() {
    char c;
    return !lines_.empty() || recv(mine_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  void Close() {
    if (mine_ >= 0) close(std::exchange(mine_, -1));
    if (launcher_ >= 0) close(std::exchange(launcher_, -1));
  }

 private:
  int mine_ = -1;
  int launcher_ = -1;
  LineReader reader_;
  std::vector<std::string> lines_;
};

// Pod 1 of a 4-pod job, 2 processes each (ranks 2 and 3).
env::ProcessPlacement Pod(int32_t pod_index = 1) {
  env::ProcessPlacement p;
  p.pod_index = pod_index;
  p.processes_per_pod = 2;
  p.num_pods = 4;
  return p;
}

AttemptLoop::Options Shell(const std::string& script) {
  AttemptLoop::Options o;
  o.run.command = {"/bin/sh", "-c", script};
  o.run.window = absl::Seconds(5);
  return o;
}

class AttemptLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v :
         {"COHORT_AGENT_SOCKET", "COHORT_LAUNCH_SOCKET", "COHORT_PROCESS_ID", "COHORT_CPU_BIND"}) {
      unsetenv(v);
    }
    setenv("COHORT_CPU_BIND", "none", 1);
  }
  ProcessGroup group_{"cohort-launch", ProcessGroup::Options{.take_signals = false}};
};

TEST_F(AttemptLoopTest, NextOrder_TheLatestForThisPod_AnIndexMovesItsRanks) {
  struct Case {
    std::string name;
    int32_t pod_index;  // The pod's before (-1: a spare).
    std::vector<std::string> lines;
    int32_t least;
    std::optional<int32_t> order;
    int32_t pod_after;
  };
  for (const Case& c : std::vector<Case>{
           {"the order", 1, {"attempt 3"}, 3, 3, 1},
           {"an earlier attempt's", 1, {"attempt 2"}, 3, std::nullopt, 1},
           {"the latest of several", 1, {"attempt 3", "attempt 5", "attempt 4"}, 3, 5, 1},
           {"not an order", 1, {"hello", "ended 3 1 0 Error x"}, 0, std::nullopt, 1},
           {"another slot", 1, {"attempt 4 pod 2"}, 3, 4, 2},
           {"a slot outside the job", 1, {"attempt 4 pod 9"}, 3, std::nullopt, 1},
           {"a spare without a slot", -1, {"attempt 3"}, 0, std::nullopt, -1},
           {"a spare given a slot", -1, {"attempt 3", "attempt 4 pod 3"}, 0, 4, 3},
       }) {
    SCOPED_TRACE(c.name);
    Sidecar sidecar;
    AttemptLoop loop(group_, Pod(c.pod_index), 0, sidecar.TakeLauncherEnd(), Shell("true"));
    EXPECT_EQ(loop.NextOrder(c.lines, c.least), c.order);
    EXPECT_EQ(loop.pod().pod_index, c.pod_after);
  }
}

TEST_F(AttemptLoopTest, AFailedAttemptIsReported_TheNextOrderRunsIt_ZeroEndsTheLoop) {
  Sidecar sidecar;
  // Attempt 1: rank 3 fails; attempt 2: every rank exits 0.
  AttemptLoop loop(
      group_, Pod(), 1, sidecar.TakeLauncherEnd(),
      Shell("if [ \"$COHORT_RESTART_ATTEMPT\" = 1 ] && [ \"$COHORT_PROCESS_ID\" = 3 ]; "
            "then echo boom; exit 3; fi"));
  sidecar.Say("attempt 1");
  int exit_code = -1;
  std::thread run([&] { exit_code = loop.Run(); });
  std::optional<launch::AttemptEnded> ended = launch::ParseEnded(sidecar.Hear());
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->attempt, 1);
  EXPECT_EQ(ended->exit_code, 3);
  EXPECT_EQ(ended->reason, "Error");
  EXPECT_THAT(ended->message, HasSubstr("boom"));
  EXPECT_THAT(ended->message, HasSubstr("restart attempt 1 ended with rank 3's status"));
  sidecar.Say("attempt 2");
  run.join();
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(loop.attempt(), 2);
  EXPECT_EQ(loop.state(), AttemptLoop::State::kDone);
  EXPECT_FALSE(sidecar.Unheard()) << "a successful attempt is not reported: the pod is done";
}

TEST_F(AttemptLoopTest, ALaterOrderMeanwhile_StopsTheRunningAttemptUnreported) {
  const std::string fifo = absl::StrCat(::testing::TempDir(), "/started-", getpid());
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Sidecar sidecar;
  AttemptLoop loop(group_, Pod(), 0, sidecar.TakeLauncherEnd(),
                   Shell(absl::StrCat("[ \"$COHORT_RESTART_ATTEMPT\" = 2 ] && exit 0; "
                                      "[ \"$COHORT_PROCESS_ID\" = 2 ] && echo up > ",
                                      fifo, "; exec sleep 60")));
  sidecar.Say("attempt 0");
  int exit_code = -1;
  std::thread run([&] { exit_code = loop.Run(); });
  std::string up;
  std::ifstream(fifo) >> up;  // Attempt 0's processes run.
  EXPECT_EQ(up, "up");
  sidecar.Say("attempt 2");
  run.join();
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(loop.attempt(), 2);
  EXPECT_FALSE(sidecar.Unheard()) << "nobody waits for a superseded attempt's end";
  std::filesystem::remove(fifo);
}

// An elastic job (common/attempt_layout.h): an attempt that places the pod among fewer pods gives
// its processes the placed ranks and world; one that leaves the pod out runs nothing (and stops
// what ran) without reporting an end; a later whole attempt is as the pod's environment says.
TEST_F(AttemptLoopTest, ElasticAttempts_PlacedRanksAndWorld_IdleRunsNothing) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/elastic-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* local : {"0", "1"})  // Each process says it is up once it wrote its line.
    ASSERT_EQ(mkfifo(absl::StrCat(dir, "/up-", local).c_str(), 0600), 0);
  const std::string seen = dir + "/seen";
  Sidecar sidecar;
  // Pod 3 of 4 (ranks 6-7); attempt 1 runs it at position 2 of 3.
  AttemptLoop loop(
      group_, Pod(3), 0, sidecar.TakeLauncherEnd(),
      Shell(absl::StrCat("echo \"$COHORT_RESTART_ATTEMPT $COHORT_PROCESS_ID $COHORT_NUM_PROCESSES "
                         "$RANK $WORLD_SIZE $NODE_RANK ${COHORT_REPLICA_GROUPS:--} "
                         "${COHORT_DESIRED_REPLICA_GROUPS:--}\" >> ",
                         seen, "; [ \"$COHORT_RESTART_ATTEMPT\" = 3 ] && exit 0; ", "echo up > ",
                         dir, "/up-$COHORT_LOCAL_PROCESS_ID; exec sleep 60")));
  sidecar.Say("attempt 1 place 2 of 3 groups 3 of 4");
  int exit_code = -1;
  std::thread run([&] { exit_code = loop.Run(); });
  for (const char* local : {"0", "1"}) {  // Attempt 1's processes run.
    std::string up;
    std::ifstream(absl::StrCat(dir, "/up-", local)) >> up;
    EXPECT_EQ(up, "up") << local;
  }
  EXPECT_EQ(loop.placement().pod_index, 2);
  EXPECT_EQ(loop.pod().pod_index, 3) << "the slot stays the pod's";
  sidecar.Say("attempt 2 idle");
  sidecar.Say("attempt 3");
  run.join();
  EXPECT_EQ(exit_code, 0);
  EXPECT_EQ(loop.attempt(), 3);
  EXPECT_FALSE(loop.shape().placement.has_value());
  EXPECT_FALSE(sidecar.Unheard()) << "neither a stopped nor an idle attempt reports an end";
  std::ifstream in(seen);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"1 4 6 4 6 2 3 4", "1 5 6 5 6 2 3 4",
                                             "3 6 8 6 8 3 - -", "3 7 8 7 8 3 - -"}));
  std::filesystem::remove_all(dir);
}

TEST_F(AttemptLoopTest, SidecarGoneBeforeAnyOrder_ExitsOneRunningNothing) {
  Sidecar sidecar;
  AttemptLoop loop(group_, Pod(), 0, sidecar.TakeLauncherEnd(), Shell("exit 7"));
  sidecar.Close();
  EXPECT_EQ(loop.Run(), 1);
  EXPECT_EQ(loop.state(), AttemptLoop::State::kDone);
  EXPECT_TRUE(group_.children().empty()) << "no process was started";
}

TEST_F(AttemptLoopTest, SidecarGoneAfterAFailedAttempt_ExitsWithItsStatus) {
  Sidecar sidecar;
  AttemptLoop loop(group_, Pod(), 0, sidecar.TakeLauncherEnd(), Shell("exit 5"));
  sidecar.Say("attempt 0");
  int exit_code = -1;
  std::thread run([&] { exit_code = loop.Run(); });
  EXPECT_TRUE(launch::ParseEnded(sidecar.Hear()).has_value());
  sidecar.Close();
  run.join();
  EXPECT_EQ(exit_code, 5);
}

TEST_F(AttemptLoopTest, ASpare_WaitsForASlot_ReconnectsWhenItsSidecarBecomesTheSlots) {
  Sidecar first, second;
  AttemptLoop::Options options = Shell(
      "[ \"$COHORT_PROCESS_ID\" -ge 6 ] || { echo \"wrong rank $COHORT_PROCESS_ID\"; exit 9; }");
  options.spare = true;
  int reconnects = 0;
  options.reconnect = [&] {
    ++reconnects;
    return second.TakeLauncherEnd();
  };
  AttemptLoop loop(group_, Pod(-1), 0, first.TakeLauncherEnd(), std::move(options));
  first.Say("attempt 0");  // Not for a spare: it holds no slot.
  first.Close();           // Its sidecar re-executes itself as pod 3's.
  second.Say("attempt 1 pod 3");
  EXPECT_EQ(loop.Run(), 0);
  EXPECT_EQ(reconnects, 1);
  EXPECT_EQ(loop.pod().pod_index, 3) << "ranks 6 and 7";
  EXPECT_EQ(loop.attempt(), 1);
}

}  // namespace
}  // namespace cohort
