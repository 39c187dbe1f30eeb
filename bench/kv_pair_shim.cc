// libcohort-kv-pair-shim.so: one dist::KeyValueSet + dist::KeyValueGet pair behind a C symbol,
// for bench/python_bench.py --kv-paired. Loaded with ctypes into a Python rank, it binds to the
// libcohort_dist.so.0 the cohort package already loaded (same soname), so the C++ pair and the
// package's pair run in one process, one thread and one job, alternating pair by pair: their
// difference is the package's cost, without the run-to-run noise of the sidecar and the
// coordinator.
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/distributed.h"

// Sets `key` to "value", gets it back, and returns the pair's time in µs measured in C++
// (the ctypes call around it is not counted); -1 when either call fails.
extern "C" double cohort_kv_pair_us(const char* key) {
  const absl::Time start = absl::Now();
  if (!dist::KeyValueSet(key, "value").ok()) return -1;
  if (!dist::KeyValueGet(key).ok()) return -1;
  return absl::ToDoubleMicroseconds(absl::Now() - start);
}
