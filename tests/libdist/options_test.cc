#include "libdist/src/options.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dist::internal {
namespace {

using ::testing::HasSubstr;

class ResolveOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearEnvironment(); }
  void TearDown() override { ClearEnvironment(); }
  static void ClearEnvironment() {
    for (const char* name :
         {"COHORT_COORDINATOR_ADDRESS", "COHORT_NUM_PROCESSES", "COHORT_PROCESS_ID",
          "COHORT_AGENT_SOCKET", "COHORT_MODE", "COHORT_TOKEN", "COHORT_TOKEN_FILE",
          "COHORT_INITIALIZATION_TIMEOUT", "COHORT_HEARTBEAT_TIMEOUT", "COHORT_SHUTDOWN_TIMEOUT",
          "COHORT_RESTART_ATTEMPT"}) {
      unsetenv(name);
    }
  }
};

TEST_F(ResolveOptionsTest, EverythingFromEnvironment_AgentModeWhenSocketSet) {
  setenv("COHORT_NUM_PROCESSES", "4", 1);
  setenv("COHORT_PROCESS_ID", "3", 1);
  setenv("COHORT_AGENT_SOCKET", "/run/cohort/agent.sock", 1);
  setenv("COHORT_HEARTBEAT_TIMEOUT", "3s", 1);
  setenv("COHORT_TOKEN", "t0k", 1);
  absl::StatusOr<ResolvedOptions> r = ResolveOptions({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode, Mode::kAgent);
  EXPECT_EQ(r->job.num_processes, 4);
  EXPECT_EQ(r->job.process_id, 3);
  EXPECT_EQ(r->job.timeouts.heartbeat, absl::Seconds(3));
  EXPECT_EQ(r->job.timeouts.initialization, absl::Minutes(5));
  EXPECT_EQ(r->job.token, "t0k");
}

TEST_F(ResolveOptionsTest, ExplicitFieldsWinOverEnvironment) {
  setenv("COHORT_NUM_PROCESSES", "4", 1);
  setenv("COHORT_PROCESS_ID", "3", 1);
  Options o;
  o.num_processes = 2;
  o.process_id = 1;
  o.coordinator_address = "10.0.0.1:8476";
  absl::StatusOr<ResolvedOptions> r = ResolveOptions(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode, Mode::kStandalone);
  EXPECT_EQ(r->job.num_processes, 2);
  EXPECT_EQ(r->job.process_id, 1);
}

TEST_F(ResolveOptionsTest, MissingProcessId_NamesVariable) {
  setenv("COHORT_NUM_PROCESSES", "4", 1);
  absl::StatusOr<ResolvedOptions> r = ResolveOptions({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("COHORT_PROCESS_ID"));
}

TEST_F(ResolveOptionsTest, ProcessIdOutOfRange_InvalidArgument) {
  Options o;
  o.num_processes = 2;
  o.process_id = 2;
  o.coordinator_address = "h:1";
  absl::StatusOr<ResolvedOptions> r = ResolveOptions(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("0..1"));
}

TEST_F(ResolveOptionsTest, StandaloneWithoutCoordinator_InvalidArgument) {
  Options o;
  o.num_processes = 2;
  o.process_id = 0;
  absl::StatusOr<ResolvedOptions> r = ResolveOptions(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("COHORT_COORDINATOR_ADDRESS"));
}

TEST_F(ResolveOptionsTest, BadModeAndBadDuration_InvalidArgument) {
  setenv("COHORT_NUM_PROCESSES", "1", 1);
  setenv("COHORT_PROCESS_ID", "0", 1);
  setenv("COHORT_MODE", "cluster", 1);
  EXPECT_THAT(ResolveOptions({}).status().message(), HasSubstr("'agent' or 'standalone'"));
  unsetenv("COHORT_MODE");
  setenv("COHORT_SHUTDOWN_TIMEOUT", "forever", 1);
  EXPECT_THAT(ResolveOptions({}).status().message(), HasSubstr("COHORT_SHUTDOWN_TIMEOUT"));
}

}  // namespace
}  // namespace dist::internal
