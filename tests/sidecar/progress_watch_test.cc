// What a pod's sidecar tells the job's hang detector: its ranks' progress read from the start-up
// hook's status files, and the evidence collected when the hub asks for it, from the hook's
// answer file or from libdist's (asked down its attach stream).

#include "sidecar/progress_watch.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/temporary_directory.h"

namespace cohort::sidecar {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(20);

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

class ProgressWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.agent_socket = dir_ + "/agent.sock";
    options_.first_rank = 4;  // Pod 2 of a job with 2 processes per pod.
    options_.processes_per_pod = 2;
    options_.pod_index = 2;
    options_.period = absl::Milliseconds(10);
  }
  void TearDown() override { watch_.reset(); }

  // The hook's status file of rank `rank`, written `age` ago by a process started `started` ago.
  void WriteStatus(int rank, absl::Duration age, nlohmann::json fields,
                   absl::Duration started = absl::Minutes(1)) {
    const absl::Time now = absl::Now();
    fields["unix_ms"] = absl::ToUnixMillis(now - age);
    fields["started_unix_ms"] = absl::ToUnixMillis(now - started);
    Write(env::ProbeDir(options_.agent_socket, rank) + "/status.json", fields.dump());
  }

  // Starts the watch; every report it sends is kept.
  void Start() {
    watch_ = std::make_unique<ProgressWatch>(options_);
    watch_->Start([this](const attemptspb::ReportHealthRequest& r) {
      absl::MutexLock lock(&mu_);
      reports_.push_back(r);
    });
  }
  // Waits (bounded) for a report that says the evidence of `id` is complete.
  bool AwaitDumped(uint64_t id) {
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !reports_.empty() && reports_.back().dumped_id() == id;
    };
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done), kWait);
  }

  testing::TemporaryDirectory tmp_{"health-watch-test"};
  const std::string dir_ = tmp_.path();
  ProgressWatch::Options options_;
  std::unique_ptr<ProgressWatch> watch_;
  absl::Mutex mu_;
  std::vector<attemptspb::ReportHealthRequest> reports_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ProgressWatchTest, Collect_HookStatus_ReportedAsTheRankWithItsProgress) {
  const absl::Time now = absl::Now();
  WriteStatus(5, absl::Seconds(1),
              {{"steps", 20},
               {"last_step_unix_ms", absl::ToUnixMillis(now - absl::Seconds(3))},
               {"median_step_ms", 1000},
               {"phase", "run"},
               {"waiting", true},
               {"op", "all_reduce"},
               {"where", "train.py:91 in step"}});
  ProgressWatch watch(options_);

  attemptspb::ReportHealthRequest r = watch.Collect(now);
  EXPECT_EQ(r.pod_index(), 2);
  ASSERT_EQ(r.ranks_size(), 1) << "rank 4 wrote nothing: not judged";
  const attemptspb::RankHealth& h = r.ranks(0);
  EXPECT_EQ(h.rank(), 5);
  EXPECT_EQ(h.local(), 1);
  EXPECT_EQ(h.source(), "python");
  EXPECT_EQ(h.steps(), 20);
  EXPECT_NEAR(h.progress_age_ms(), 3000, 5);
  EXPECT_NEAR(h.report_age_ms(), 1000, 5);
  EXPECT_EQ(h.median_step_ms(), 1000);
  EXPECT_TRUE(h.waiting());
  EXPECT_EQ(h.op(), "all_reduce");
  EXPECT_EQ(h.where(), "train.py:91 in step");
}

TEST_F(ProgressWatchTest, Collect_LeftoversAndEndedAttempts_NotReported) {
  WriteStatus(4, absl::Minutes(5), {{"steps", 3}});  // A process gone long ago.
  ProgressWatch watch(options_);
  EXPECT_EQ(watch.Collect(absl::Now()).ranks_size(), 0);

  watch.SetAttempt(1, /*first_rank=*/4);
  WriteStatus(5, absl::Seconds(1), {{"steps", 3}}, /*started=*/absl::Minutes(1));  // Of attempt 0.
  EXPECT_EQ(watch.Collect(absl::Now()).ranks_size(), 0) << "a process of the attempt before";
  // Of attempt 1: started after it began (the file has whole milliseconds).
  WriteStatus(5, absl::Seconds(0), {{"steps", 3}}, /*started=*/-absl::Milliseconds(1));
  EXPECT_EQ(watch.Collect(absl::Now()).ranks_size(), 1);

  watch.AttemptEnded(1);
  EXPECT_EQ(watch.Collect(absl::Now()).ranks_size(), 0) << "cohort-launch said its processes ended";
}

// An elastic job's attempts: one that places the pod elsewhere is read under the placed ranks; one
// that runs without the pod reports nothing.
TEST_F(ProgressWatchTest, Collect_AnAttemptsPlacedRanks_NothingWhileThePodIsLeftOut) {
  ProgressWatch watch(options_);
  watch.SetAttempt(1, /*first_rank=*/2);  // Pod 2 at position 1: ranks 2-3.
  WriteStatus(4, absl::Seconds(0), {{"steps", 3}}, /*started=*/-absl::Milliseconds(1));
  WriteStatus(2, absl::Seconds(0), {{"steps", 5}}, /*started=*/-absl::Milliseconds(1));
  attemptspb::ReportHealthRequest report = watch.Collect(absl::Now());
  ASSERT_EQ(report.ranks_size(), 1);
  EXPECT_EQ(report.ranks(0).rank(), 2);
  EXPECT_EQ(report.ranks(0).steps(), 5);
  EXPECT_EQ(report.attempt(), 1);
  watch.SetAttempt(2, std::nullopt);
  WriteStatus(2, absl::Seconds(0), {{"steps", 6}}, /*started=*/-absl::Milliseconds(1));
  EXPECT_EQ(watch.Collect(absl::Now()).ranks_size(), 0) << "the attempt runs without this pod";
}

TEST_F(ProgressWatchTest, Dump_HookAndLibdistRanksAnswer_EvidenceCompleteOnceBothDid) {
  WriteStatus(4, absl::ZeroDuration(), {{"steps", 3}});  // Rank 4 has the hook; rank 5 libdist.
  std::vector<std::pair<int, std::string>> asked;
  options_.ask_process = [&](int local, uint64_t id, const std::string& directory) {
    EXPECT_EQ(id, 9u);
    asked.emplace_back(local, directory);
    return true;
  };
  Start();
  watch_->Dump(9, /*attempt=*/0);

  const std::string dumps = env::DumpsDir(options_.agent_socket);
  EXPECT_EQ(Read(env::ProbeDir(options_.agent_socket, 4) + "/dump-request"),
            absl::StrCat("9 ", dumps, "/attempt-0/rank-4\n"));
  ASSERT_EQ(asked.size(), 1u) << "only the rank without a hook is asked through libdist";
  EXPECT_EQ(asked[0].first, 1);
  EXPECT_EQ(asked[0].second, dumps + "/attempt-0/rank-5");
  EXPECT_TRUE(fs::is_directory(asked[0].second)) << "made for the trainer to write in";

  Write(env::ProbeDir(options_.agent_socket, 4) + "/dumped", "9 python stacks of 3 threads\n");
  Write(asked[0].second + "/dumped", "9 native stacks of every thread\n");
  EXPECT_TRUE(AwaitDumped(9));
}

TEST_F(ProgressWatchTest, Dump_NoRankAnswers_CompleteAfterThePatience_EachOrderAskedOnce) {
  std::atomic<int> asks{0};
  options_.ask_process = [&](int, uint64_t, const std::string&) {
    ++asks;
    return true;
  };
  options_.dump_patience = absl::Milliseconds(300);
  Start();
  const absl::Time asked = absl::Now();
  watch_->Dump(11, /*attempt=*/2);
  watch_->Dump(11, /*attempt=*/2);  // The hub repeats its order on every report until answered.
  ASSERT_TRUE(AwaitDumped(11));
  EXPECT_GE(absl::Now() - asked, options_.dump_patience)
      << "no rank answered: it waited its patience";
  EXPECT_EQ(asks.load(), 2) << "each of the pod's two ranks, once";

  watch_->Dump(11, /*attempt=*/2);
  EXPECT_EQ(asks.load(), 2) << "an order already answered is not asked again";
}

// The fixture's status.json (tests/fixtures/hang_evidence.json, which the hook's own test checks
// the hook writes) read as the fixture says the sidecar reads it.
TEST(ParseProbeStatus, TheFixturesStatusAsTheFixtureReadsIt) {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/tests/fixtures/hang_evidence.json");
  const nlohmann::json example = nlohmann::json::parse(in)["status_example"];
  const absl::Time now = absl::FromUnixMillis(example["now_unix_ms"].get<int64_t>());
  std::optional<attemptspb::RankHealth> h = ParseProbeStatus(example["text"], now);
  ASSERT_TRUE(h.has_value());
  const nlohmann::json& read = example["read"];
  EXPECT_EQ(h->steps(), read["steps"]);
  EXPECT_EQ(h->progress_age_ms(), read["progress_age_ms"]);
  EXPECT_EQ(h->median_step_ms(), read["median_step_ms"]);
  EXPECT_EQ(h->report_age_ms(), read["report_age_ms"]);
  EXPECT_EQ(h->phase(), read["phase"]);
  EXPECT_EQ(h->busy(), read["busy"]);
  EXPECT_EQ(h->waiting(), read["waiting"]);
  EXPECT_EQ(h->op(), read["op"]);
  EXPECT_EQ(h->where(), read["where"]);
  EXPECT_EQ(h->source(), "python");
  // A leftover: written long ago, or by a process older than the attempt.
  EXPECT_FALSE(ParseProbeStatus(example["text"], now + hang_evidence::kLeftoverStatus).has_value());
  EXPECT_FALSE(ParseProbeStatus(example["text"], now, now - absl::Seconds(1)).has_value());
  EXPECT_FALSE(ParseProbeStatus("not json", now).has_value());
}

}  // namespace
}  // namespace cohort::sidecar
