// A trainer for the multi-process tests: each --scenario exercises libdist the way a real
// program would and prints lines the tests look for.

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dist/distributed.h"
#include "tests/integration/collective_scenarios.h"

namespace {

// Prints `line`; with COHORT_TEST_RECORD set, also appends it (prefixed with the rank) to that
// file, which outlives the pod's log across restart attempts.
void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (const char* record = std::getenv("COHORT_TEST_RECORD")) {
    const char* rank = std::getenv("COHORT_PROCESS_ID");
    std::string text = absl::StrCat("[rank ", rank != nullptr ? rank : "?", "] ", line, "\n");
    int fd = open(record, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      (void)!write(fd, text.data(), text.size());  // One write: lines of processes never mix.
      close(fd);
    }
  }
}

int Check(const absl::Status& s, const char* what) {
  if (s.ok()) return 0;
  Say(absl::StrCat("ERROR ", what, ": ", absl::StatusCodeToString(s.code()), ": ", s.message()));
  // Aborted: the job failed elsewhere (e.g. during Shutdown(), where no failure handler runs);
  // Unavailable: the service or the sidecar is gone. This process only follows.
  return absl::IsAborted(s) || absl::IsUnavailable(s) ? dist::kPeerFailureExitCode : 3;
}

// Initialize, pass a barrier, exchange keys, pass a reusable barrier several times, count, list,
// shut down.
int Rendezvous() {
  const int rank = dist::ProcessIndex(), n = dist::ProcessCount();
  // First a barrier alone: recovery-bench times a restart until every rank passed it.
  if (int rc = Check(dist::Barrier("start", absl::Seconds(60)), "barrier")) return rc;
  Say(absl::StrCat("BARRIER rank=", rank));
  if (int rc = Check(dist::KeyValueSet(absl::StrCat("rdv/", rank), absl::StrCat("v", rank)), "set"))
    return rc;
  for (int peer = 0; peer < n; ++peer) {
    absl::StatusOr<std::string> v =
        dist::KeyValueGet(absl::StrCat("rdv/", peer), absl::Seconds(30));
    if (int rc = Check(v.status(), "get")) return rc;
    if (*v != absl::StrCat("v", peer)) {
      Say(absl::StrCat("ERROR wrong value for rdv/", peer, ": ", *v));
      return 3;
    }
  }
  for (int round = 0; round < 3; ++round) {
    if (int rc = Check(dist::Barrier("rounds", absl::Seconds(30)), "barrier")) return rc;
  }
  if (int rc = Check(dist::KeyValueIncrement("count", 1).status(), "increment")) return rc;
  if (int rc = Check(dist::Barrier("counted", absl::Seconds(30)), "barrier")) return rc;
  absl::StatusOr<std::string> count = dist::KeyValueTryGet("count");
  if (int rc = Check(count.status(), "try_get")) return rc;
  auto dir = dist::KeyValueDir("rdv");
  if (int rc = Check(dir.status(), "dir")) return rc;
  Say(absl::StrCat("RENDEZVOUS rank=", rank, " keys=", dir->size(), " count=", *count,
                   " local=", dist::LocalProcessIndex(), "/", dist::LocalProcessCount()));
  return Check(dist::Shutdown(), "shutdown");
}

// The program handles peer failures itself (wait-with-handler): a wait that a peer's failure
// ended leaves the handler time to run, since the call's error and the failure event come down
// two streams in no fixed order.
bool g_handles_failures = false;

// Every rank reports training step 7; then every rank but the last waits in a barrier that
// cannot pass, because the last rank waits for a key nobody sets. Only a failure (injected by the
// test) ends the wait.
int Wait() {
  if (int rc = Check(dist::ReportProgress(7), "report progress")) return rc;
  Say("WAITING");
  absl::Status s;
  if (dist::ProcessIndex() == dist::ProcessCount() - 1) {
    s = dist::KeyValueGet("never-set", absl::Minutes(10)).status();
  } else {
    s = dist::Barrier("hang", absl::Minutes(10));
  }
  Say(absl::StrCat("WAIT_RETURNED ", s.ToString()));
  if (g_handles_failures)
    std::this_thread::sleep_for(std::chrono::seconds(10));  // The handler exits.
  return 4;
}

// Train until a preemption notice; report the agreed step. A step takes TEST_TRAINER_STEP_MS
// (default 5 ms): hundreds of ranks on one small machine need longer steps, or their wake-ups
// alone keep its CPUs busy.
int Preempt() {
  Say("TRAINING");
  int step_ms = 5;
  if (const char* v = std::getenv("TEST_TRAINER_STEP_MS");
      v != nullptr && !absl::SimpleAtoi(v, &step_ms)) {
    step_ms = 5;
  }
  for (int64_t step = 0; step < 100000; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    absl::StatusOr<bool> reached = dist::ReachedPreemptionSyncPoint(step);
    if (int rc = Check(reached.status(), "sync point")) return rc;
    if (*reached) {
      Say(absl::StrCat("SYNC rank=", dist::ProcessIndex(), " step=", step));
      return Check(dist::Shutdown(), "shutdown");
    }
  }
  Say("ERROR no sync point");
  return 3;
}

// What the chaos test runs: steps of key-value traffic, a barrier and a preemption check, then
// shutdown, so that a kill can land in any of them. A preemption notice ends it at the agreed
// step ("CHECKPOINT"), as a real program would save a checkpoint there.
int Chaos(int steps) {
  const int rank = dist::ProcessIndex(), n = dist::ProcessCount();
  for (int step = 0; step < steps; ++step) {
    if (int rc = Check(dist::KeyValueSet(absl::StrCat("chaos/", step, "/", rank), "x"), "set"))
      return rc;
    absl::StatusOr<std::string> peer =
        dist::KeyValueGet(absl::StrCat("chaos/", step, "/", (rank + 1) % n), absl::Seconds(60));
    if (int rc = Check(peer.status(), "get")) return rc;
    if (int rc = Check(dist::Barrier("chaos-step", absl::Seconds(60)), "barrier")) return rc;
    absl::StatusOr<bool> reached = dist::ReachedPreemptionSyncPoint(step);
    if (int rc = Check(reached.status(), "sync point")) return rc;
    if (*reached) {
      Say(absl::StrCat("CHECKPOINT rank=", rank, " step=", step));
      return Check(dist::Shutdown(), "shutdown");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Say(absl::StrCat("DONE rank=", rank));
  return Check(dist::Shutdown(), "shutdown");
}

// What the operator injects (the environment contract of docs/operator.md), checked before
// libdist reads it: the JAX_* names agree with the COHORT_* ones and the coordinator is rank 0's
// DNS name.
int CheckPodEnvironment() {
  auto get = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? "" : v;
  };
  std::string job = get("COHORT_JOB_NAME"), ns = get("COHORT_NAMESPACE");
  std::string coordinator = get("COHORT_COORDINATOR_ADDRESS");
  std::string expected_prefix = absl::StrCat(job, "-0.", job, ".", ns, ".svc:");
  std::vector<std::string> problems;
  if (job.empty() || ns.empty()) problems.push_back("COHORT_JOB_NAME or COHORT_NAMESPACE unset");
  if (coordinator.rfind(expected_prefix, 0) != 0) {
    problems.push_back(absl::StrCat("COHORT_COORDINATOR_ADDRESS=", coordinator, " is not ",
                                    expected_prefix, "PORT"));
  }
  // JAX's own service on rank 0 listens on the port after ours.
  std::string port = coordinator.substr(coordinator.rfind(':') + 1);
  int jax_port = 0;
  if (!absl::SimpleAtoi(port, &jax_port)) jax_port = -1;
  std::string jax_coordinator = absl::StrCat(expected_prefix, jax_port + 1);
  if (get("JAX_COORDINATOR_ADDRESS") != jax_coordinator) {
    problems.push_back(absl::StrCat("JAX_COORDINATOR_ADDRESS=", get("JAX_COORDINATOR_ADDRESS"),
                                    " is not ", jax_coordinator));
  }
  for (auto [jax, cohort] : {std::pair{"JAX_NUM_PROCESSES", "COHORT_NUM_PROCESSES"},
                             std::pair{"JAX_PROCESS_ID", "COHORT_PROCESS_ID"}}) {
    if (get(jax) != get(cohort) || get(jax).empty()) {
      problems.push_back(absl::StrCat(jax, "=", get(jax), " but ", cohort, "=", get(cohort)));
    }
  }
  for (const char* name : {"COHORT_AGENT_SOCKET", "COHORT_TOKEN_FILE", "COHORT_RESTART_ATTEMPT"}) {
    if (get(name).empty()) problems.push_back(absl::StrCat(name, " unset"));
  }
  if (!problems.empty()) {
    Say(absl::StrCat("ERROR environment: ", absl::StrJoin(problems, "; ")));
    return 3;
  }
  Say(absl::StrCat("ENVIRONMENT ok: rank ", get("COHORT_PROCESS_ID"), " of ",
                   get("COHORT_NUM_PROCESSES"), ", coordinator ", coordinator, ", restart attempt ",
                   get("COHORT_RESTART_ATTEMPT")));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "rendezvous";
  dist::Options options;
  if (scenario == "wait-with-handler") {
    // The program handles peer failures itself instead of the default exit(75).
    options.on_peer_failure = [](const dist::PeerFailure& f) {
      Say(absl::StrCat("HANDLED failed=", f.process_id,
                       " cause=", dist::FailureCauseName(f.cause)));
      std::_Exit(9);
    };
    g_handles_failures = true;
    scenario = "wait";
  }
  // A pod of a DistributedJob: "k8s" checks the environment, then rendezvous; "k8s-hold" keeps
  // restart attempt 0 training until a preemption (exit kPreemptedExitCode after the sync point)
  // or a kill, so a test can fail or evict a rank, and lets later attempts finish;
  // "k8s-rank1-exits-N": in restart attempt 0 rank 1 exits N once every rank joined (the others
  // follow with 75), later attempts finish; "k8s-rank1-oom": the same, but rank 1 allocates
  // memory until something kills it (a container memory limit).
  const bool collectives = cohort::testing::IsCollectiveScenario(scenario, &options);
  int rank1_exit = 0;
  const bool rank1_exits = absl::StartsWith(scenario, "k8s-rank1-exits-") &&
                           absl::SimpleAtoi(scenario.substr(16), &rank1_exit);
  const bool rank1_oom = scenario == "k8s-rank1-oom";
  bool kubernetes = scenario == "k8s" || scenario == "k8s-hold" || rank1_exits || rank1_oom;
  if (kubernetes) {
    if (int rc = CheckPodEnvironment()) return rc;
    const char* attempt = std::getenv("COHORT_RESTART_ATTEMPT");
    const bool first = attempt != nullptr && std::string(attempt) == "0";
    scenario = scenario == "k8s-hold" && first ? "preempt"
               : rank1_exits && first          ? "rank1-exits"
               : rank1_oom && first            ? "rank1-oom"
                                               : "rendezvous";
  }
  absl::Status init = dist::Initialize(options);
  if (!init.ok()) {
    Say(absl::StrCat("INIT_FAILED ", absl::StatusCodeToString(init.code()), ": ", init.message()));
    return Check(init, "initialize") == dist::kPeerFailureExitCode ? dist::kPeerFailureExitCode : 3;
  }
  Say(absl::StrCat("INITIALIZED rank=", dist::ProcessIndex(), " attempt=", dist::RestartAttempt()));
  if (collectives) return cohort::testing::RunCollectiveScenario(scenario);
  if (scenario == "rendezvous") return Rendezvous();
  if (scenario == "wait") return Wait();
  if (scenario == "preempt") {
    int rc = Preempt();
    return kubernetes && rc == 0 ? dist::kPreemptedExitCode : rc;
  }
  if (scenario == "init-only") return Check(dist::Shutdown(), "shutdown");
  if (scenario == "chaos") {
    int steps = 60;
    if (argc > 2 && !absl::SimpleAtoi(argv[2], &steps)) steps = 60;
    return Chaos(steps);
  }
  if (scenario == "rank1-exits-7" || scenario == "rank1-exits") {
    // Without shutdown: a crash as far as the job knows.
    if (dist::ProcessIndex() == 1) return scenario == "rank1-exits" ? rank1_exit : 7;
    return Wait();
  }
  if (scenario == "rank1-oom") {
    if (dist::ProcessIndex() != 1) return Wait();
    Say("ALLOCATING");
    // 4 MiB every 5 ms, each page touched so it is resident; up to 2 GiB.
    std::vector<std::unique_ptr<char[]>> held;
    for (int chunk = 0; chunk < 512; ++chunk) {
      held.emplace_back(new char[4 << 20]);
      std::memset(held.back().get(), 1, 4 << 20);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Say("ERROR allocated 2 GiB and nothing stopped it");
    return 5;
  }
  Say("ERROR unknown scenario " + scenario);
  return 2;
}
