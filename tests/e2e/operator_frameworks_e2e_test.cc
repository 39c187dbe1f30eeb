// End to end, the operator: JAX, PyTorch and torchrun programs, the examples, several processes per
// pod. The fixture and the shared helpers: operator_e2e.h.
#include "tests/e2e/operator_e2e.h"

namespace cohort::testing {
namespace {

std::string RecordYaml(const std::string& path) {
  return absl::StrCat("            - name: COHORT_TEST_RECORD\n              value: ", path, "\n");
}

std::string ReadRecord(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// An unmodified JAX program (tests/frameworks/jax_program.py) whose processes register with rank
// 0's sidecar, not with the service JAX's process 0 starts: the sidecar's metrics show both tasks.

TEST_F(OperatorE2E, JaxProgram_TwoRanksSucceedThroughRankZerosSidecar) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          PythonJobYaml("e2e-jax", venv, "tests/frameworks/jax_program.py", "k8s",
                                        "            - name: COHORT_TEST_SIDECAR_METRICS\n"
                                        "              value: pod\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-jax", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(
        TrainerLog(*cluster_, "e2e-jax", rank),
        HasSubstr(absl::StrCat("JAX process ", rank,
                               " of 2: kv, barrier, allgather, broadcast and live nodes ok")));
  }
  std::string log0 = TrainerLog(*cluster_, "e2e-jax", 0);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(log0,
                HasSubstr(absl::StrCat("METRIC cohort_task_state{rank=\"", rank,
                                       "\",state=\"shut_down\",protocol=\"xla_coordination\"} 1")));
  }
}

TEST_F(OperatorE2E, JaxProgram_RankKilled_TheOtherIsToldAndTheGangRestarts) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-jax-kill", venv,
                                                   "tests/frameworks/jax_program.py", "k8s",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n"))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-kill", 0, "JAX process 0 ready", absl::Minutes(2)), "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-kill", 1, "JAX process 1 ready", absl::Minutes(1)), "");
  pid_t pid = LocalControlPlane::WaitForProcess(
      "jax_program.py",
      {"COHORT_JOB_NAME=e2e-jax-kill", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's JAX process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  absl::Time killed = absl::Now();
  std::string told =
      WaitForLog(*cluster_, "e2e-jax-kill", 0,
                 "Terminating process because the JAX distributed service detected fatal errors",
                 absl::Seconds(10));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2));
  EXPECT_THAT(told, HasSubstr("rank 1 (JAX process at "));
  // Either path names the death: the PollForError stream of the killed process closing, or
  // cohort-launch reporting its pod's processes ended (whichever reaches the service first).
  EXPECT_THAT(told, AnyOf(HasSubstr("its JAX process died or was killed"),
                          HasSubstr("killed by signal 9")));

  json job = cluster_->WaitForJob("default", "e2e-jax-kill", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax-kill");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-jax-kill");
  // In place: the new JAX processes initialized again against rank 0's JAX port, which the
  // attempt's fresh coordination service serves.
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-jax-kill");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  EXPECT_THAT(TrainerLog(*cluster_, "e2e-jax-kill", 0),
              HasSubstr("JAX process 0 restart attempt 1"));
}

// `kubectl drain`: the evicted pod's JAX process gets SIGTERM; JAX's handler sets the notice key
// in Cohort's store; both processes agree on a step, save and exit; the gang restarts as a
// preemption.

TEST_F(OperatorE2E, JaxProgram_PodEvicted_BothSyncAtOneStepAndTheGangRestartsAsAPreemption) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  const std::string record = absl::StrCat(cluster_->dir(), "/e2e-jax-evict.record");
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-jax-evict", venv,
                                                   "tests/frameworks/jax_program.py", "k8s",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n" +
                                                       RecordYaml(record)))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-evict", 0, "JAX process 0 ready", absl::Minutes(2)), "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-jax-evict", 1, "JAX process 1 ready", absl::Minutes(1)), "");
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-jax-evict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob("default", "e2e-jax-evict", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jax-evict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1) << Events(*cluster_, "e2e-jax-evict");
  EXPECT_EQ(StatusInt(job, "restarts"), 0)
      << Events(*cluster_, "e2e-jax-evict") << TrainerLog(*cluster_, "e2e-jax-evict", 0)
      << PodTrainerLog(*cluster_, "e2e-jax-evict-1-r1");
  const std::string recorded = ReadRecord(record);
  auto sync_step = [&](int rank) {
    size_t at =
        recorded.find(absl::StrCat("JAX process ", rank, " preemption sync point at step "));
    if (at == std::string::npos) return std::string("none");
    at = recorded.find("at step ", at);
    return recorded.substr(at, recorded.find(';', at) - at);
  };
  EXPECT_NE(sync_step(0), "none") << recorded;
  EXPECT_EQ(sync_step(0), sync_step(1)) << recorded;
  EXPECT_THAT(recorded, HasSubstr("JAX process 1 restart attempt 1"));
}

// A documented example (manifests/examples/), applied as a user would, except that its command
// (pip install, then python on the program) becomes the test environment's python on the program:
// pods here have no image and no network.

std::string ExampleYaml(const std::string& file, const std::string& pip_install,
                        const std::string& venv) {
  std::ifstream manifest(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/", file));
  std::string yaml((std::istreambuf_iterator<char>(manifest)), std::istreambuf_iterator<char>());
  const std::string command =
      absl::StrCat("[\"sh\", \"-c\", \"", pip_install, " && exec python /program/train.py\"]");
  EXPECT_THAT(yaml, HasSubstr(command));
  return absl::StrReplaceAll(
      yaml, {{command, absl::StrCat("[\"", venv, "/bin/python\", \"/program/train.py\"]")}});
}

TEST_F(OperatorE2E, JaxExample_RunsToTheEnd) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX example";
  auto op = Operator();
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"}, ExampleYaml("jax-job.yaml", "pip install --quiet jax==0.10.2", venv))
          .exit_code,
      0);
  json job = cluster_->WaitForJob("default", "jax-example", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "jax-example");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "jax-example", rank),
                HasSubstr(absl::StrCat("process ", rank, ": done")));
  }
}

TEST_F(OperatorE2E, PytorchExample_RunsToTheEnd) {
  std::string venv = TorchEnvironment();
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch example";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, ExampleYaml("pytorch-job.yaml",
                                                 "pip install --quiet torch==2.15.0", venv))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "pytorch-example", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "pytorch-example");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "pytorch-example", rank),
                HasSubstr(absl::StrCat("rank ", rank, ": done")));
  }
}

// The cohort package's example (manifests/examples/pytorch-preemptible.yaml), applied as a user
// would, except for its command (the test environment's python, with torch and the wheel) and its
// checkpoint volume (a directory that outlives the pods, as the manifest says to use): pod 1 is
// evicted mid-run; every rank checkpoints at one step and exits 76; the gang restarts as a
// preemption and every rank resumes from that step.

TEST_F(OperatorE2E, PythonPreemptibleExample_Evicted_CheckpointsAtOneStepAndResumes) {
  std::string venv = CohortPythonEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the cohort package's example";
  auto op = Operator();
  const std::string program =
      absl::StrCat(COHORT_SOURCE_DIR, "/examples/python/pytorch_preemptible.py");
  // The ConfigMaps the manifest's header says to create (the wheel's is left empty: the test
  // environment has it installed).
  for (const auto& [name, files] :
       {std::pair<std::string, std::vector<std::string>>{"pytorch-preemptible-program", {program}},
        {"cohort-wheel", {}}}) {
    LocalControlPlane::Result made = cluster_->CreateConfigMap(name, files);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  const std::string checkpoints = absl::StrCat(cluster_->dir(), "/preemptible-checkpoints");
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/pytorch-preemptible.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string command =
      R"(["sh", "-c", "pip install --quiet torch==2.15.0 /wheels/cohort-*.whl && exec python /program/pytorch_preemptible.py"])";
  const std::string volume = "          emptyDir: {}";
  ASSERT_THAT(yaml, HasSubstr(command));
  ASSERT_THAT(yaml, HasSubstr(volume));
  yaml = absl::StrReplaceAll(
      yaml,
      {{command,
        absl::StrCat(R"([")", venv,
                     R"(/bin/python", "/program/pytorch_preemptible.py", "--steps", "1000"])")},
       {volume, absl::StrCat("          hostPath:\n            path: ", checkpoints)}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  ASSERT_NE(WaitForLog(*cluster_, "pytorch-preemptible", 0, "rank 0/2 step 50 ", absl::Minutes(3)),
            "");
  // The steps the program reports (cohort.report_progress) are on rank 0's sidecar's /metrics:
  // its own (cohort_trainer_step) and every rank's (cohort_task_step).
  LocalControlPlane::Result pod =
      cluster_->Kubectl({"get", "pod", "pytorch-preemptible-0", "-o", "json"});
  ASSERT_EQ(pod.exit_code, 0) << pod.output;
  const json pod0 = json::parse(pod.output);
  const int metrics_port = MetricsPort(pod0);
  ASSERT_GT(metrics_port, 0) << pod.output;
  httplib::Client sidecar(pod0["status"].value("podIP", ""), metrics_port);
  auto step_of = [](const std::string& metrics, const std::string& name, const std::string& label) {
    double best = -1;
    for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
      if (!absl::StartsWith(line, name) || line.size() <= name.size() ||
          (line[name.size()] != ' ' && line[name.size()] != '{') ||
          !absl::StrContains(line, label)) {
        continue;  // another series (cohort_trainer_step_seconds_...), or another rank's
      }
      double v;
      if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) best = std::max(best, v);
    }
    return best;
  };
  std::string metrics;
  for (absl::Time deadline = absl::Now() + absl::Seconds(30); absl::Now() < deadline;) {
    auto res = sidecar.Get("/metrics");
    metrics = res ? res->body : "";
    if (step_of(metrics, "cohort_trainer_step", "") >= 50 &&
        step_of(metrics, "cohort_task_step", "rank=\"1\"") >= 50) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_GE(step_of(metrics, "cohort_trainer_step", ""), 50) << metrics;
  EXPECT_GE(step_of(metrics, "cohort_task_step", "rank=\"1\""), 50) << metrics;
  LocalControlPlane::Result evicted = cluster_->Evict("default", "pytorch-preemptible-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;

  json job = cluster_->WaitForJob("default", "pytorch-preemptible", Finished, absl::Minutes(5));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "pytorch-preemptible");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1) << Events(*cluster_, "pytorch-preemptible");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(checkpoints, "/checkpoint.pt")));
  std::string resumed_at[2];
  for (int rank = 0; rank < 2; ++rank) {
    // Attempt 1's: pod 0 restarted its process in place, the evicted pod 1 was replaced alone.
    std::string log = rank == 0 ? TrainerLog(*cluster_, "pytorch-preemptible", 0)
                                : PodTrainerLog(*cluster_, "pytorch-preemptible-1-r1");
    const std::string prefix = absl::StrCat("rank ", rank, ": resumed from step ");
    size_t at = log.find(prefix);
    ASSERT_NE(at, std::string::npos) << log;
    at += prefix.size();
    resumed_at[rank] = log.substr(at, log.find(' ', at) - at);
    EXPECT_THAT(log, HasSubstr("(restart attempt 1)"));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("rank ", rank, ": done at step 999")));
  }
  EXPECT_EQ(resumed_at[0], resumed_at[1]);
}

// The cohort package's JAX example (manifests/examples/jax-zero-arg.yaml) through the operator:
// `import cohort.jax`, then jax.distributed.initialize() with no arguments in each pod.

TEST_F(OperatorE2E, JaxZeroArgExample_InitializesWithoutArgumentsInEveryPod) {
  std::string venv = CohortJaxEnvironment("0.10.2");
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no jax for the cohort package's JAX example";
  auto op = Operator();
  const std::string program = absl::StrCat(COHORT_SOURCE_DIR, "/examples/python/jax_zero_arg.py");
  for (const auto& [name, files] :
       {std::pair<std::string, std::vector<std::string>>{"jax-zero-arg-program", {program}},
        {"cohort-wheel", {}}}) {
    LocalControlPlane::Result made = cluster_->CreateConfigMap(name, files);
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  std::ifstream in(absl::StrCat(COHORT_SOURCE_DIR, "/manifests/examples/jax-zero-arg.yaml"));
  std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string command =
      R"(["sh", "-c", "pip install --quiet jax==0.10.2 /wheels/cohort-*.whl && exec python /program/jax_zero_arg.py"])";
  ASSERT_THAT(yaml, HasSubstr(command));
  yaml = absl::StrReplaceAll(
      yaml,
      {{command, absl::StrCat(R"([")", venv, R"(/bin/python", "/program/jax_zero_arg.py"])")}});
  ASSERT_EQ(cluster_->Kubectl({"apply"}, yaml).exit_code, 0);
  json job = cluster_->WaitForJob("default", "jax-zero-arg", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "jax-zero-arg");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "jax-zero-arg", rank),
                HasSubstr(absl::StrCat("process ", rank, ": every process's index: [0, 1]")));
  }
}

// An unmodified PyTorch DDP program: init_process_group("gloo") with no arguments.

TEST_F(OperatorE2E, TorchDdpProgram_TrainsAndSucceeds_AndAKilledRankRestartsTheGang) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torch", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "",
                                                   "            - name: COHORT_TEST_HOLD\n"
                                                   "              value: \"1\"\n"))
                .exit_code,
            0);
  ASSERT_NE(WaitForLog(*cluster_, "e2e-torch", 0, "torch rank 0 of 2 ready (attempt 0)",
                       absl::Minutes(2)),
            "");
  ASSERT_NE(WaitForLog(*cluster_, "e2e-torch", 1, "torch rank 1 of 2 ready (attempt 0)",
                       absl::Minutes(1)),
            "");
  pid_t pid = LocalControlPlane::WaitForProcess(
      "torch_ddp_program.py",
      {"COHORT_JOB_NAME=e2e-torch", "COHORT_PROCESS_ID=1", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 1's torch process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  json job = cluster_->WaitForJob("default", "e2e-torch", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torch");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-torch");
  // In place: rank 0's new process brought its TCPStore back on MASTER_PORT in the same pod.
  EXPECT_EQ(job["status"].value("lastRestartStrategy", ""), "InPlace")
      << Events(*cluster_, "e2e-torch");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torch", rank),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// The line of `program` (under the source tree) holding `text`, as "<file name>:<line>".

TEST_F(OperatorE2E, TwoPodsOfTwoProcesses_RanksZeroToThreeWithLocalIndicesSucceed) {
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-pp", 2, "k8s", "  processesPerPod: 2\n")).exit_code,
      0);
  json job = cluster_->WaitForJob("default", "e2e-pp", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-pp");
  EXPECT_EQ(StatusInt(job, "restarts"), 0);
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = TrainerLog(*cluster_, "e2e-pp", rank / 2);
    EXPECT_THAT(log,
                HasSubstr(absl::StrCat("[rank ", rank, "] ENVIRONMENT ok: rank ", rank, " of 4")));
    EXPECT_THAT(log, HasSubstr(absl::StrCat("[rank ", rank, "] RENDEZVOUS rank=", rank,
                                            " keys=4 count=4 local=", rank % 2, "/2")));
  }
  // kubectl get shows the processes per pod in force, and no spares column for a job without.
  LocalControlPlane::Result got = cluster_->Kubectl({"get", "djob", "e2e-pp"});
  EXPECT_TRUE(std::regex_search(got.output,
                                std::regex(R"(PROCESSES/POD[^\n]*\n\s*e2e-pp\s+\S+\s+\S+\s+2\s)")))
      << got.output;
  EXPECT_THAT(got.output, Not(HasSubstr("SPARES"))) << got.output;
}

TEST_F(OperatorE2E, TwoPodsOfTwo_OneProcessKilled_EveryRankToldAndTheGangRestartsOnce) {
  auto op = Operator();
  ASSERT_EQ(
      cluster_->Kubectl({"apply"}, JobYaml("e2e-ppkill", 2, "k8s-hold", "  processesPerPod: 2\n"))
          .exit_code,
      0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-ppkill", AllReady, kJobTimeout)));
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_NE(WaitForLog(*cluster_, "e2e-ppkill", rank / 2,
                         absl::StrCat("[rank ", rank, "] TRAINING"), kJobTimeout),
              "")
        << "rank " << rank << " never trained";
  }
  // Rank 3 is local process 1 of pod e2e-ppkill-1: one process, not the pod.
  pid_t pid = LocalControlPlane::WaitForProcess(
      "test-trainer",
      {"COHORT_JOB_NAME=e2e-ppkill", "COHORT_PROCESS_ID=3", "COHORT_RESTART_ATTEMPT=0"});
  ASSERT_GT(pid, 0) << "rank 3's trainer process";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  json job = cluster_->WaitForJob("default", "e2e-ppkill", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-ppkill");
  EXPECT_EQ(StatusInt(job, "restarts"), 1) << Events(*cluster_, "e2e-ppkill");
  EXPECT_EQ(StatusInt(job, "preemptions"), 0);
  // The event names the pod, its ranks and, from cohort-launch's last line, the process.
  EXPECT_THAT(Events(*cluster_, "e2e-ppkill"),
              HasSubstr("pod e2e-ppkill-1 (ranks 2-3) exited with code 137"));
  EXPECT_THAT(Events(*cluster_, "e2e-ppkill"),
              HasSubstr("restart attempt 0 ended with rank 3's status (killed by signal 9"));
  // The second attempt's processes logged their own lines; every rank of the first was told.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-ppkill", rank / 2),
                HasSubstr(absl::StrCat("[rank ", rank, "] INITIALIZED rank=", rank, " attempt=1")));
  }
}

TEST_F(OperatorE2E, TwoPodsOfTwo_PodEvicted_AllFourCheckpointAtOneStepAndRestartAsAPreemption) {
  auto op = Operator();
  // The pods' logs start afresh with the restart: the processes also record their lines here.
  const std::string record = absl::StrCat(cluster_->dir(), "/ppevict-record.txt");
  ASSERT_EQ(
      cluster_
          ->Kubectl({"apply"}, JobYaml("e2e-ppevict", 2, "k8s-hold", "  processesPerPod: 2\n") +
                                   "          env:\n" + RecordYaml(record))
          .exit_code,
      0);
  ASSERT_TRUE(AllReady(cluster_->WaitForJob("default", "e2e-ppevict", AllReady, kJobTimeout)));
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_NE(WaitForLog(*cluster_, "e2e-ppevict", rank / 2,
                         absl::StrCat("[rank ", rank, "] TRAINING"), kJobTimeout),
              "");
  }
  LocalControlPlane::Result evicted = cluster_->Evict("default", "e2e-ppevict-1");
  ASSERT_EQ(evicted.exit_code, 0) << evicted.output;
  json job = cluster_->WaitForJob("default", "e2e-ppevict", Finished, kJobTimeout);
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-ppevict");
  EXPECT_EQ(StatusInt(job, "preemptions"), 1) << Events(*cluster_, "e2e-ppevict");
  EXPECT_EQ(StatusInt(job, "restarts"), 0) << Events(*cluster_, "e2e-ppevict") << job.dump(2);
  EXPECT_THAT(Events(*cluster_, "e2e-ppevict"),
              HasSubstr("pod e2e-ppevict-1 (ranks 2-3) was preempted"));
  // Every process of both pods reached the same sync step (the evicted pod's through
  // cohort-launch forwarding the SIGTERM, the other pod's through the job).
  const std::string lines = ReadRecord(record);
  std::set<std::string> steps;
  for (int rank = 0; rank < 4; ++rank) {
    std::string marker = absl::StrCat("[rank ", rank, "] SYNC rank=", rank, " step=");
    size_t at = lines.find(marker);
    ASSERT_NE(at, std::string::npos) << "rank " << rank << " did not sync:\n" << lines;
    steps.insert(lines.substr(at + marker.size(), lines.find('\n', at) - at - marker.size()));
  }
  EXPECT_EQ(steps.size(), 1u) << ::testing::PrintToString(steps);
}

// An unmodified DDP program (gloo) in pods of 2 processes started by cohort-launch: WORLD_SIZE 4,
// each process its RANK and LOCAL_RANK, one TCPStore on rank 0's process.

TEST_F(OperatorE2E, TorchDdpProgram_TwoPodsOfTwoProcesses_Trains) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torchpp", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "", "",
                                                   "  processesPerPod: 2\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-torchpp", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torchpp");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torchpp", rank / 2),
                HasSubstr(absl::StrCat("[rank ", rank, "] torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// The same program with `torchrun train.py` as the command (spec.launcher: Torchrun), as
// Kubeflow Trainer runs it: torchrun starts the pod's 2 processes from the PET_* variables.

TEST_F(OperatorE2E, TorchrunCommand_TwoPodsOfTwoProcesses_Trains) {
  std::string venv = TorchEnvironment();
  if (venv.empty())
    GTEST_SKIP() << "PyPI cannot be reached: no torch for the PyTorch end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"}, PythonJobYaml("e2e-torchrun", venv,
                                                   "tests/frameworks/torch_ddp_program.py", "", "",
                                                   "  processesPerPod: 2\n  launcher: Torchrun\n",
                                                   absl::StrCat(venv, "/bin/torchrun")))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-torchrun", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-torchrun")
                                     << TrainerLog(*cluster_, "e2e-torchrun", 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(TrainerLog(*cluster_, "e2e-torchrun", rank / 2),
                HasSubstr(absl::StrCat("torch rank ", rank,
                                       ": 5 DDP steps, parameters equal on every rank")));
  }
}

// An unmodified JAX program, 2 processes per pod: 4 tasks register with rank 0's JAX port.

TEST_F(OperatorE2E, JaxProgram_TwoPodsOfTwoProcesses_FourTasksRegisterAndFinish) {
  std::string venv = JaxEnvironment("0.10.2");
  if (venv.empty()) GTEST_SKIP() << "PyPI cannot be reached: no jax for the JAX end-to-end test";
  auto op = Operator();
  ASSERT_EQ(cluster_
                ->Kubectl({"apply"},
                          PythonJobYaml("e2e-jaxpp", venv, "tests/frameworks/jax_program.py", "k8s",
                                        "            - name: COHORT_TEST_SIDECAR_METRICS\n"
                                        "              value: pod\n",
                                        "  processesPerPod: 2\n"))
                .exit_code,
            0);
  json job = cluster_->WaitForJob("default", "e2e-jaxpp", Finished, absl::Minutes(3));
  ASSERT_EQ(Phase(job), "Succeeded") << job.dump(2) << Events(*cluster_, "e2e-jaxpp");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(
        TrainerLog(*cluster_, "e2e-jaxpp", rank / 2),
        HasSubstr(absl::StrCat("[rank ", rank, "] JAX process ", rank,
                               " of 4: kv, barrier, allgather, broadcast and live nodes ok")));
  }
  std::string log0 = TrainerLog(*cluster_, "e2e-jaxpp", 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_THAT(log0,
                HasSubstr(absl::StrCat("METRIC cohort_task_state{rank=\"", rank,
                                       "\",state=\"shut_down\",protocol=\"xla_coordination\"} 1")));
  }
}

}  // namespace
}  // namespace cohort::testing
