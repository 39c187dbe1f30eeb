#include "common/job_settings.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

class JobSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name :
         {"COHORT_COORDINATOR_ADDRESS", "COHORT_NUM_PROCESSES", "COHORT_PROCESS_ID",
          "COHORT_RESTART_ATTEMPT", "COHORT_TOKEN", "COHORT_TOKEN_FILE",
          "COHORT_INITIALIZATION_TIMEOUT", "COHORT_HEARTBEAT_TIMEOUT", "COHORT_SHUTDOWN_TIMEOUT"}) {
      unsetenv(name);
    }
  }
  static JobSettingsOverrides Rank(int id, int of) {
    JobSettingsOverrides o;
    o.process_id = id;
    o.num_processes = of;
    return o;
  }
};

TEST_F(JobSettingsTest, NothingSet_TheDefaults) {
  absl::StatusOr<JobSettings> s = ResolveJobSettings(Rank(0, 1));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->timeouts.initialization, absl::Minutes(5));
  EXPECT_EQ(s->timeouts.heartbeat, absl::Seconds(10));
  EXPECT_EQ(s->timeouts.shutdown, absl::Minutes(5));
  EXPECT_FALSE(s->restart_attempt.has_value());
  EXPECT_EQ(s->token, "");
  EXPECT_EQ(s->coordinator_address, "");
}

TEST_F(JobSettingsTest, EnvironmentFillsWhatIsNotGiven_GivenValuesWin) {
  setenv("COHORT_NUM_PROCESSES", "8", 1);
  setenv("COHORT_PROCESS_ID", "5", 1);
  setenv("COHORT_COORDINATOR_ADDRESS", "job-0.job.ns.svc:8476", 1);
  setenv("COHORT_RESTART_ATTEMPT", "2", 1);
  setenv("COHORT_HEARTBEAT_TIMEOUT", "3s", 1);
  setenv("COHORT_SHUTDOWN_TIMEOUT", "90", 1);
  setenv("COHORT_TOKEN", " secret ", 1);
  JobSettingsOverrides given;
  given.shutdown_timeout = absl::Seconds(20);
  absl::StatusOr<JobSettings> s = ResolveJobSettings(given);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->num_processes, 8);
  EXPECT_EQ(s->process_id, 5);
  EXPECT_EQ(s->coordinator_address, "job-0.job.ns.svc:8476");
  EXPECT_EQ(s->restart_attempt, 2);
  EXPECT_EQ(s->timeouts.heartbeat, absl::Seconds(3));
  EXPECT_EQ(s->timeouts.shutdown, absl::Seconds(20));
  EXPECT_EQ(s->token, "secret");
}

TEST_F(JobSettingsTest, MissingOrOutOfRangeRank_NamesTheVariable) {
  setenv("COHORT_NUM_PROCESSES", "4", 1);
  absl::Status missing = ResolveJobSettings({}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("COHORT_PROCESS_ID"));
  absl::Status out_of_range = ResolveJobSettings(Rank(4, 4)).status();
  EXPECT_THAT(out_of_range.message(), HasSubstr("ids run 0..3"));
}

TEST_F(JobSettingsTest, MalformedValues_InvalidArgumentNamingTheVariable) {
  setenv("COHORT_RESTART_ATTEMPT", "first", 1);
  EXPECT_THAT(ResolveJobSettings(Rank(0, 1)).status().message(),
              HasSubstr("COHORT_RESTART_ATTEMPT='first' is not an integer"));
  setenv("COHORT_RESTART_ATTEMPT", "-1", 1);
  EXPECT_THAT(ResolveJobSettings(Rank(0, 1)).status().message(), HasSubstr("negative"));
  unsetenv("COHORT_RESTART_ATTEMPT");
  setenv("COHORT_HEARTBEAT_TIMEOUT", "soon", 1);
  EXPECT_THAT(ResolveJobSettings(Rank(0, 1)).status().message(),
              HasSubstr("COHORT_HEARTBEAT_TIMEOUT"));
  setenv("COHORT_HEARTBEAT_TIMEOUT", "0s", 1);
  EXPECT_THAT(ResolveJobSettings(Rank(0, 1)).status().message(), HasSubstr("must be positive"));
  unsetenv("COHORT_HEARTBEAT_TIMEOUT");
  JobSettingsOverrides no_port = Rank(0, 1);
  no_port.coordinator_address = "job-0.job";
  EXPECT_THAT(ResolveJobSettings(no_port).status().message(), HasSubstr("has no valid port"));
}

TEST_F(JobSettingsTest, TimeoutsAlone_ForLaunchersThatPassThemOn) {
  setenv("COHORT_INITIALIZATION_TIMEOUT", "1m", 1);
  JobSettingsOverrides given;
  given.heartbeat_timeout = absl::Seconds(2);
  absl::StatusOr<JobTimeouts> t = ResolveJobTimeouts(given);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->initialization, absl::Minutes(1));
  EXPECT_EQ(t->heartbeat, absl::Seconds(2));
  EXPECT_EQ(t->shutdown, kDefaultShutdownTimeout);
}

}  // namespace
}  // namespace cohort
