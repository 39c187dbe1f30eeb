// A small training program that uses only libdist's public API, as a user's program would. It
// builds against an installed Cohort (see CMakeLists.txt beside it, or pkg-config cohort-dist)
// and runs under cohort-run or as a DistributedJob.
//
//   cohort-run -n 4 -- ./my-trainer [steps]

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

namespace {

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "my-trainer: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  if (argc > 1 && !absl::SimpleAtoi(argv[1], &steps)) {
    std::fprintf(stderr, "usage: my-trainer [steps]\n");
    return 2;
  }
  if (absl::Status s = dist::Initialize(); !s.ok()) return Fail("initialize", s);
  const int rank = dist::ProcessIndex();
  const int size = dist::ProcessCount();

  // Every process publishes something and reads what the others published.
  if (absl::Status s = dist::KeyValueSet(absl::StrCat("hello/", rank), absl::StrCat("from ", rank));
      !s.ok()) {
    return Fail("set", s);
  }
  int met = 0;
  for (int peer = 0; peer < size; ++peer) {
    absl::StatusOr<std::string> v = dist::KeyValueGet(absl::StrCat("hello/", peer));
    if (!v.ok()) return Fail("get", v.status());
    if (*v == absl::StrCat("from ", peer)) ++met;
  }

  absl::StatusOr<std::unique_ptr<dist::Communicator>> comm = dist::Communicator::Create();
  if (!comm.ok()) return Fail("communicator", comm.status());
  int64_t step = 0;
  int64_t total = 0;
  for (; step < steps; ++step) {
    // ... one step of training: here, every process contributes its rank ...
    int64_t contribution = rank;
    if (absl::Status s = (*comm)->AllReduce(&contribution, &contribution, 1, dist::DataType::kInt64,
                                            dist::ReduceOp::kSum);
        !s.ok()) {
      return Fail("all-reduce", s);
    }
    total += contribution;
    absl::StatusOr<bool> stop = dist::ReachedPreemptionSyncPoint(step);
    if (!stop.ok()) return Fail("preemption sync point", stop.status());
    if (*stop) break;  // Save a checkpoint here, then leave with dist::kPreemptedExitCode.
  }
  if (absl::Status s = dist::SyncGlobalDevices("done"); !s.ok()) return Fail("barrier", s);
  std::printf(
      "my-trainer: rank %d of %d (restart attempt %d) heard from %d processes and ran "
      "%lld steps (all-reduced total %lld)\n",
      rank, size, dist::RestartAttempt(), met, static_cast<long long>(step),
      static_cast<long long>(total));
  std::fflush(stdout);
  comm->reset();
  if (absl::Status s = dist::Shutdown(); !s.ok()) return Fail("shutdown", s);
  return 0;
}
