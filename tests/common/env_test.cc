#include "common/env.h"

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace cohort::env {
namespace {

TEST(ParseDuration, UnitsAndPlainSeconds_Parse) {
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDuration("5m"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("1.5"), absl::Milliseconds(1500));
}

TEST(ParseDuration, Garbage_InvalidArgumentExplainsFormat) {
  absl::StatusOr<absl::Duration> d = ParseDuration("soon");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("30s"), std::string::npos);
  EXPECT_FALSE(ParseDuration("-3s").ok());
}

TEST(GetInt, NotAnInteger_ErrorNamesVariable) {
  setenv("COHORT_TEST_INT", "4x", 1);
  absl::StatusOr<std::optional<int64_t>> v = GetInt("COHORT_TEST_INT");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("COHORT_TEST_INT='4x'"), std::string::npos);
  setenv("COHORT_TEST_INT", "12", 1);
  EXPECT_EQ(GetInt("COHORT_TEST_INT")->value(), 12);
  unsetenv("COHORT_TEST_INT");
  EXPECT_FALSE(GetInt("COHORT_TEST_INT")->has_value());
}

// The per-process environment of a 2-pod x 4-process job, one row per process.
TEST(ProcessVariables, TwoPodsOfFour_EachProcessItsRankLocalIndexAndPod) {
  struct Row {
    int pod, local;
    std::string rank, local_rank, node_rank;
  };
  const std::vector<Row> rows = {{0, 0, "0", "0", "0"}, {0, 3, "3", "3", "0"},
                                 {1, 0, "4", "0", "1"}, {1, 1, "5", "1", "1"},
                                 {1, 3, "7", "3", "1"}};
  for (const Row& row : rows) {
    SCOPED_TRACE(absl::StrCat("pod ", row.pod, " local ", row.local));
    ProcessPlacement p{.pod_index = row.pod, .local_index = row.local, .processes_per_pod = 4,
                       .num_pods = 2};
    std::vector<std::pair<std::string, std::string>> list = ProcessVariables(p, /*gpus=*/true);
    std::map<std::string, std::string> vars(list.begin(), list.end());
    EXPECT_EQ(vars.size(), list.size()) << "a variable is set twice";
    EXPECT_EQ(vars["COHORT_PROCESS_ID"], row.rank);
    EXPECT_EQ(vars["COHORT_NUM_PROCESSES"], "8");
    EXPECT_EQ(vars["COHORT_LOCAL_PROCESS_ID"], row.local_rank);
    EXPECT_EQ(vars["COHORT_PROCESSES_PER_POD"], "4");
    EXPECT_EQ(vars["RANK"], row.rank);
    EXPECT_EQ(vars["WORLD_SIZE"], "8");
    EXPECT_EQ(vars["LOCAL_RANK"], row.local_rank);
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(vars["GROUP_RANK"], row.node_rank);
    EXPECT_EQ(vars["NODE_RANK"], row.node_rank);
    EXPECT_EQ(vars["JAX_PROCESS_ID"], row.rank);
    EXPECT_EQ(vars["JAX_NUM_PROCESSES"], "8");
    EXPECT_EQ(vars["JAX_LOCAL_DEVICE_IDS"], row.local_rank);
  }
}

TEST(ProcessVariables, OneProcessPerPod_TodaysValuesAndNoDeviceWithoutGpus) {
  std::vector<std::pair<std::string, std::string>> list =
      ProcessVariables({.pod_index = 2, .local_index = 0, .processes_per_pod = 1, .num_pods = 4},
                       /*gpus=*/false);
  std::map<std::string, std::string> vars(list.begin(), list.end());
  EXPECT_EQ(vars["RANK"], "2");
  EXPECT_EQ(vars["LOCAL_RANK"], "0");
  EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(vars["NODE_RANK"], "2");
  EXPECT_EQ(vars["WORLD_SIZE"], "4");
  EXPECT_EQ(vars.count("JAX_LOCAL_DEVICE_IDS"), 0u);
}

TEST(AgentSocketPath, OneServedProcess_TheBaseElseOneSocketPerLocalIndex) {
  EXPECT_EQ(AgentSocketPath("/var/run/cohort/agent.sock", 0, 1), "/var/run/cohort/agent.sock");
  EXPECT_EQ(AgentSocketPath("/var/run/cohort/agent.sock", 3, 8), "/var/run/cohort/agent-3.sock");
  EXPECT_EQ(AgentSocketPath("/tmp/a", 1, 2), "/tmp/a-1.sock");
}

class PodPlacementTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* v : {kProcessId, kNumProcesses, kProcessesPerPod}) unsetenv(v);
  }
};

TEST_F(PodPlacementTest, FirstRankOfAPod_GivesPodIndexAndShape) {
  setenv(kProcessId, "4", 1);
  setenv(kNumProcesses, "8", 1);
  setenv(kProcessesPerPod, "2", 1);
  absl::StatusOr<ProcessPlacement> p = PodPlacementFromEnvironment();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->pod_index, 2);
  EXPECT_EQ(p->num_pods, 4);
  EXPECT_EQ(p->processes_per_pod, 2);
}

TEST_F(PodPlacementTest, InconsistentShapes_ErrorsNameTheVariable) {
  setenv(kNumProcesses, "6", 1);
  setenv(kProcessesPerPod, "4", 1);
  setenv(kProcessId, "0", 1);
  absl::StatusOr<ProcessPlacement> p = PodPlacementFromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("not a positive multiple of COHORT_PROCESSES_PER_POD=4"),
            std::string::npos)
      << p.status();
  setenv(kNumProcesses, "8", 1);
  setenv(kProcessId, "5", 1);
  p = PodPlacementFromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("COHORT_PROCESS_ID=5"), std::string::npos) << p.status();
  unsetenv(kProcessId);
  p = PodPlacementFromEnvironment();
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("COHORT_PROCESS_ID is not set"), std::string::npos);
}

}  // namespace
}  // namespace cohort::env
