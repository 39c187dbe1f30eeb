// Multi-process tests: real cohort-sidecar and trainer processes on loopback, killed with real
// signals.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>

#include <httplib.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/job_harness.h"

namespace cohort::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kPeerFailureExit = 75;

int ExitCode(int wait_status) {
  return wait_status >= 0 && WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
}

// Starts every sidecar and trainer in the "wait" scenario; true once every rank is waiting
// (in a barrier or a key-value get that only a failure ends).
bool StartAllWaiting(JobHarness& job) {
  job.StartAll("wait");
  for (int r = 0; r < job.config().num_processes; ++r) {
    if (!job.WaitForLine(absl::StrCat("rank ", r), "WAITING", absl::Seconds(60))) return false;
  }
  // initialize() returns once every rank registered; each agent then opens its event stream. A
  // sidecar killed before its stream reached the service is noticed only at the heartbeat
  // timeout (docs/faults.md), so the fault tests start once every stream is open.
  httplib::Client http("127.0.0.1", job.http_port(0));
  const std::string want = absl::StrCat("cohort_event_streams ", job.config().num_processes);
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto res = http.Get("/metrics");
    if (res && res->status == 200 && absl::StrContains(res->body, want)) return true;
    absl::SleepFor(absl::Milliseconds(5));  // Another process's state, read over HTTP: polled.
  }
  ADD_FAILURE() << "rank 0's service never had " << want;
  return false;
}

TEST(JobTest, EightRanksWithSidecars_RendezvousBarriersAndShutdown) {
  JobHarness job({.num_processes = 8});
  job.StartAll("rendezvous");
  for (int r = 0; r < 8; ++r) {
    std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(60))), 0) << label;
    EXPECT_THAT(job.FindLine(label, "RENDEZVOUS"), HasSubstr("keys=8 count=8")) << label;
  }
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(ExitCode(job.WaitForExit(absl::StrCat("sidecar ", r), absl::Seconds(30))), 0) << r;
  }
}

TEST(JobTest, TrainerKilledInBarrier_EveryOtherRankFailsNamingItWithinTwoSeconds) {
  JobHarness job({.num_processes = 4});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("rank 2").Signal(SIGKILL);
  absl::Time killed = absl::Now();
  for (int r : {0, 1, 3}) {
    std::string label = absl::StrCat("rank ", r);
    int status = job.WaitForExit(label, absl::Seconds(2) - (absl::Now() - killed));
    ASSERT_NE(status, -1) << label << " still running 2 s after rank 2 was killed";
    EXPECT_EQ(ExitCode(status), kPeerFailureExit) << label;
    std::string line = job.FindLine(label, "the job failed");
    EXPECT_THAT(line, HasSubstr("rank 2")) << label;
    EXPECT_THAT(line, HasSubstr("cause: crash")) << label;
  }
}

TEST(JobTest, ProgramInstalledFailureHandler_CalledWithRankAndCause) {
  JobHarness job({.num_processes = 3});
  for (int r = 0; r < 3; ++r) job.StartSidecar(r);
  for (int r = 0; r < 3; ++r) job.StartTrainer(r, "wait-with-handler");
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(job.WaitForLine(absl::StrCat("rank ", r), "WAITING", absl::Seconds(60)));
  }
  job.Process("rank 0").Signal(SIGKILL);
  for (int r : {1, 2}) {
    std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(10))), 9) << label;
    EXPECT_THAT(job.FindLine(label, "HANDLED"), HasSubstr("failed=0 cause=crash")) << label;
  }
}

// Waits until every rank in `ranks` exited with `code` within `bound` of `since`, and its
// failure line names `cause_text`.
void ExpectToldWithin(JobHarness& job, std::vector<int> ranks, absl::Time since,
                      absl::Duration bound, const std::string& cause_text) {
  for (int r : ranks) {
    std::string label = absl::StrCat("rank ", r);
    int status =
        job.WaitForExit(label, std::max(bound - (absl::Now() - since), absl::ZeroDuration()));
    ASSERT_NE(status, -1) << label << " still running " << bound << " after the fault";
    EXPECT_EQ(ExitCode(status), kPeerFailureExit) << label;
    std::string line = job.FindLine(label, "the job failed");
    if (line.empty()) line = job.FindLine(label, "INIT_FAILED");
    EXPECT_THAT(line, HasSubstr(cause_text)) << label;
  }
}

TEST(JobTest, SidecarKilled_EveryOtherRankToldWithinOneSecondNamingIt) {
  // A dead process's connections are closed (RST/FIN): no heartbeat timeout is needed.
  JobHarness job({.num_processes = 3, .heartbeat_timeout = "10s"});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("sidecar 1").Signal(SIGKILL);
  absl::Time killed = absl::Now();
  ExpectToldWithin(job, {0, 2}, killed, absl::Seconds(1), "rank 1");
  EXPECT_THAT(job.FindLine("rank 0", "the job failed"), HasSubstr("closed without a shutdown"));
  // Rank 1's trainer lost its own sidecar.
  EXPECT_EQ(ExitCode(job.WaitForExit("rank 1", absl::Seconds(5))), kPeerFailureExit);
  EXPECT_THAT(job.FindLine("rank 1", "the job failed"), HasSubstr("sidecar"));
}

TEST(JobTest, SidecarFrozen_HeartbeatTimeoutFailsJobNamingRank) {
  // A silent peer (no RST, no FIN: a frozen or partitioned host) is what heartbeats are for.
  JobHarness job({.num_processes = 3, .heartbeat_timeout = "1s"});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("sidecar 1").Signal(SIGSTOP);
  ExpectToldWithin(job, {0, 2}, absl::Now(), absl::Seconds(15), "rank 1");
  EXPECT_THAT(job.FindLine("rank 0", "the job failed"), HasSubstr("heartbeat"));
  job.Process("sidecar 1").Signal(SIGKILL);
}

TEST(JobTest, CoordinatorSidecarKilled_EveryRankToldAtOnceNotAtTheHeartbeatTimeout) {
  // The service's state dies with its process: a refused or reset connection to it is a job
  // failure at once, although the heartbeat timeout is 10 s.
  JobHarness job({.num_processes = 4, .heartbeat_timeout = "10s"});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("sidecar 0").Signal(SIGKILL);
  absl::Time killed = absl::Now();
  ExpectToldWithin(job, {1, 2, 3}, killed, absl::Seconds(1), "lost the coordination service");
  EXPECT_THAT(job.FindLine("rank 1", "the job failed"), HasSubstr("sidecar died or was killed"));
  // Every surviving sidecar exits by itself.
  for (int r : {1, 2, 3}) {
    std::string label = absl::StrCat("sidecar ", r);
    EXPECT_NE(job.WaitForExit(label, absl::Seconds(2)), -1) << label << " lingers";
  }
}

TEST(JobTest, CoordinatorFrozen_RanksFailAtTheHeartbeatTimeout) {
  JobHarness job({.num_processes = 3, .heartbeat_timeout = "1s"});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("sidecar 0").Signal(SIGSTOP);
  ExpectToldWithin(job, {1, 2}, absl::Now(), absl::Seconds(15), "no heartbeat succeeded");
  job.Process("sidecar 0").Signal(SIGKILL);
}

TEST(JobTest, AfterAFailure_EverySidecarExitsByItselfPromptly) {
  JobHarness job({.num_processes = 4});
  ASSERT_TRUE(StartAllWaiting(job));
  job.Process("rank 2").Signal(SIGKILL);
  absl::Time killed = absl::Now();
  for (int r = 0; r < 4; ++r) {
    std::string label = absl::StrCat("sidecar ", r);
    int status = job.WaitForExit(
        label, std::max(absl::Seconds(2) - (absl::Now() - killed), absl::ZeroDuration()));
    ASSERT_NE(status, -1) << label << " still running 2 s after the failure";
    EXPECT_EQ(ExitCode(status), 1) << label;
  }
}

TEST(JobTest, TrainerKilledDuringTheConnectBarrier_OthersStopWaitingAtOnce) {
  // Ranks 0-2 wait in initialize() for rank 3, which never starts; rank 1 dies meanwhile.
  JobHarness job({.num_processes = 4, .initialization_timeout = "60s"});
  for (int r = 0; r < 4; ++r) job.StartSidecar(r);
  for (int r = 0; r < 3; ++r) job.StartTrainer(r, "wait");
  for (int r = 0; r < 3; ++r) {
    std::string label = absl::StrCat("sidecar ", r);
    ASSERT_TRUE(job.WaitForLine(label, absl::StrCat("registering rank ", r), absl::Seconds(60)))
        << label;
  }
  job.Process("rank 1").Signal(SIGKILL);
  absl::Time killed = absl::Now();
  ExpectToldWithin(job, {0, 2}, killed, absl::Seconds(1), "rank 1");
}

TEST(JobTest, SigtermToOneRank_EveryRankReachesSameSyncStepMaxPlusOne) {
  JobHarness job({.num_processes = 4});
  job.StartAll("preempt");
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(job.WaitForLine(absl::StrCat("rank ", r), "TRAINING", absl::Seconds(60)));
  }
  job.Process("rank 1").Signal(SIGTERM);
  std::set<std::string> steps;
  for (int r = 0; r < 4; ++r) {
    std::string label = absl::StrCat("rank ", r);
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(60))), 0) << label;
    std::string sync = job.FindLine(label, "SYNC");
    ASSERT_FALSE(sync.empty()) << label;
    steps.insert(sync.substr(sync.find("step=")));
    // "preemption sync point: step X (largest step reached: Y)" with X == Y + 1.
    std::string point = job.FindLine(label, "preemption sync point");
    int64_t x = 0, y = 0;
    ASSERT_EQ(std::sscanf(point.substr(point.find("step ")).c_str(),
                          "step %ld (largest step reached: %ld)", &x, &y),
              2)
        << point;
    EXPECT_EQ(x, y + 1) << point;
    EXPECT_THAT(sync, HasSubstr(absl::StrCat("step=", x)));
  }
  EXPECT_EQ(steps.size(), 1u) << "ranks disagreed on the sync step";
}

// --- Bad input ------------------------------------------------------------------------------

TEST(JobTest, ProcessIdOutOfRange_ClearError) {
  JobHarness job({.num_processes = 2});
  job.StartTrainer(0, "init-only", {{"COHORT_PROCESS_ID", "5"}});
  EXPECT_EQ(ExitCode(job.WaitForExit("rank 0", absl::Seconds(10))), 3);
  std::string line = job.FindLine("rank 0", "INIT_FAILED");
  EXPECT_THAT(line, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(line, HasSubstr("out of range"));
  EXPECT_THAT(line, HasSubstr("0..1"));
}

TEST(JobTest, DuplicateRank_SecondProcessRejected) {
  JobHarness job({.num_processes = 3});
  job.StartTrainer(0, "init-only", {{"COHORT_LOG_LEVEL", "debug"}});
  job.StartTrainer(1, "init-only", {}, "rank 1 first");
  ASSERT_TRUE(job.WaitForLine("rank 0", "rank 1 registered", absl::Seconds(30)));
  job.StartTrainer(1, "init-only", {}, "rank 1 second");
  EXPECT_EQ(ExitCode(job.WaitForExit("rank 1 second", absl::Seconds(30))), 3);
  std::string line = job.FindLine("rank 1 second", "INIT_FAILED");
  EXPECT_THAT(line, HasSubstr("ALREADY_EXISTS"));
  EXPECT_THAT(line, HasSubstr("distinct COHORT_PROCESS_ID"));
  // The job goes on with the first process.
  job.StartTrainer(2, "init-only");
  for (const char* label : {"rank 0", "rank 1 first", "rank 2"}) {
    EXPECT_EQ(ExitCode(job.WaitForExit(label, absl::Seconds(30))), 0) << label;
  }
}

TEST(JobTest, NumProcessesMismatch_ClearError) {
  JobHarness job({.num_processes = 2, .initialization_timeout = "5s"});
  job.StartTrainer(0, "init-only");
  job.StartTrainer(1, "init-only", {{"COHORT_NUM_PROCESSES", "3"}});
  EXPECT_EQ(ExitCode(job.WaitForExit("rank 1", absl::Seconds(30))), 3);
  std::string line = job.FindLine("rank 1", "INIT_FAILED");
  EXPECT_THAT(line, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(line, HasSubstr("num_processes mismatch"));
}

TEST(JobTest, UnreachableCoordinator_ClearErrorWithinInitializationTimeout) {
  JobHarness job({.num_processes = 2, .initialization_timeout = "2s"});
  absl::Time start = absl::Now();
  job.StartTrainer(1, "init-only");  // Nobody serves the coordinator port.
  int status = job.WaitForExit("rank 1", absl::Seconds(10));
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(ExitCode(status), 3);
  EXPECT_LT(took, absl::Seconds(5)) << "gave up long after the 2 s initialization timeout";
  std::string line = job.FindLine("rank 1", "INIT_FAILED");
  EXPECT_THAT(line, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(line, HasSubstr("could not reach the coordinator"));
  EXPECT_THAT(line, HasSubstr("COHORT_COORDINATOR_ADDRESS"));
}

TEST(JobTest, WrongToken_Unauthenticated) {
  JobHarness job({.num_processes = 2, .initialization_timeout = "5s"});
  std::string bad = ::testing::TempDir() + "/bad-token";
  std::ofstream(bad) << "not-the-job-token";
  job.StartTrainer(0, "init-only");
  job.StartTrainer(1, "init-only", {{"COHORT_TOKEN_FILE", bad}});
  EXPECT_EQ(ExitCode(job.WaitForExit("rank 1", absl::Seconds(30))), 3);
  std::string line = job.FindLine("rank 1", "INIT_FAILED");
  EXPECT_THAT(line, HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(line, HasSubstr("wrong job token"));
}

void SendGarbage(int port) {
  std::mt19937 rng(42);
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
    std::string junk(4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    ssize_t ignored = send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    (void)ignored;
    close(fd);
  }
}

TEST(JobTest, RandomBytesOnGrpcAndHttpPorts_ServiceKeepsServing) {
  JobHarness job({.num_processes = 2});
  job.StartSidecar(0);
  job.StartSidecar(1);
  // Sidecar 0 logs its ports once it serves (after writing the HTTP port file).
  ASSERT_TRUE(job.WaitForLine("sidecar 0", "metrics on port", absl::Seconds(30)));
  ASSERT_NE(job.http_port(0), 0);
  SendGarbage(job.coordinator_port());
  SendGarbage(job.http_port(0));
  job.StartTrainer(0, "wait");
  job.StartTrainer(1, "wait");
  ASSERT_TRUE(job.WaitForLine("rank 0", "WAITING", absl::Seconds(30)));
  ASSERT_TRUE(job.WaitForLine("rank 1", "WAITING", absl::Seconds(30)));
  httplib::Client http("127.0.0.1", job.http_port(0));
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res) << "no answer on /metrics after garbage";
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("cohort_task_up{rank=\"1\"} 1"));
}

// Reads `port`'s /metrics until it holds every one of `wanted` (a heartbeat carries a rank's step
// to rank 0 within a heartbeat interval; nothing notifies a test of that), at most `timeout`.
std::string MetricsWith(int port, const std::vector<std::string>& wanted, absl::Duration timeout) {
  httplib::Client http("127.0.0.1", port);
  absl::Time deadline = absl::Now() + timeout;
  std::string body;
  while (absl::Now() < deadline) {
    if (auto res = http.Get("/metrics"); res && res->status == 200) {
      body = res->body;
      if (std::all_of(wanted.begin(), wanted.end(),
                      [&](const std::string& w) { return body.find(w) != std::string::npos; })) {
        break;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return body;
}

TEST(JobTest, Metrics_StepsAndTheRankMissingAtTheOldestBarrier) {
  JobHarness job({.num_processes = 3});
  job.StartAll("wait");  // Steps 7 everywhere; ranks 0 and 1 in barrier "hang", rank 2 not.
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(job.WaitForLine(absl::StrCat("rank ", r), "WAITING", absl::Seconds(30)));
  std::string coordinator =
      MetricsWith(job.http_port(0),
                  {"cohort_task_step{rank=\"2\"} 7", "cohort_task_in_oldest_barrier{rank=\"1\"} 1"},
                  absl::Seconds(20));
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_step{rank=\"0\"} 7"));
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_step{rank=\"2\"} 7"));
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_progress_age_seconds{rank=\"2\"}"));
  EXPECT_THAT(coordinator, Not(HasSubstr("cohort_task_program_report_age_seconds{")))
      << "no collectives, no collective progress reports";
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_in_oldest_barrier{rank=\"0\"} 1"));
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_in_oldest_barrier{rank=\"1\"} 1"));
  EXPECT_THAT(coordinator, HasSubstr("cohort_task_in_oldest_barrier{rank=\"2\"} 0"));
  EXPECT_THAT(coordinator, Not(HasSubstr("cohort_barrier_oldest_open_seconds 0\n")));
  EXPECT_THAT(coordinator, HasSubstr("cohort_world_size 3"));
  std::string rank2 =
      MetricsWith(job.http_port(2), {"cohort_trainer_step{rank=\"2\"} 7"}, absl::Seconds(5));
  EXPECT_THAT(rank2, HasSubstr("cohort_trainer_step{rank=\"2\"} 7"));
  EXPECT_THAT(rank2, HasSubstr("cohort_trainer_last_progress_timestamp_seconds{rank=\"2\"} "));
  EXPECT_THAT(rank2, HasSubstr("cohort_heartbeat_timeout_seconds "));
  EXPECT_THAT(rank2, Not(HasSubstr("cohort_task_step")));  // Only rank 0 holds the job's view.
}

TEST(JobTest, Metrics_PromtoolAcceptsEverySidecarsOutput) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not found: install Debian's 'prometheus' package (make deps does)";
  }
  JobHarness job({.num_processes = 2});
  job.StartAll("wait");
  ASSERT_TRUE(job.WaitForLine("rank 0", "WAITING", absl::Seconds(30)));
  ASSERT_TRUE(job.WaitForLine("rank 1", "WAITING", absl::Seconds(30)));
  for (int r = 0; r < 2; ++r) {
    httplib::Client http("127.0.0.1", job.http_port(r));
    auto res = http.Get("/metrics");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_THAT(res->body, HasSubstr("cohort_build_info"));
    EXPECT_THAT(res->body, HasSubstr("cohort_barrier_wait_seconds"));
    if (r == 0) {
      EXPECT_THAT(res->body, HasSubstr("cohort_tasks{state=\"connected\"} 2"));
      EXPECT_THAT(res->body, HasSubstr("cohort_task_heartbeat_age_seconds{rank=\"1\"}"));
    }
    std::string file = absl::StrCat(::testing::TempDir(), "/metrics-", r, ".txt");
    std::ofstream(file) << res->body;
    std::string cmd = absl::StrCat("promtool check metrics < ", file, " 2>&1");
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), pipe)) out += buf;
    int status = pclose(pipe);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool rejected sidecar " << r << ":\n" << out;
    auto ready = http.Get("/readyz");
    ASSERT_TRUE(ready);
    EXPECT_EQ(ready->status, 200);
  }
}

}  // namespace
}  // namespace cohort::testing
