// A small "training" program for libdist: rendezvous, key-value exchange, barriers over steps,
// a checkpoint at the preemption sync step, and a resume from that checkpoint when it starts
// again. `make demo` runs four of it as a DistributedJob and evicts one pod mid-run.
//
//   cohort-run -n 4 -- demo-trainer --steps 300 --checkpoint-dir /tmp/ckpt
//
// After a preemption checkpoint it exits with --preempted-exit-code (libdist's
// kPreemptedExitCode, 76: "checkpointed, restart me"), which cohort-operator restarts without
// counting a failure; pass 0 under cohort-run, which has no one to restart it.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/distributed.h"

namespace {

int Fail(const char* what, const absl::Status& s) {
  std::fprintf(stderr, "demo-trainer: %s: %s\n", what, std::string(s.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300;
  int step_ms = 20;
  int barrier_every = 10;
  std::string checkpoint_dir = "checkpoints";
  int preempted_exit_code = dist::kPreemptedExitCode;
  CLI::App app{"demo-trainer: a libdist example"};
  app.add_option("--steps", steps, "Training steps")->capture_default_str();
  app.add_option("--step-ms", step_ms, "Simulated compute per step (ms)")->capture_default_str();
  app.add_option("--barrier-every", barrier_every, "Barrier every N steps")->capture_default_str();
  app.add_option("--checkpoint-dir", checkpoint_dir, "Where checkpoints go")->capture_default_str();
  app.add_option("--preempted-exit-code", preempted_exit_code,
                 "Exit status after the preemption checkpoint")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  absl::Time t0 = absl::Now();
  if (absl::Status s = dist::Initialize(); !s.ok()) return Fail("initialize", s);
  const int rank = dist::ProcessIndex();
  const int n = dist::ProcessCount();
  absl::Duration init_time = absl::Now() - t0;
  std::printf("joined as rank %d of %d in %s\n", rank, n,
              absl::FormatDuration(absl::Trunc(init_time, absl::Milliseconds(1))).c_str());
  // A checkpoint from an earlier restart attempt: carry on after it. Every rank wrote the same step.
  int64_t resumed_from = -1;
  std::ifstream saved(absl::StrCat(checkpoint_dir, "/rank-", rank, ".ckpt"));
  std::string word;
  if (saved >> word >> resumed_from && word == "step") {
    std::printf("resumed from the checkpoint at step %lld\n", static_cast<long long>(resumed_from));
  } else {
    resumed_from = -1;
  }

  // Key-value exchange: every rank publishes an "address" and reads everyone's.
  if (absl::Status s = dist::KeyValueSet(absl::StrCat("demo/addr/", rank),
                                         absl::StrCat("127.0.0.1:", 20000 + rank));
      !s.ok()) {
    return Fail("publish address", s);
  }
  for (int peer = 0; peer < n; ++peer) {
    absl::StatusOr<std::string> addr =
        dist::KeyValueGet(absl::StrCat("demo/addr/", peer), absl::Seconds(60));
    if (!addr.ok()) return Fail("read address", addr.status());
  }
  std::printf("exchanged addresses with %d ranks\n", n);
  if (absl::Status s = dist::Barrier("demo/ready", absl::Seconds(60)); !s.ok()) {
    return Fail("barrier", s);
  }

  absl::Time train_start = absl::Now();
  int64_t step = resumed_from + 1;
  int64_t checkpoint_step = -1;
  int barriers = 0;
  for (; step < steps; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // "Compute".
    absl::StatusOr<bool> sync = dist::ReachedPreemptionSyncPoint(step);
    if (!sync.ok()) return Fail("preemption sync", sync.status());
    if (*sync) {
      std::filesystem::create_directories(checkpoint_dir);
      std::ofstream(absl::StrCat(checkpoint_dir, "/rank-", rank, ".ckpt"))
          << "step " << step << "\n";
      checkpoint_step = step;
      std::printf("preemption: checkpoint written at step %lld\n", static_cast<long long>(step));
      break;
    }
    if ((step + 1) % barrier_every == 0) {
      if (absl::Status s = dist::Barrier("demo/step", absl::Seconds(60)); !s.ok()) {
        return Fail("step barrier", s);
      }
      ++barriers;
      if (rank == 0 && (step + 1) % (barrier_every * 5) == 0) {
        std::printf("step %lld/%d\n", static_cast<long long>(step + 1), steps);
      }
    }
    std::fflush(stdout);
  }
  absl::Duration train_time = absl::Now() - train_start;
  if (absl::Status s = dist::Shutdown(); !s.ok()) return Fail("shutdown", s);
  std::printf(
      "RESULT rank=%d steps=%lld checkpoint_step=%lld resumed_from=%lld barriers=%d init_ms=%lld train_ms=%lld\n",
      rank, static_cast<long long>(checkpoint_step >= 0 ? checkpoint_step : step),
      static_cast<long long>(checkpoint_step), static_cast<long long>(resumed_from), barriers,
      static_cast<long long>(absl::ToInt64Milliseconds(init_time)),
      static_cast<long long>(absl::ToInt64Milliseconds(train_time)));
  return checkpoint_step >= 0 ? preempted_exit_code : 0;
}
