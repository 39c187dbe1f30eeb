// mpi_allreduce: float32 sum MPI_Allreduce timings, the MPI peers of collective-bench.
//
//   mpirun -np 2 mpi_allreduce --impl openmpi [--min-bytes 4096] [--max-bytes 67108864]
//                              [--iters-scale 1]
//
// Built by run-collective-peers.sh with each MPI's own wrapper (OpenMPI mpicxx, Intel MPI
// mpigxx), so it uses the MPI C API only. For every size from --min-bytes to --max-bytes (4 KiB
// times powers of 4) and for out-of-place then in-place (nccl-tests' order), rank 0 prints one
// JSON line:
//
//   {"impl":..,"op":"all_reduce","ranks":P,"bytes":S,"count":N,"in_place":..,"time_us":T,
//    "algbw_gbps":A,"busbw_gbps":B,"median_max_us":M,"iters":I,"wrong":W}
//
// time_us follows nccl-tests (-w 1 -a 1): the mean per-op time of `iters` back-to-back ops after
// one warm-up (plus, once per run, 200 ms of small ops for connection setup, as collective-bench
// warms up), averaged over ranks;
// algbw = S / time (GB = 1e9 B), busbw = algbw * 2(P-1)/P.
// median_max_us is the figure collective-bench also prints: each op preceded by MPI_Barrier,
// the max over ranks of that op's time, and the median over iterations. wrong counts, summed
// over ranks, the elements that differ from P(P+1)/2 after one all-reduce of inputs rank+1
// (small integers, so float sums are exact in any order).

// Only the C API is used; skip OpenMPI's and MPICH-derived (Intel MPI) C++ bindings, whose
// headers warn under -Wextra and need libmpicxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;
constexpr std::int64_t kSmallestBytes = 4 * kKiB;
constexpr std::int64_t kLargestBytes = 64 * kMiB;
constexpr std::int64_t kSizeFactor = 4;
// Untimed ops of the first size before measuring, as long as collective-bench's --warmup-ms.
constexpr double kStartupWarmupUs = 200e3;

struct Options {
  std::string impl = "mpi";
  std::int64_t min_bytes = kSmallestBytes;
  std::int64_t max_bytes = kLargestBytes;
  double iters_scale = 1.0;
};

struct Result {
  double time_us = 0;
  double median_max_us = 0;
  int iters = 0;
  std::int64_t wrong = 0;
};

// nccl-tests uses a fixed 20; the large sizes get fewer so a P=4 run on two cores stays short.
int BaseIters(std::int64_t bytes) {
  if (bytes <= 1 * kMiB) return 20;
  if (bytes <= 16 * kMiB) return 10;
  return 5;
}

double NowUs() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

bool ParseInt(const char* text, std::int64_t* out) {
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value <= 0) return false;
  *out = value;
  return true;
}

// Returns false (after printing why on rank 0) when the flags are unusable.
bool ParseOptions(int argc, char** argv, int rank, Options* options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = value != nullptr;
    if (flag == "--impl" && ok) {
      options->impl = value;
    } else if (flag == "--min-bytes" && ok) {
      ok = ParseInt(value, &options->min_bytes);
    } else if (flag == "--max-bytes" && ok) {
      ok = ParseInt(value, &options->max_bytes);
    } else if (flag == "--iters-scale" && ok) {
      char* end = nullptr;
      options->iters_scale = std::strtod(value, &end);
      ok = end != value && *end == '\0' && options->iters_scale > 0;
    } else {
      ok = false;
    }
    if (!ok) {
      if (rank == 0) {
        std::fprintf(stderr,
                     "mpi_allreduce: bad or incomplete flag '%s'; usage: mpi_allreduce --impl NAME "
                     "[--min-bytes B] [--max-bytes B] [--iters-scale X]\n",
                     flag.c_str());
      }
      return false;
    }
    ++i;
  }
  if (options->min_bytes > options->max_bytes || options->max_bytes > kLargestBytes) {
    if (rank == 0) {
      std::fprintf(
          stderr, "mpi_allreduce: need --min-bytes <= --max-bytes <= %lld, got %lld and %lld\n",
          static_cast<long long>(kLargestBytes), static_cast<long long>(options->min_bytes),
          static_cast<long long>(options->max_bytes));
    }
    return false;
  }
  return true;
}

// `send` is ignored (MPI_IN_PLACE is passed) when in_place.
void AllReduce(const float* send, float* recv, int count, bool in_place) {
  MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

Result Measure(std::vector<float>& send, std::vector<float>& recv, int count, bool in_place,
               int iters, int rank, int ranks) {
  Result result;
  result.iters = iters;
  float* data = in_place ? recv.data() : send.data();
  // Timing inputs: rank+1 everywhere. In place the values grow by P each op; with at most a few
  // hundred ops they stay finite and never denormal, so the timing is not data dependent.
  std::fill(data, data + count, static_cast<float>(rank + 1));

  AllReduce(send.data(), recv.data(), count, in_place);  // warm-up
  MPI_Barrier(MPI_COMM_WORLD);
  double start = NowUs();
  for (int i = 0; i < iters; ++i) AllReduce(send.data(), recv.data(), count, in_place);
  double per_op = (NowUs() - start) / iters;
  double sum_per_op = 0;
  MPI_Allreduce(&per_op, &sum_per_op, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  result.time_us = sum_per_op / ranks;

  std::vector<double> max_times;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double op_start = NowUs();
    AllReduce(send.data(), recv.data(), count, in_place);
    double mine = NowUs() - op_start;
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    max_times.push_back(slowest);
  }
  result.median_max_us = Median(max_times);

  // Validation: fresh inputs, and a poisoned output buffer when out of place so an op that
  // writes nothing is caught.
  std::fill(data, data + count, static_cast<float>(rank + 1));
  if (!in_place) std::fill(recv.begin(), recv.begin() + count, -1.0f);
  AllReduce(send.data(), recv.data(), count, in_place);
  const float expected = static_cast<float>(ranks) * (ranks + 1) / 2;
  std::int64_t wrong = 0;
  for (int i = 0; i < count; ++i) wrong += recv[i] != expected;
  MPI_Allreduce(&wrong, &result.wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  Options options;
  if (!ParseOptions(argc, argv, rank, &options)) {
    MPI_Finalize();
    return 2;
  }

  // Buffers for the largest size, touched once so first-use page faults stay out of the timings.
  const std::size_t max_count = static_cast<std::size_t>(options.max_bytes / sizeof(float));
  std::vector<float> send(max_count, 0.0f);
  std::vector<float> recv(max_count, 0.0f);

  // Connection and shared-memory setup happen lazily in the first ops; without this the first
  // size's single warm-up leaves them in its timed loop (Intel MPI: 240 us instead of 2 us).
  const int first_count =
      static_cast<int>(std::max(options.min_bytes, kSmallestBytes) / sizeof(float));
  const double warmup_end = NowUs() + kStartupWarmupUs;
  for (int more = 1; more != 0;) {  // rank 0's clock decides, so every rank makes the same ops
    for (int i = 0; i < 20; ++i) {
      for (bool in_place : {false, true})
        AllReduce(send.data(), recv.data(), first_count, in_place);
    }
    more = NowUs() < warmup_end;
    MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }

  for (std::int64_t bytes = kSmallestBytes; bytes <= options.max_bytes; bytes *= kSizeFactor) {
    if (bytes < options.min_bytes) continue;
    const int count = static_cast<int>(bytes / static_cast<std::int64_t>(sizeof(float)));
    const int iters = std::max(1, static_cast<int>(BaseIters(bytes) * options.iters_scale + 0.5));
    for (bool in_place : {false, true}) {
      Result r = Measure(send, recv, count, in_place, iters, rank, ranks);
      if (rank != 0) continue;
      double algbw = bytes / (r.time_us * 1e-6) / 1e9;
      double busbw = algbw * 2.0 * (ranks - 1) / ranks;
      std::printf(
          "{\"impl\":\"%s\",\"op\":\"all_reduce\",\"ranks\":%d,\"bytes\":%lld,\"count\":%d,"
          "\"in_place\":%s,\"time_us\":%.2f,\"algbw_gbps\":%.3f,\"busbw_gbps\":%.3f,"
          "\"median_max_us\":%.2f,\"iters\":%d,\"wrong\":%lld}\n",
          options.impl.c_str(), ranks, static_cast<long long>(bytes), count,
          in_place ? "true" : "false", r.time_us, algbw, busbw, r.median_max_us, r.iters,
          static_cast<long long>(r.wrong));
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
