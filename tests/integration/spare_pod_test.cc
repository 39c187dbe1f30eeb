// Hot spares without Kubernetes: a spare pod's sidecar and cohort-launch, as real processes, hold
// no rank while the job's attempt hub runs (here in the test, as rank 0's sidecar hosts it). The
// test orders the next attempt as the operator would, giving the spare the slot of pod 1, which is
// gone: the spare's sidecar restarts itself as pod 1's, and cohort-launch runs pod 1's ranks in
// that attempt.

#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/process/watched_process.h"
#include "coordination/attempts/attempt_client.h"
#include "coordination/attempts/attempt_hub.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temporary_directory.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

namespace attemptspb = ::cohort::coordination::v1;
constexpr char kToken[] = "spare-test-token";
constexpr absl::Duration kWait = absl::Seconds(30);

// The last state the hub published, and a wait for one that satisfies a predicate.
class HubState {
 public:
  void Set(const attemptspb::AttemptState& s) {
    absl::MutexLock lock(&mu_);
    last_ = s;
  }
  bool WaitFor(const std::function<bool(const attemptspb::AttemptState&)>& pred) {
    auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return last_.has_value() && pred(*last_);
    };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&holds), kWait);
  }

 private:
  absl::Mutex mu_;
  std::optional<attemptspb::AttemptState> last_ ABSL_GUARDED_BY(mu_);
};

TEST(SparePodTest, GivenTheSlotOfAPodThatIsGone_RunsThatPodsRanksFromTheNextAttempt) {
  TemporaryDirectory dir("spare-pod-test");
  absl::StatusOr<std::unique_ptr<coordination::AttemptHubServer>> hub =
      coordination::AttemptHubServer::Start("127.0.0.1:0", /*first_attempt=*/0, kToken);
  ASSERT_TRUE(hub.ok()) << hub.status();
  // The hub listens on the coordinator's port + 3; nothing listens on the coordinator's own.
  const std::map<std::string, std::string> env = {
      {"COHORT_SPARE", "job-spare0"},
      {"COHORT_NUM_PROCESSES", "4"},
      {"COHORT_PROCESSES_PER_POD", "2"},
      {"COHORT_COORDINATOR_ADDRESS", absl::StrCat("127.0.0.1:", (*hub)->port() - 3)},
      {"COHORT_TOKEN", kToken},
      {"COHORT_LAUNCH_SOCKET", dir.path() + "/launch.sock"},
      {"COHORT_AGENT_SOCKET", dir.path() + "/agent.sock"},
      {"COHORT_HANG_TIMEOUT", "0"},
  };
  absl::StatusOr<std::unique_ptr<WatchedProcess>> sidecar =
      WatchedProcess::Start({BinPath("cohort-sidecar"), "--http-port", "0"}, env, "sidecar");
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  LauncherRun launch = StartLauncher({BinPath("cohort-launch"), "--", "/bin/sh", "-c",
                                      "echo attempt $COHORT_RESTART_ATTEMPT id $COHORT_PROCESS_ID "
                                      "rank $RANK of $WORLD_SIZE node $NODE_RANK"},
                                     env);

  HubState state;
  coordination::AttemptObserver observer(
      absl::StrCat("127.0.0.1:", (*hub)->port()), kToken,
      [&](const attemptspb::AttemptState& s) { state.Set(s); }, nullptr);
  ASSERT_TRUE(state.WaitFor([](const auto& s) {
    return s.spares_size() == 1 && s.spares(0) == "job-spare0";
  })) << (*sidecar)->Output();
  ASSERT_TRUE(launch.ReadUntil("a spare pod: waiting for the sidecar to give it the slot", kWait));
  EXPECT_FALSE(launch.Has("[rank")) << "a spare ran a process before it held a slot";

  attemptspb::SpareAssignment take;
  take.set_pod_index(1);
  take.set_spare("job-spare0");
  ASSERT_TRUE(observer.Start(1, {take}).ok());

  ASSERT_TRUE(launch.ReadUntil("[rank 3] attempt 1", kWait)) << (*sidecar)->Output();
  const int status = launch.Finish();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(launch.Has("this pod holds pod index 1 (ranks 2-3) from restart attempt 1 on"));
  EXPECT_TRUE(launch.Has("[rank 2] attempt 1 id 2 rank 2 of 4 node 1"));
  EXPECT_TRUE(launch.Has("[rank 3] attempt 1 id 3 rank 3 of 4 node 1"));
  EXPECT_NE((*sidecar)->WaitForLine("takes pod index 1 (ranks 2-3) in restart attempt 1", kWait),
            "");
  // The sidecar is pod 1's now, following the hub as the spare that holds index 1.
  EXPECT_TRUE(state.WaitFor([](const auto& s) {
    return s.spares_size() == 0 && s.following_size() == 1 && s.following(0) == 1;
  })) << (*sidecar)->Output();
  (*sidecar)->Signal(SIGTERM);
  EXPECT_TRUE((*sidecar)->WaitForExit(kWait).has_value());
}

}  // namespace
}  // namespace cohort::testing
