// store-latency: the time of one dist::KeyValueSet plus one dist::KeyValueGet of the key just
// set, from a C++ rank of a job: the C++ side of bench/python_bench.py's "kv" figure.
//
//   cohort-run -n 2 -- store-latency [--iters 2000] [--json]
//
// Every rank times its own keys; rank 0 prints the means over ranks of the mean pair and the
// median pair (µs). bench/kv_pair_shim.cc is the same pair for python_bench.py --kv-paired.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

namespace {
void Die(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "store-latency: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"store-latency: KeyValueSet + KeyValueGet per pair, from C++"};
  int iters = 2000;
  bool json = false;
  int get_timeout_ms = 0;
  app.add_option("--iters", iters, "set+get pairs per rank")->check(CLI::PositiveNumber);
  app.add_option("--get-timeout-ms", get_timeout_ms,
                 "the get's timeout (0: libdist's default); the Python package waits in 100 ms "
                 "slices")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "one JSON object");
  CLI11_PARSE(app, argc, argv);
  dist::Options options;
  options.install_preemption_handler = false;
  Die(dist::Initialize(options), "initialize");
  const int rank = dist::ProcessIndex();
  for (int i = 0; i < 50; ++i) {  // warm-up
    const std::string key = absl::StrCat("warm/", rank, "/", i);
    Die(dist::KeyValueSet(key, "v"), "set");
    Die(dist::KeyValueGet(key).status(), "get");
  }
  Die(dist::Barrier("store-latency/start"), "barrier");
  std::vector<double> pair_us(iters);
  const absl::Time start = absl::Now();
  absl::Time last = start;
  for (int i = 0; i < iters; ++i) {
    const std::string key = absl::StrCat("bench/", rank, "/", i);
    Die(dist::KeyValueSet(key, "value"), "set");
    Die((get_timeout_ms > 0 ? dist::KeyValueGet(key, absl::Milliseconds(get_timeout_ms))
                            : dist::KeyValueGet(key))
            .status(),
        "get");
    const absl::Time now = absl::Now();
    pair_us[i] = absl::ToDoubleMicroseconds(now - last);
    last = now;
  }
  std::nth_element(pair_us.begin(), pair_us.begin() + iters / 2, pair_us.end());
  double figures[2] = {absl::ToDoubleMicroseconds(last - start) / iters, pair_us[iters / 2]};
  auto comm = dist::Communicator::Create();
  Die(comm.status(), "communicator");
  Die((*comm)->AllReduce(figures, figures, 2, dist::DataType::kFloat64, dist::ReduceOp::kAvg),
      "means over ranks");
  if (rank == 0) {
    if (json) {
      std::printf("%s\n", nlohmann::json{{"workload", "store-latency"},
                                         {"impl", "c++"},
                                         {"ranks", dist::ProcessCount()},
                                         {"iters", iters},
                                         {"set_get_us", figures[0]},
                                         {"set_get_median_us", figures[1]}}
                              .dump()
                              .c_str());
    } else {
      std::printf(
          "key_value_set + get: %.2f us per pair, median pair %.2f us (means over %d "
          "ranks)\n",
          figures[0], figures[1], dist::ProcessCount());
    }
  }
  comm->reset();
  Die(dist::Shutdown(), "shutdown");
  return 0;
}
