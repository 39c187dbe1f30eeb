#include "common/env.h"

#include <cstdlib>
#include <fstream>
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
  const std::vector<Row> rows = {{0, 0, "0", "0", "0"},
                                 {0, 3, "3", "3", "0"},
                                 {1, 0, "4", "0", "1"},
                                 {1, 1, "5", "1", "1"},
                                 {1, 3, "7", "3", "1"}};
  for (const Row& row : rows) {
    SCOPED_TRACE(absl::StrCat("pod ", row.pod, " local ", row.local));
    ProcessPlacement p{
        .pod_index = row.pod, .local_index = row.local, .processes_per_pod = 4, .num_pods = 2};
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

// An elastic job's attempt: the placed ranks and world, and its replica groups, running and
// wanted; a job that is not elastic gets neither group variable.
TEST(ProcessVariables, ElasticAttempt_ReplicaGroupsRunningAndWanted) {
  std::vector<std::pair<std::string, std::string>> list =
      ProcessVariables({.pod_index = 2,
                        .local_index = 1,
                        .processes_per_pod = 2,
                        .num_pods = 3,
                        .replica_groups = 3,
                        .desired_replica_groups = 4},
                       /*gpus=*/false);
  std::map<std::string, std::string> vars(list.begin(), list.end());
  EXPECT_EQ(vars["COHORT_PROCESS_ID"], "5");
  EXPECT_EQ(vars["WORLD_SIZE"], "6");
  EXPECT_EQ(vars["COHORT_REPLICA_GROUPS"], "3");
  EXPECT_EQ(vars["COHORT_DESIRED_REPLICA_GROUPS"], "4");
  list = ProcessVariables({.pod_index = 2, .processes_per_pod = 2, .num_pods = 4}, false);
  vars = std::map<std::string, std::string>(list.begin(), list.end());
  EXPECT_EQ(vars.count("COHORT_REPLICA_GROUPS"), 0u);
  EXPECT_EQ(vars.count("COHORT_DESIRED_REPLICA_GROUPS"), 0u);
}

// The whole job contract, one row per caller: every variable JobVariables sets, in its order.
struct JobVariablesCase {
  std::string name;
  JobInputs in;
  std::vector<std::pair<std::string, std::string>> want;
};

JobInputs OperatorPod() {  // Pod 1 of a 2 x 2 job "train" in namespace "ml", restart 3.
  JobInputs in;
  in.coordinator_address = "train-0.train.ml.svc:8476";
  in.restart_attempt = 3;
  in.agent_socket = "/var/run/cohort/agent.sock";
  in.job_name = "train";
  in.namespace_name = "ml";
  in.token_file = "/var/run/cohort/token/token";
  in.heartbeat_timeout = absl::Seconds(10);
  in.rank0_host = "train-0.train.ml.svc";
  in.jax_port = 8477;
  in.master_port = 8478;
  in.placement = {.pod_index = 1, .local_index = 0, .processes_per_pod = 2, .num_pods = 2};
  return in;
}

class JobVariablesTable : public ::testing::TestWithParam<JobVariablesCase> {};

TEST_P(JobVariablesTable, Row) { EXPECT_EQ(JobVariables(GetParam().in), GetParam().want); }

INSTANTIATE_TEST_SUITE_P(
    Callers, JobVariablesTable,
    ::testing::Values(JobVariablesCase{"OperatorPod_PodIpAndNameComeFromTheFieldRefs",
                                       OperatorPod(),
                                       {{"COHORT_COORDINATOR_ADDRESS", "train-0.train.ml.svc:8476"},
                                        {"COHORT_RESTART_ATTEMPT", "3"},
                                        {"COHORT_AGENT_SOCKET", "/var/run/cohort/agent.sock"},
                                        {"COHORT_JOB_NAME", "train"},
                                        {"COHORT_NAMESPACE", "ml"},
                                        {"COHORT_TOKEN_FILE", "/var/run/cohort/token/token"},
                                        {"COHORT_HEARTBEAT_TIMEOUT", "10s"},
                                        {"JAX_COORDINATOR_ADDRESS", "train-0.train.ml.svc:8477"},
                                        {"JAX_COORDINATOR_BIND_ADDRESS", "127.0.0.1:0"},
                                        {"MASTER_ADDR", "train-0.train.ml.svc"},
                                        {"MASTER_PORT", "8478"}}},
                      JobVariablesCase{"OperatorTorchrunPod_PetVariablesForTorchrunsFlags",
                                       [] {
                                         JobInputs in = OperatorPod();
                                         in.torchrun = true;
                                         in.heartbeat_timeout.reset();
                                         in.jax_port = 0;
                                         return in;
                                       }(),
                                       {{"COHORT_COORDINATOR_ADDRESS", "train-0.train.ml.svc:8476"},
                                        {"COHORT_RESTART_ATTEMPT", "3"},
                                        {"COHORT_AGENT_SOCKET", "/var/run/cohort/agent.sock"},
                                        {"COHORT_JOB_NAME", "train"},
                                        {"COHORT_NAMESPACE", "ml"},
                                        {"COHORT_TOKEN_FILE", "/var/run/cohort/token/token"},
                                        {"MASTER_ADDR", "train-0.train.ml.svc"},
                                        {"MASTER_PORT", "8478"},
                                        {"PET_NNODES", "2"},
                                        {"PET_NPROC_PER_NODE", "2"},
                                        {"PET_NODE_RANK", "1"},
                                        {"PET_MASTER_ADDR", "train-0.train.ml.svc"},
                                        {"PET_MASTER_PORT", "8478"}}},
                      JobVariablesCase{"CohortRun_EveryTimeoutAndTheLoopbackAddresses",
                                       [] {
                                         JobInputs in;
                                         in.coordinator_address = "127.0.0.1:4000";
                                         in.job_name = "local";
                                         in.namespace_name = "local";
                                         in.pod_ip = "127.0.0.1";
                                         in.token_file = "/tmp/w/token";
                                         in.heartbeat_timeout = absl::Milliseconds(1500);
                                         in.initialization_timeout = absl::Minutes(5);
                                         in.shutdown_timeout = absl::Seconds(30);
                                         in.rank0_host = "127.0.0.1";
                                         in.jax_port = 4001;
                                         in.master_port = 4002;
                                         return in;
                                       }(),
                                       {{"COHORT_COORDINATOR_ADDRESS", "127.0.0.1:4000"},
                                        {"COHORT_RESTART_ATTEMPT", "0"},
                                        {"COHORT_JOB_NAME", "local"},
                                        {"COHORT_NAMESPACE", "local"},
                                        {"COHORT_TOKEN_FILE", "/tmp/w/token"},
                                        {"COHORT_POD_IP", "127.0.0.1"},
                                        {"COHORT_HEARTBEAT_TIMEOUT", "1.5s"},
                                        {"COHORT_INITIALIZATION_TIMEOUT", "5m"},
                                        {"COHORT_SHUTDOWN_TIMEOUT", "30s"},
                                        {"JAX_COORDINATOR_ADDRESS", "127.0.0.1:4001"},
                                        {"JAX_COORDINATOR_BIND_ADDRESS", "127.0.0.1:0"},
                                        {"MASTER_ADDR", "127.0.0.1"},
                                        {"MASTER_PORT", "4002"}}},
                      JobVariablesCase{"NothingButTheCoordinator_NoEmptyVariable",
                                       [] {
                                         JobInputs in;
                                         in.coordinator_address = "h:1";
                                         in.pod_name = "p-0";
                                         in.jax_port = 2;  // No rank 0 host: nothing to dial.
                                         return in;
                                       }(),
                                       {{"COHORT_COORDINATOR_ADDRESS", "h:1"},
                                        {"COHORT_RESTART_ATTEMPT", "0"},
                                        {"COHORT_POD_NAME", "p-0"}}}),
    [](const ::testing::TestParamInfo<JobVariablesCase>& info) { return info.param.name; });

// Every variable of the contract (a job's and a process's) is in docs/operator.md's table.
TEST(JobVariables, EveryNameIsInTheOperatorDocsTable) {
  std::ifstream in(std::string(COHORT_SOURCE_DIR) + "/docs/operator.md");
  ASSERT_TRUE(in) << "docs/operator.md not found";
  // The first cell of each row of the doc's tables.
  std::string names;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `", 0) == 0) names += line.substr(0, line.find(" |", 1));
  }
  JobInputs all = OperatorPod();
  all.torchrun = true;
  all.pod_ip = "ip";
  all.pod_name = "name";
  all.initialization_timeout = all.shutdown_timeout = absl::Seconds(1);
  std::vector<std::pair<std::string, std::string>> vars = JobVariables(all);
  for (auto& v : ProcessVariables(all.placement, /*gpus=*/true)) vars.push_back(v);
  EXPECT_EQ(vars.size(), 33u) << "a variable was added or dropped: update this and the docs";
  for (const auto& [name, value] : vars) {
    EXPECT_NE(names.find(absl::StrCat("`", name, "`")), std::string::npos)
        << name << " has no row in docs/operator.md's table of the environment contract";
  }
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
