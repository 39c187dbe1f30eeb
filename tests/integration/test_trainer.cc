// A trainer for the multi-process tests: each --scenario exercises libdist the way a real
// program would and prints lines the tests look for.

#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/distributed.h"

namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Check(const absl::Status& s, const char* what) {
  if (s.ok()) return 0;
  Say(absl::StrCat("ERROR ", what, ": ", absl::StatusCodeToString(s.code()), ": ", s.message()));
  return 3;
}

// Initialize, exchange keys, pass a reusable barrier several times, count, list, shut down.
int Rendezvous() {
  const int rank = dist::ProcessIndex(), n = dist::ProcessCount();
  if (int rc = Check(dist::KeyValueSet(absl::StrCat("rdv/", rank), absl::StrCat("v", rank)), "set")) return rc;
  for (int peer = 0; peer < n; ++peer) {
    absl::StatusOr<std::string> v = dist::KeyValueGet(absl::StrCat("rdv/", peer), absl::Seconds(30));
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
  Say(absl::StrCat("RENDEZVOUS rank=", rank, " keys=", dir->size(), " count=", *count));
  return Check(dist::Shutdown(), "shutdown");
}

// Every rank but the last waits in a barrier that cannot pass, because the last rank waits
// for a key nobody sets. Only a failure (injected by the test) ends the wait.
int Wait() {
  Say("WAITING");
  absl::Status s;
  if (dist::ProcessIndex() == dist::ProcessCount() - 1) {
    s = dist::KeyValueGet("never-set", absl::Minutes(10)).status();
  } else {
    s = dist::Barrier("hang", absl::Minutes(10));
  }
  Say(absl::StrCat("WAIT_RETURNED ", s.ToString()));
  return 4;
}

// Train until a preemption notice; report the agreed step.
int Preempt() {
  Say("TRAINING");
  for (int64_t step = 0; step < 100000; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
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

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "rendezvous";
  dist::Options options;
  if (scenario == "wait-with-handler") {
    // The program handles peer failures itself instead of the default exit(75).
    options.on_peer_failure = [](const dist::PeerFailure& f) {
      Say(absl::StrCat("HANDLED failed=", f.process_id, " cause=", dist::FailureCauseName(f.cause)));
      std::_Exit(9);
    };
    scenario = "wait";
  }
  absl::Status init = dist::Initialize(options);
  if (!init.ok()) {
    Say(absl::StrCat("INIT_FAILED ", absl::StatusCodeToString(init.code()), ": ", init.message()));
    return 3;
  }
  Say(absl::StrCat("INITIALIZED rank=", dist::ProcessIndex()));
  if (scenario == "rendezvous") return Rendezvous();
  if (scenario == "wait") return Wait();
  if (scenario == "preempt") return Preempt();
  if (scenario == "init-only") return Check(dist::Shutdown(), "shutdown");
  if (scenario == "rank1-exits-7") {
    if (dist::ProcessIndex() == 1) return 7;  // Without shutdown: a crash as far as the job knows.
    return Wait();
  }
  Say("ERROR unknown scenario " + scenario);
  return 2;
}
