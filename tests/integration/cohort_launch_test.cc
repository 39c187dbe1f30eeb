// cohort-launch, the launcher of a pod's processes, run as the operator runs it in a trainer
// container: real processes, real signals.

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process/launch_protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

// The environment the operator gives the trainer container of pod 1 of a 2 x 2 job with GPUs.
std::map<std::string, std::string> PodOneOfTwoByTwo() {
  return {{"COHORT_PROCESS_ID", "2"},
          {"COHORT_NUM_PROCESSES", "4"},
          {"COHORT_PROCESSES_PER_POD", "2"},
          {"COHORT_LOCAL_PROCESS_ID", "0"},
          {"COHORT_AGENT_SOCKET", "/run/cohort/agent.sock"},
          {"JAX_LOCAL_DEVICE_IDS", "0"}};
}

LauncherRun LaunchPod(std::vector<std::string> args,
                      std::map<std::string, std::string> env = PodOneOfTwoByTwo()) {
  std::vector<std::string> argv = {BinPath("cohort-launch")};
  argv.insert(argv.end(), args.begin(), args.end());
  return StartLauncher(std::move(argv), std::move(env));
}

TEST(CohortLaunchTest, TwoProcesses_EachItsRanksEnvironmentAndPrefixedOutput) {
  LauncherRun run = LaunchPod(
      {"--", "/bin/sh", "-c",
       "echo env $COHORT_PROCESS_ID $COHORT_LOCAL_PROCESS_ID $RANK $LOCAL_RANK $WORLD_SIZE "
       "$LOCAL_WORLD_SIZE $NODE_RANK $JAX_PROCESS_ID $JAX_LOCAL_DEVICE_IDS $COHORT_AGENT_SOCKET"});
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("[rank 2] env 2 0 2 0 4 2 1 2 0 /run/cohort/agent-0.sock"));
  EXPECT_TRUE(run.Has("[rank 3] env 3 1 3 1 4 2 1 3 1 /run/cohort/agent-1.sock"));
}

// The pod's CPUs (here: cohort-launch's affinity mask) are shared out between its processes;
// COHORT_CPU_BIND=none leaves each all of them; an unknown value stops the pod before anything
// runs.
TEST(CohortLaunchTest, CpuBinding_ProcessesShareThePodsCpusUnlessTurnedOff) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int allowed = CPU_COUNT(&set);
  for (const std::string bind : {"", "none"}) {
    SCOPED_TRACE(bind.empty() ? "default" : bind);
    std::map<std::string, std::string> env = PodOneOfTwoByTwo();
    if (!bind.empty()) env["COHORT_CPU_BIND"] = bind;
    LauncherRun run = LaunchPod({"--", "/bin/sh", "-c", "echo NPROC $(nproc)"}, env);
    int status = run.Finish();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    int total = 0;
    for (int rank : {2, 3}) {
      const std::string prefix = absl::StrCat("[rank ", rank, "] NPROC ");
      const std::string line = run.Find(prefix);
      int n = 0;
      ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.find(prefix) + prefix.size()), &n)) << line;
      if (bind == "none") {
        EXPECT_EQ(n, allowed);
      }
      total += n;
    }
    if (bind.empty()) {
      EXPECT_EQ(total, allowed >= 2 ? allowed : 2);
    }
  }
  std::map<std::string, std::string> env = PodOneOfTwoByTwo();
  env["COHORT_CPU_BIND"] = "numa";
  LauncherRun bad = LaunchPod({"--", "/bin/true"}, env);
  int status = bad.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(bad.Has("COHORT_CPU_BIND='numa' is not one of none, cores"));
}

TEST(CohortLaunchTest, OneProcessFails_OthersStoppedAfterTheWindowAndItsStatusReturned) {
  absl::Time start = absl::Now();
  LauncherRun run = LaunchPod({"--grace-period", "1s", "--", "/bin/sh", "-c",
                               "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 60"});
  int status = run.Finish();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_TRUE(run.Has("cohort-launch: rank 3 exit code 3"));
  EXPECT_TRUE(run.Has("cohort-launch: stopping rank 2 (SIGKILL)"));
  EXPECT_TRUE(run.Has("cohort-launch: exiting with rank 3's status (exit code 3)"));
}

TEST(CohortLaunchTest, ProcessKilledBySignal_ExitsWith128PlusTheSignal) {
  LauncherRun run =
      LaunchPod({"--grace-period", "1s", "--", "/bin/sh", "-c",
                 "if [ \"$LOCAL_RANK\" = 0 ]; then kill -KILL $$; fi; exec sleep 60"});
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGKILL);
  EXPECT_TRUE(run.Has("cohort-launch: rank 2 killed by signal 9"));
}

TEST(CohortLaunchTest, Sigterm_ForwardedToEveryProcess) {
  LauncherRun run =
      LaunchPod({"--", "/bin/sh", "-c",
                 "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done"});
  ASSERT_TRUE(run.ReadUntil("[rank 2] ready", absl::Seconds(30)));
  ASSERT_TRUE(run.ReadUntil("[rank 3] ready", absl::Seconds(30)));
  kill(run.process.pid(), SIGTERM);
  int status = run.Finish();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(run.Has("[rank 2] got TERM"));
  EXPECT_TRUE(run.Has("[rank 3] got TERM"));
}

// A preemption notice that reaches a process before its program installed a handler (here: one
// that never does) ends it with SIGTERM: still the preemption it was, not a crash.
TEST(CohortLaunchTest, SigtermBeforeTheProgramTakesIt_APreemptionNotAKill) {
  LauncherRun run = LaunchPod({"--", "/bin/sh", "-c", "echo ready; exec sleep 60"});
  ASSERT_TRUE(run.ReadUntil("[rank 2] ready", absl::Seconds(30)));
  ASSERT_TRUE(run.ReadUntil("[rank 3] ready", absl::Seconds(30)));
  kill(run.process.pid(), SIGTERM);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 76);
  EXPECT_TRUE(run.Has("the preemption notice ended it before its program could take it"));
  // Both got the notice at once: the first to end is the one named.
  EXPECT_TRUE(run.Has("cohort-launch: exiting with rank 2's status (exit code 76)") ||
              run.Has("cohort-launch: exiting with rank 3's status (exit code 76)"));
}

TEST(CohortLaunchTest, InconsistentEnvironment_ClearErrorAndNothingStarted) {
  std::map<std::string, std::string> env = PodOneOfTwoByTwo();
  env["COHORT_NUM_PROCESSES"] = "5";
  LauncherRun run = LaunchPod({"--", "/bin/sh", "-c", "echo started"}, env);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_TRUE(
      run.Has("COHORT_NUM_PROCESSES=5 is not a positive multiple of "
              "COHORT_PROCESSES_PER_POD=2"));
  EXPECT_FALSE(run.Has("started"));
}

TEST(CohortLaunchTest, Install_CopiesAnExecutableThatRuns) {
  std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("cohort-launch-install-", getpid()))
          .string();
  std::filesystem::remove_all(dir);
  std::string dest = dir + "/bin/cohort-launch";
  LauncherRun install = LaunchPod({"--install", dest});
  ASSERT_EQ(install.Finish(), 0);
  struct stat st {};
  ASSERT_EQ(stat(dest.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  LauncherRun run =
      StartLauncher({dest, "--", "/bin/sh", "-c", "echo hi $RANK"}, PodOneOfTwoByTwo());
  EXPECT_EQ(run.Finish(), 0);
  EXPECT_TRUE(run.Has("[rank 3] hi 3"));
  std::filesystem::remove_all(dir);
}

}  // namespace
// The sidecar's end of the launch socket, played by the test: listens, hands out attempts and
// reads what cohort-launch says.
class FakeSidecar {
 public:
  explicit FakeSidecar(const std::string& path) {
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
  }
  ~FakeSidecar() {
    if (conn_fd_ >= 0) close(conn_fd_);
    close(listen_fd_);
  }
  bool Accept(absl::Duration timeout) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1) return false;
    conn_fd_ = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    reader_ = LineReader(conn_fd_);
    return conn_fd_ >= 0;
  }
  void Order(int attempt, std::optional<int32_t> pod_index = std::nullopt) {
    const std::string line = launch::FormatOrder({attempt, pod_index});
    EXPECT_EQ(write(conn_fd_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  }
  // The next line cohort-launch writes, within `timeout`.
  std::optional<std::string> Next(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (pending_.empty()) {
      pollfd p{conn_fd_, POLLIN, 0};
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) != 1) return std::nullopt;
      std::vector<std::string> lines;
      const bool open = reader_.Read(&lines);
      pending_.insert(pending_.end(), lines.begin(), lines.end());
      if (!open && pending_.empty()) return std::nullopt;
    }
    std::string line = pending_.front();
    pending_.erase(pending_.begin());
    return line;
  }

 private:
  int listen_fd_ = -1;
  int conn_fd_ = -1;
  LineReader reader_;
  std::vector<std::string> pending_;
};

// A pod that restarts in place, with its sidecar's launch socket played by the test: a temporary
// directory, removed at the end, and the pod's environment starting at restart attempt `attempt`.
struct InPlacePod {
  static std::string MakeDir() {
    char pattern[] = "/tmp/cohort-launch-XXXXXX";
    EXPECT_NE(mkdtemp(pattern), nullptr);
    return pattern;
  }
  explicit InPlacePod(int attempt)
      : dir(MakeDir()), sidecar(dir + "/launch.sock"), env(PodOneOfTwoByTwo()) {
    env["COHORT_LAUNCH_SOCKET"] = dir + "/launch.sock";
    env["COHORT_RESTART_ATTEMPT"] = absl::StrCat(attempt);
  }
  ~InPlacePod() { std::filesystem::remove_all(dir); }

  const std::string dir;
  FakeSidecar sidecar;
  std::map<std::string, std::string> env;
};

// Restarting in place without Kubernetes: after a failed attempt every process of it is gone,
// the shared-memory directory holds nothing of it, the sidecar hears how it ended, and the next
// attempt's processes run with its number.
TEST(CohortLaunchTest, InPlace_FailedAttemptReportedShmEmptiedNextAttemptStartsWhenOrdered) {
  InPlacePod pod(/*attempt=*/0);
  FakeSidecar& sidecar = pod.sidecar;
  std::map<std::string, std::string> env = pod.env;
  const std::string shm = pod.dir + "/shm";
  std::filesystem::create_directories(shm);
  { std::ofstream(shm + "/before-the-pod") << "kept"; }
  env["COHORT_SHM_DIR"] = shm;
  env["SHM"] = shm;
  // Attempt 0: rank 3 fails, rank 2 would sleep (and is killed after the window); attempt 1:
  // both succeed. Each leaves a file in the shared-memory directory.
  LauncherRun run = LaunchPod({"--grace-period", "1s", "--", "/bin/sh", "-c",
                               "touch $SHM/seg-$COHORT_RESTART_ATTEMPT-$LOCAL_RANK; echo attempt "
                               "$COHORT_RESTART_ATTEMPT pid $$; "
                               "if [ $COHORT_RESTART_ATTEMPT = 0 ]; then if [ $LOCAL_RANK = 1 ]; "
                               "then exit 3; fi; exec sleep 60; fi"},
                              env);
  ASSERT_TRUE(sidecar.Accept(absl::Seconds(10))) << "cohort-launch never connected";
  sidecar.Order(0);

  std::optional<std::string> line = sidecar.Next(absl::Seconds(20));
  ASSERT_TRUE(line.has_value()) << "no end of attempt 0 reported";
  std::optional<launch::AttemptEnded> ended = launch::ParseEnded(*line);
  ASSERT_TRUE(ended.has_value()) << *line;
  EXPECT_EQ(ended->attempt, 0);
  EXPECT_EQ(ended->exit_code, 3);
  EXPECT_EQ(ended->reason, "Error");
  EXPECT_THAT(ended->message,
              ::testing::HasSubstr("restart attempt 0 ended with rank 3's status (exit code 3)"));
  // Reported only once every process of the attempt was gone, its files with them.
  EXPECT_TRUE(run.ReadUntil("stopping rank 2 (SIGKILL)", absl::Seconds(5)));
  const std::string sleeper = run.Find("[rank 2] attempt 0 pid ");
  int pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(sleeper.substr(sleeper.rfind(' ') + 1), &pid)) << sleeper;
  EXPECT_NE(kill(pid, 0), 0) << "rank 2's process of attempt 0 is still there";
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(shm))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, std::set<std::string>({"before-the-pod"}));

  sidecar.Order(1);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(run.Has("cohort-launch: starting restart attempt 1 in place"));
  EXPECT_TRUE(run.Has("[rank 2] attempt 1 pid"));
  EXPECT_TRUE(run.Has("[rank 3] attempt 1 pid"));
}

// A process that outlives its attempt (it ignored its peers' failure: the operator waited for the
// pod's end and then ordered the next attempt anyway) is killed when the next is ordered, and the
// next attempt starts without waiting for it.
TEST(CohortLaunchTest,
     InPlace_LaterAttemptOrderedWhileOneRuns_ItsProcessesKilledAndTheOrderedOneStarts) {
  InPlacePod pod(/*attempt=*/0);
  FakeSidecar& sidecar = pod.sidecar;
  // Attempt 0 never ends by itself (SIGTERM ignored too); attempt 2 succeeds.
  LauncherRun run =
      LaunchPod({"--", "/bin/sh", "-c",
                 "echo attempt $COHORT_RESTART_ATTEMPT pid $$; "
                 "if [ $COHORT_RESTART_ATTEMPT = 0 ]; then trap '' TERM; exec sleep 600; fi"},
                pod.env);
  ASSERT_TRUE(sidecar.Accept(absl::Seconds(10))) << "cohort-launch never connected";
  sidecar.Order(0);
  ASSERT_TRUE(run.ReadUntil("[rank 3] attempt 0 pid ", absl::Seconds(10)));
  ASSERT_TRUE(run.ReadUntil("[rank 2] attempt 0 pid ", absl::Seconds(10)));
  sidecar.Order(2);
  ASSERT_TRUE(run.ReadUntil("starting restart attempt 2 in place", absl::Seconds(10)))
      << "attempt 0's processes held the pod";
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(run.Has(
      "restart attempt 2 was ordered while attempt 0 still runs here: stopping its processes"));
  for (const char* rank : {"[rank 2] attempt 0 pid ", "[rank 3] attempt 0 pid "}) {
    const std::string line = run.Find(rank);
    int pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &pid)) << line;
    EXPECT_NE(kill(pid, 0), 0) << rank << "'s process of attempt 0 is still there";
  }
  EXPECT_TRUE(run.Has("[rank 2] attempt 2 pid"));
  EXPECT_TRUE(run.Has("[rank 3] attempt 2 pid"));
}

// A spare pod that took the slot of a pod that is gone: ordered to run an attempt as pod 2 of 3,
// its processes are ranks 4 and 5 (with every variable that follows from that), in that attempt
// and the next; an order naming a pod the job does not have is refused, saying so.
TEST(CohortLaunchTest, InPlace_OrderedAsAnotherPod_ItsProcessesTakeThatPodsRanksFromThenOn) {
  InPlacePod pod(/*attempt=*/1);
  pod.env["COHORT_NUM_PROCESSES"] = "6";
  FakeSidecar& sidecar = pod.sidecar;
  LauncherRun run = LaunchPod(
      {"--", "/bin/sh", "-c",
       "echo attempt $COHORT_RESTART_ATTEMPT id $COHORT_PROCESS_ID rank $RANK node $NODE_RANK; "
       "[ $COHORT_RESTART_ATTEMPT = 2 ] || exit 1"},
      pod.env);
  ASSERT_TRUE(sidecar.Accept(absl::Seconds(10))) << "cohort-launch never connected";
  sidecar.Order(1, 7);
  ASSERT_TRUE(run.ReadUntil("ordered restart attempt 1 as pod 7, but the job has 3 pods: ignored",
                            absl::Seconds(10)));
  sidecar.Order(1, 2);
  ASSERT_TRUE(run.ReadUntil("this pod holds pod index 2 (ranks 4-5) from restart attempt 1 on",
                            absl::Seconds(10)));
  std::optional<std::string> line = sidecar.Next(absl::Seconds(20));
  ASSERT_TRUE(line.has_value()) << "no end of attempt 1 reported";
  sidecar.Order(2);  // A later order without an index: the pod keeps the one it holds.
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int attempt : {1, 2}) {
    EXPECT_TRUE(run.Has(absl::StrCat("[rank 4] attempt ", attempt, " id 4 rank 4 node 2")))
        << attempt;
    EXPECT_TRUE(run.Has(absl::StrCat("[rank 5] attempt ", attempt, " id 5 rank 5 node 2")))
        << attempt;
  }
  EXPECT_FALSE(run.Has("[rank 2]")) << "a process ran as the pod it was before";
}

// torchrun (--one-process) gives the pod's processes their ranks itself: a spare that took pod 2's
// slot tells it which node it now is.
TEST(CohortLaunchTest, InPlace_OneProcessOrderedAsAnotherPod_TorchrunHearsItsNodeRank) {
  InPlacePod pod(/*attempt=*/1);
  pod.env.erase("COHORT_PROCESS_ID");
  pod.env["COHORT_SPARE"] = "job-spare0";
  pod.env["COHORT_NUM_PROCESSES"] = "6";
  FakeSidecar& sidecar = pod.sidecar;
  LauncherRun run = LaunchPod(
      {"--one-process", "--", "/bin/sh", "-c", "echo torchrun node $PET_NODE_RANK"}, pod.env);
  ASSERT_TRUE(sidecar.Accept(absl::Seconds(10))) << "cohort-launch never connected";
  sidecar.Order(1);  // No slot yet: a spare runs nothing.
  sidecar.Order(1, 2);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(run.Has("torchrun node 2"));
  EXPECT_EQ(std::count_if(
                run.lines.begin(), run.lines.end(),
                [](const std::string& l) { return l.find("torchrun node") != std::string::npos; }),
            1)
      << "it ran once, as pod 2";
}

// A pod created to replace one alone runs the next attempt only once its sidecar orders it: the
// others still end the last one, whose coordination service its processes would reach.
TEST(CohortLaunchTest, InPlace_FirstAttemptStartsOnlyWhenOrdered) {
  InPlacePod pod(/*attempt=*/1);
  FakeSidecar& sidecar = pod.sidecar;
  LauncherRun run =
      LaunchPod({"--", "/bin/sh", "-c", "echo attempt $COHORT_RESTART_ATTEMPT"}, pod.env);
  ASSERT_TRUE(sidecar.Accept(absl::Seconds(10))) << "cohort-launch never connected";
  ASSERT_TRUE(
      run.ReadUntil("restart attempt 1 waits for its order from the sidecar", absl::Seconds(10)));
  EXPECT_FALSE(run.Has("[rank 2]")) << "a process started before its order";
  sidecar.Order(0);  // An earlier attempt's order (the hub's, as it was) is not this pod's.
  sidecar.Order(1);
  int status = run.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(run.Has("[rank 2] attempt 1"));
  EXPECT_TRUE(run.Has("[rank 3] attempt 1"));
  EXPECT_FALSE(run.Has("attempt 0"));
}

}  // namespace cohort::testing
