// The collective watchdog at work: every rank all-reduces a value each step, except that one rank
// (--stall-rank) stops calling at --stall-at-step and sleeps, as a rank stuck in its data loader
// or a deadlock would. The others wait in the all-reduce; when it times out
// (COHORT_COLLECTIVE_TIMEOUT, e.g. 5s), the watchdog names the stalled rank in the job failure
// every process prints:
//
//   COHORT_COLLECTIVE_TIMEOUT=5s cohort-run -n 2 -- stalled-rank-example
//   ... the job failed: ... process 1 is alive (heartbeat 0.4 s ago) but never entered
//   all_reduce #21 (int64 sum, 1 element), which the other 1 process entered 5.0 s ago; its last
//   completed collective is #20 [cause: collective timeout] ...
//
// examples/stalled-rank.yaml runs it as a DistributedJob; docs/libdist.md explains the message.

#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

int main(int argc, char** argv) {
  int stall_rank = 1;
  int stall_at_step = 20;
  int steps = 1000;
  CLI::App app{"stalled-rank-example: the collective watchdog naming a stalled rank"};
  app.add_option("--stall-rank", stall_rank, "The rank that stops calling")->capture_default_str();
  app.add_option("--stall-at-step", stall_at_step, "When it stops")->capture_default_str();
  app.add_option("--steps", steps, "Steps otherwise")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (absl::Status s = dist::Initialize(); !s.ok()) {
    std::fprintf(stderr, "initialize: %s\n", s.ToString().c_str());
    return 1;
  }
  auto comm = dist::Communicator::Create();
  if (!comm.ok()) {
    std::fprintf(stderr, "communicator: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = dist::ProcessIndex();
  for (int step = 0; step < steps; ++step) {
    if (rank == stall_rank && step == stall_at_step) {
      std::printf("rank %d: stalling at step %d (not calling the all-reduce)\n", rank, step);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    int64_t value = rank + step;
    if (absl::Status s =
            (*comm)->AllReduce(&value, &value, 1, dist::DataType::kInt64, dist::ReduceOp::kSum);
        !s.ok()) {
      // Not reached with the default failure handler, which exits 75 first.
      std::fprintf(stderr, "step %d: %s\n", step, s.ToString().c_str());
      return 1;
    }
    if (step % 10 == 0) {
      std::printf("rank %d: step %d\n", rank, step);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  comm->reset();
  return dist::Shutdown().ok() ? 0 : 1;
}
