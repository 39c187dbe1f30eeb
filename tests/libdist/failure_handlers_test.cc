#include "libdist/src/failure_handlers.h"

#include <pthread.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/process/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

using ::testing::ElementsAre;

// What ran, in order, under a lock.
struct Trace {
  absl::Mutex mu;
  std::vector<std::string> steps ABSL_GUARDED_BY(mu);
  void Add(std::string step) {
    absl::MutexLock lock(&mu);
    steps.push_back(std::move(step));
  }
  std::vector<std::string> Get() {
    absl::MutexLock lock(&mu);
    return steps;
  }
};

TEST(FailureHandlers, RunAll_InTheOrderAdded_WithTheFailure) {
  FailureHandlers handlers;
  Trace trace;
  handlers.Add("first", absl::Seconds(5), [&](const PeerFailure& f) {
    trace.Add(absl::StrCat("first saw rank ", f.process_id));
  });
  FailureHandlers::Id removed =
      handlers.Add("removed", absl::Seconds(5), [&](const PeerFailure&) { trace.Add("removed"); });
  handlers.Add("second", absl::Seconds(5), [&](const PeerFailure& f) { trace.Add(f.message); });
  handlers.Remove(removed);
  handlers.RunAll(PeerFailure{3, FailureCause::kCrash, "rank 3 crashed"});
  EXPECT_THAT(trace.Get(), ElementsAre("first saw rank 3", "rank 3 crashed"));
}

// A handler stuck past its bound delays the next one by its bound only (on the clock), and never
// blocks the failure's delivery.
TEST(FailureHandlers, HandlerOverrunsItsBound_TheNextRunsAfterTheBound) {
  cohort::FakeClock clock;
  FailureHandlers handlers(&clock);
  Trace trace;
  // Shared with the stuck handler's thread, which outlives RunAll and maybe this test.
  auto started = std::make_shared<absl::Notification>();
  auto unstick = std::make_shared<absl::Notification>();
  handlers.Add("stuck", absl::Seconds(10), [&trace, started, unstick](const PeerFailure&) {
    trace.Add("stuck started");
    started->Notify();
    unstick->WaitForNotification();
  });
  handlers.Add("next", absl::Seconds(10), [&](const PeerFailure&) { trace.Add("next"); });
  std::future<void> run = std::async(std::launch::async, [&] { handlers.RunAll(PeerFailure{}); });
  started->WaitForNotification();
  clock.AwaitWaiters(1);  // Waiting for "stuck", within its bound.
  clock.Advance(absl::Seconds(9));
  clock.AwaitWaiters(1);  // Still within it: still waiting.
  EXPECT_THAT(trace.Get(), ElementsAre("stuck started"));
  clock.Advance(absl::Seconds(1));
  run.get();
  EXPECT_THAT(trace.Get(), ElementsAre("stuck started", "next"));
  unstick->Notify();
}

// Through the public API: a one-process standalone job that fails (it reports an error itself)
// runs libdist's handlers first, then the program's, on libdist's failure thread.
TEST(FailureHandlers, JobFails_InternalHandlersRunBeforeTheProgramsOffTheEventThread) {
  absl::StatusOr<int> port = cohort::PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  Trace trace;
  absl::Notification program_handled;
  std::string program_thread;
  dist::Options options;
  options.mode = Mode::kStandalone;
  options.coordinator_address = absl::StrCat("127.0.0.1:", *port);
  options.num_processes = 1;
  options.process_id = 0;
  options.token = "";
  options.initialization_timeout = absl::Seconds(30);
  options.heartbeat_timeout = absl::Seconds(10);
  options.shutdown_timeout = absl::Seconds(30);
  options.install_preemption_handler = false;
  options.on_peer_failure = [&](const PeerFailure& f) {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    program_thread = name;
    trace.Add(absl::StrCat("program: ", FailureCauseName(f.cause)));
    program_handled.Notify();
  };
  absl::Status init = dist::Initialize(options);
  ASSERT_TRUE(init.ok()) << init;
  ASSERT_TRUE(AddFailureHandler("abort communicators", absl::Seconds(5), [&](const PeerFailure&) {
                trace.Add("libdist: abort communicators");
              }).ok());
  ASSERT_TRUE(dist::ReportError("bad input shard").ok());
  program_handled.WaitForNotification();
  EXPECT_THAT(trace.Get(), ElementsAre("libdist: abort communicators", "program: reported error"));
  EXPECT_EQ(program_thread, "dist-failure");
  EXPECT_EQ(dist::Shutdown().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(AddFailureHandler("late", absl::Seconds(1), [](const PeerFailure&) {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dist::internal
