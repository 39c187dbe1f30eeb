// End to end, the operator: hang detection (docs/faults.md, "Hung ranks"). The fixture and the
// shared helpers: operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

std::string SourceLine(const std::string& program, const std::string& text) {
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/", program));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (absl::StrContains(line, text))
      return absl::StrCat(program.substr(program.rfind('/') + 1), ":", n);
  }
  return "";
}

// The job's Hung condition once it is True (within 3 minutes; else as it is then).

json WaitForHung(LocalControlPlane& cluster, const std::string& job) {
  json seen = cluster.WaitForJob(
      "default", job,
      [](const json& j) { return JobCondition(j, "Hung").value("status", "") == "True"; },
      absl::Minutes(3));
  return JobCondition(seen, "Hung");
}

// Hang detection (docs/faults.md, "Hung ranks") of an unmodified PyTorch program: rank 1 sleeps
// forever at step 20 of 1 s steps while rank 0 waits for it in DDP's all-reduce. Found after the
// automatic timeout (60 s: five 1 s steps are less), named with its line, every rank's stacks
// kept in the pods' cohort-agent directory and in the sidecars' logs, then restarted in place.
// Beside it, no false alarm: a healthy job whose steps take 30 s (each rank asleep in its own code
// between them, the other waiting in the all-reduce) runs 3 minutes without a hang, while the
// hook did report its steps (one test, so that the two share the time).

TEST_F(
    OperatorE2E,
    TorchDdpPrograms_RankSleepsForever_HungNamesItsLine_StacksKept_Restarted_ASlowJobBesideRaisesNothing) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  const std::string program = "tests/frameworks/torch_ddp_program.py";
  const std::string sleep_line = SourceLine(program, "time.sleep(1e9)");
  ASSERT_NE(sleep_line, "");
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-slow", venv, program, "",
                                                   "            - name: COHORT_TEST_STEP_S\n"
                                                   "              value: \"30\"\n"
                                                   "            - name: COHORT_TEST_STEPS\n"
                                                   "              value: \"6\"\n"))
                .exit_code,
            0);
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-hang", venv, program, "",
                                                   "            - name: COHORT_TEST_HANG_AT\n"
                                                   "              value: \"20\"\n"))
                .exit_code,
            0);
  ASSERT_NE(
      WaitForLog(*cluster_, "e2e-hang", 1, "torch rank 1 of 2 ready (attempt 0)", absl::Minutes(2)),
      "");
  const absl::Time ready = absl::Now();
  const json condition = WaitForHung(*cluster_, "e2e-hang");
  ASSERT_EQ(condition.value("status", ""), "True") << Events(*cluster_, "e2e-hang");
  // The sleep begins ~20 s after the ranks are ready: named within 90 s of it.
  EXPECT_LT(absl::Now() - ready, absl::Seconds(20 + 90));
  const std::string message = condition.value("message", "");
  EXPECT_THAT(message, HasSubstr(absl::StrCat("rank 1 (pod e2e-hang-1, local 0): ", sleep_line)));
  EXPECT_THAT(message, HasSubstr("time.sleep(1e9)"));
  EXPECT_THAT(message, HasSubstr("rank 0: "));
  EXPECT_THAT(EventsOnceThereIs(*cluster_, "e2e-hang", "HangDetected"), HasSubstr(sleep_line));

  json job = cluster_->WaitForJob("default", "e2e-hang", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-hang");
  EXPECT_EQ(JobCondition(job, "Hung").value("status", ""), "False") << job.dump(2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-hang", rank),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
  // The evidence outlives the restart: every thread's stacks, the sleeper's at its line, rank
  // 0's inside the backward pass that waits for the all-reduce; and the sidecars' logs.
  const std::string stacks1 =
      cluster_->ReadPodFile("e2e-hang-1", "volumes/cohort-agent/dumps/attempt-0/rank-1/stacks.txt");
  EXPECT_THAT(stacks1, HasSubstr("time.sleep(1e9)"));
  const std::string stacks0 =
      cluster_->ReadPodFile("e2e-hang-0", "volumes/cohort-agent/dumps/attempt-0/rank-0/stacks.txt");
  EXPECT_THAT(stacks0, HasSubstr("loss.backward()"));
  EXPECT_THAT(cluster_->ReadPodFile("e2e-hang-1", "cohort-sidecar.log"),
              HasSubstr("time.sleep(1e9)"));

  json slow = cluster_->WaitForJob("default", "e2e-slow", Finished, absl::Minutes(4));
  ASSERT_EQ(Phase(slow), "Succeeded") << slow.dump(2) << Events(*cluster_, "e2e-slow");
  EXPECT_EQ(StatusInt(slow, "restarts"), 0) << Events(*cluster_, "e2e-slow");
  EXPECT_EQ(StatusInt(slow, "lastHangId"), 0) << slow.dump(2);
  EXPECT_NE(JobCondition(slow, "Hung").value("status", ""), "True") << slow.dump(2);
  EXPECT_THAT(Events(*cluster_, "e2e-slow"), Not(HasSubstr("HangDetected")));
  EXPECT_THAT(cluster_->ReadPodFile("e2e-slow-0", "cohort-sidecar.log"),
              Not(HasSubstr("attempt hub: hang")));
  // The detector was told: the hook counted every step.
  const json status = json::parse(
      cluster_->ReadPodFile("e2e-slow-1", "volumes/cohort-agent/probe/rank-1/status.json"), nullptr,
      /*allow_exceptions=*/false);
  EXPECT_EQ(status.is_object() ? status.value("steps", -1) : -1, 6) << status.dump();
}

// jax#38503 on CPU JAX: one process blocks while the other waits for it in a cross-process
// collective, which JAX never gives up on. Hang detection names the blocked process and its line
// and the job restarts in place.

TEST_F(OperatorE2E,
       JaxProgram_OneProcessBlocks_TheOtherWaitsInACollective_HungNamesIt_RestartedAndSucceeds) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  const std::string program = "tests/frameworks/jax_hang_program.py";
  const std::string sleep_line = SourceLine(program, "time.sleep(1e9)");
  ASSERT_NE(sleep_line, "");
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, PythonJobYaml("e2e-jaxhang", venv, program, "", "")).exit_code,
      0);
  ASSERT_NE(
      WaitForLog(*cluster_, "e2e-jaxhang", 1, "JAX process 1 ready (attempt 0)", absl::Minutes(2)),
      "");
  const absl::Time ready = absl::Now();
  const json condition = WaitForHung(*cluster_, "e2e-jaxhang");
  ASSERT_EQ(condition.value("status", ""), "True") << Events(*cluster_, "e2e-jaxhang");
  // The block begins ~5 s after the processes are ready: named within 90 s of it.
  EXPECT_LT(absl::Now() - ready, absl::Seconds(5 + 90));
  EXPECT_THAT(condition.value("message", ""),
              HasSubstr(absl::StrCat("rank 1 (pod e2e-jaxhang-1, local 0): ", sleep_line)));
  json job = cluster_->WaitForJob("default", "e2e-jaxhang", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jaxhang");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-jaxhang");
  EXPECT_THAT(cluster_->ReadPodFile("e2e-jaxhang-1",
                                    "volumes/cohort-agent/dumps/attempt-0/rank-1/stacks.txt"),
              HasSubstr("time.sleep(1e9)"));
}

// The GPU node's shape: 2 pods x 2 processes, cohort-launch starting the processes of each pod,
// one sidecar per pod serving both.

}  // namespace
}  // namespace cohort::testing
