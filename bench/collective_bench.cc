// collective-bench: libdist's collectives, measured the way nccl-tests measures NCCL.
//
//   collective-bench [-n 2] [--op all_reduce] [--transport auto|shm|tcp] [--min-bytes 4K]
//                    [--max-bytes 64M] [--factor 4] [--json] [--async N] [--warmup-ms 200]
//
// Without COHORT_PROCESS_ID in the environment it launches -n copies of itself as a standalone
// job on loopback (process 0 hosts the coordination service); under cohort-run or in a job it
// is one rank. Rank 0 prints nccl-tests' table (size, count, type, redop, root, then time,
// algbw, busbw and #wrong out of place and in place), or with --json one JSON object per size
// and placement, plus:
//   - median_max_us: the median over iterations of the slowest rank's time, with a barrier
//     before each iteration (what a training step waits for);
//   - the concurrent-memcpy ceiling: every rank copying the same size at once, which bounds
//     what any shared-memory all-reduce can reach on this machine.
// Before the first size, the ranks run untimed calls of it for --warmup-ms: a job's first
// milliseconds are its start-up (sidecars and the launcher finishing theirs), which on a small
// machine preempts a rank for milliseconds and would land in the first sizes' means.
// docs/benchmarks.md records the figures and compares them with OpenMPI, Intel MPI and gloo
// (bench/baselines/run-collective-peers.sh) in the same run.

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "dist/collectives.h"
#include "dist/distributed.h"

namespace {

struct Flags {
  int ranks = 2;
  std::string op = "all_reduce";
  std::string transport = "auto";
  std::string min_bytes = "4K";
  std::string max_bytes = "64M";
  int factor = 4;
  int iters = 0;  // 0: by size (20 up to 1 MiB, 10 up to 16 MiB, 5 above)
  bool json = false;
  bool memcpy_ceiling = true;
  // > 0: the timed loop enqueues this many asynchronous calls, then waits for them all.
  int async = 0;
  // Untimed calls before the first size, for at least this long on rank 0's clock.
  int warmup_ms = 200;
};

size_t ParseBytes(const std::string& s) {
  size_t mult = 1;
  std::string digits = s;
  if (!s.empty()) {
    const char u = static_cast<char>(std::toupper(s.back()));
    if (u == 'K' || u == 'M' || u == 'G') {
      mult = u == 'K' ? 1024 : u == 'M' ? 1024 * 1024 : 1024ull * 1024 * 1024;
      digits = s.substr(0, s.size() - 1);
    }
  }
  return static_cast<size_t>(std::stoull(digits)) * mult;
}

// Launches the ranks as a standalone job on loopback and waits for them.
int Launch(const Flags& flags, char** argv) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);  // Process 0 binds it next.
  std::vector<pid_t> pids;
  for (int r = 0; r < flags.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("COHORT_MODE", "standalone", 1);
      setenv("COHORT_COORDINATOR_ADDRESS", absl::StrCat("127.0.0.1:", port).c_str(), 1);
      setenv("COHORT_NUM_PROCESSES", std::to_string(flags.ranks).c_str(), 1);
      setenv("COHORT_PROCESS_ID", std::to_string(r).c_str(), 1);
      setenv("COHORT_HOST_TRANSPORT", flags.transport.c_str(), 1);
      unsetenv("COHORT_AGENT_SOCKET");
      execv("/proc/self/exe", argv);
      std::perror("execv");
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };

struct Shape {
  size_t send_elems, recv_elems, count;
  double bus_factor;
};

Shape ShapeOf(Op op, size_t bytes, int p) {
  const size_t n = bytes / 4;
  switch (op) {
    case Op::kAllReduce:
      return {n, n, n, 2.0 * (p - 1) / p};
    case Op::kBroadcast:
      return {n, n, n, 1.0};
    case Op::kAllGather:
      return {n / p, n / p * p, n / p, double(p - 1) / p};
    case Op::kReduceScatter:
      return {n / p * p, n / p, n / p, double(p - 1) / p};
    case Op::kAllToAll:
      return {n / p * p, n / p * p, n / p, double(p - 1) / p};
  }
  return {n, n, n, 1.0};
}

absl::Status RunOp(dist::Communicator& c, Op op, const float* send, float* recv, size_t count) {
  switch (op) {
    case Op::kAllReduce:
      return c.AllReduce(send, recv, count, dist::DataType::kFloat32, dist::ReduceOp::kSum);
    case Op::kBroadcast:
      return c.Broadcast(send, recv, count, dist::DataType::kFloat32, 0);
    case Op::kAllGather:
      return c.AllGather(send, recv, count, dist::DataType::kFloat32);
    case Op::kReduceScatter:
      return c.ReduceScatter(send, recv, count, dist::DataType::kFloat32, dist::ReduceOp::kSum);
    case Op::kAllToAll:
      return c.AllToAll(send, recv, count, dist::DataType::kFloat32);
  }
  return absl::OkStatus();
}

absl::StatusOr<dist::Work> RunOpAsync(dist::Communicator& c, Op op, const float* send, float* recv,
                                      size_t count) {
  switch (op) {
    case Op::kAllReduce:
      return c.AllReduceAsync(send, recv, count, dist::DataType::kFloat32, dist::ReduceOp::kSum);
    case Op::kBroadcast:
      return c.BroadcastAsync(send, recv, count, dist::DataType::kFloat32, 0);
    case Op::kAllGather:
      return c.AllGatherAsync(send, recv, count, dist::DataType::kFloat32);
    case Op::kReduceScatter:
      return c.ReduceScatterAsync(send, recv, count, dist::DataType::kFloat32,
                                  dist::ReduceOp::kSum);
    case Op::kAllToAll:
      return c.AllToAllAsync(send, recv, count, dist::DataType::kFloat32);
  }
  return dist::Work();
}

void Die(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "collective-bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

double Sum(dist::Communicator& c, double v) {
  Die(c.AllReduce(&v, &v, 1, dist::DataType::kFloat64, dist::ReduceOp::kSum), "all_reduce");
  return v;
}

struct Placement {
  double time_us = 0, median_max_us = 0;
  int64_t wrong = 0;
};

Placement Measure(dist::Communicator& c, Op op, size_t bytes, bool in_place, int iters, int async) {
  const int p = c.size(), r = c.rank();
  const Shape s = ShapeOf(op, bytes, p);
  std::vector<float> a(std::max<size_t>(s.send_elems, s.recv_elems) + 1), b(s.recv_elems + 1);
  float* recv = in_place ? a.data() : b.data();
  const float* send = a.data();
  if (in_place && op == Op::kAllGather) send = a.data() + r * s.count;
  if (in_place && op == Op::kAllToAll) {
    recv = b.data();  // All-to-all has no in-place form; measured out of place twice.
  }
  float* rs_recv = recv;
  if (in_place && op == Op::kReduceScatter) rs_recv = a.data() + r * s.count;
  float* out = op == Op::kReduceScatter ? rs_recv : recv;

  Placement m;
  // Warm-up, then back-to-back iterations (nccl-tests' time).
  Die(RunOp(c, op, send, out, s.count), "warm-up");
  Die(c.Barrier(), "barrier");
  absl::Time t0 = absl::Now();
  if (async > 0) {
    // `async` calls in flight, then one wait for them all; the time is per call.
    std::vector<dist::Work> works(async);
    for (int i = 0; i < iters; ++i) {
      for (dist::Work& w : works) {
        absl::StatusOr<dist::Work> enqueued = RunOpAsync(c, op, send, out, s.count);
        Die(enqueued.status(), "async op");
        w = *enqueued;
      }
      for (dist::Work& w : works) Die(w.Wait(), "wait");
    }
  } else {
    for (int i = 0; i < iters; ++i) Die(RunOp(c, op, send, out, s.count), "op");
  }
  const double mine = absl::ToDoubleMicroseconds(absl::Now() - t0) / (iters * std::max(1, async));
  m.time_us = Sum(c, mine) / p;
  // A barrier before each iteration; the slowest rank's time, median over iterations.
  std::vector<double> times(iters);
  for (int i = 0; i < iters; ++i) {
    Die(c.Barrier(), "barrier");
    absl::Time t = absl::Now();
    Die(RunOp(c, op, send, out, s.count), "op");
    times[i] = absl::ToDoubleMicroseconds(absl::Now() - t);
  }
  Die(c.AllReduce(times.data(), times.data(), iters, dist::DataType::kFloat64,
                  dist::ReduceOp::kMax),
      "all_reduce");
  std::nth_element(times.begin(), times.begin() + iters / 2, times.end());
  m.median_max_us = times[iters / 2];
  // Validation: every rank sends rank + 1.
  std::fill(a.begin(), a.end(), static_cast<float>(r + 1));
  if (!(in_place && (op == Op::kAllGather || op == Op::kReduceScatter))) {
    std::fill(b.begin(), b.end(), -1.0f);
  }
  Die(RunOp(c, op, send, out, s.count), "validation");
  int64_t wrong = 0;
  const float sum = static_cast<float>(p * (p + 1) / 2);
  for (size_t i = 0; i < (op == Op::kReduceScatter ? s.count : s.recv_elems); ++i) {
    float want = 0;
    switch (op) {
      case Op::kAllReduce:
      case Op::kReduceScatter:
        want = sum;
        break;
      case Op::kBroadcast:
        want = 1.0f;
        break;
      case Op::kAllGather:
      case Op::kAllToAll:
        want = static_cast<float>(i / s.count + 1);
        break;
    }
    wrong += out[i] != want;
  }
  m.wrong = static_cast<int64_t>(Sum(c, static_cast<double>(wrong)));
  return m;
}

// Untimed calls of the first size until `period` passed on rank 0's clock (rank 0 decides, in
// batches, so every rank makes the same calls).
void StartupWarmup(dist::Communicator& c, Op op, size_t bytes, absl::Duration period) {
  const Shape s = ShapeOf(op, bytes, c.size());
  std::vector<float> send(std::max(s.send_elems, s.recv_elems)), recv(s.recv_elems);
  const absl::Time end = absl::Now() + period;
  for (int32_t more = period > absl::ZeroDuration(); more != 0;) {
    for (int i = 0; i < 20; ++i) Die(RunOp(c, op, send.data(), recv.data(), s.count), "warm-up");
    more = absl::Now() < end;
    Die(c.Broadcast(&more, &more, 1, dist::DataType::kInt32, 0), "warm-up");
  }
}

// Every rank copies `bytes` at once: the memory-bandwidth ceiling of a shared-memory
// collective at this size. GB/s per process, mean over ranks.
double ConcurrentMemcpy(dist::Communicator& c, size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> gbps;
  for (int i = 0; i < 5; ++i) {
    Die(c.Barrier(), "barrier");
    absl::Time t = absl::Now();
    std::memcpy(dst.data(), src.data(), bytes);
    gbps.push_back(bytes / absl::ToDoubleSeconds(absl::Now() - t) / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return Sum(c, gbps[2]) / c.size();
}

std::string Fixed(double v, int width) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%*.0f", width, v);
  } else {
    std::snprintf(buf, sizeof(buf), "%*.2f", width, v);
  }
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"collective-bench: libdist collectives, measured like nccl-tests"};
  app.add_option("-n,--ranks", flags.ranks, "Ranks to launch (without a job)")
      ->capture_default_str();
  app.add_option("--op", flags.op, "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all")
      ->capture_default_str();
  app.add_option("--transport", flags.transport, "Host transport: auto, shm, tcp")
      ->capture_default_str();
  app.add_option("--min-bytes", flags.min_bytes, "Smallest size (e.g. 4K)")->capture_default_str();
  app.add_option("--max-bytes", flags.max_bytes, "Largest size (e.g. 64M)")->capture_default_str();
  app.add_option("--factor", flags.factor, "Size step factor")->capture_default_str();
  app.add_option("--iters", flags.iters, "Iterations per size (0: 20/10/5 by size)");
  app.add_flag("--json", flags.json, "One JSON object per size and placement");
  app.add_option("--async", flags.async,
                 "Time N asynchronous calls in flight, then one wait for them all (per call)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-memcpy", flags.memcpy_ceiling, "Skip the concurrent-memcpy ceiling");
  app.add_option("--warmup-ms", flags.warmup_ms,
                 "Untimed calls of the first size for this long before measuring (the job's "
                 "start-up stays out of the figures)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  const Op op = flags.op == "all_gather"       ? Op::kAllGather
                : flags.op == "reduce_scatter" ? Op::kReduceScatter
                : flags.op == "broadcast"      ? Op::kBroadcast
                : flags.op == "all_to_all"     ? Op::kAllToAll
                                               : Op::kAllReduce;
  if (std::getenv("COHORT_PROCESS_ID") == nullptr) return Launch(flags, argv);

  dist::Options options;
  options.install_preemption_handler = false;
  Die(dist::Initialize(options), "initialize");
  // Under cohort-run or in a job too, --transport picks the transport (unless it is "auto",
  // which leaves COHORT_HOST_TRANSPORT to decide).
  dist::CommunicatorOptions comm_options;
  if (flags.transport == "shm") comm_options.host_transport = dist::HostTransport::kShm;
  if (flags.transport == "tcp") comm_options.host_transport = dist::HostTransport::kTcp;
  auto comm = dist::Communicator::Create(comm_options);
  Die(comm.status(), "communicator");
  dist::Communicator& c = **comm;
  const bool leader = c.rank() == 0;
  const std::string impl =
      c.Describe().find("TCP") != std::string::npos ? "cohort-tcp" : "cohort-shm";
  const size_t min_bytes = ParseBytes(flags.min_bytes), max_bytes = ParseBytes(flags.max_bytes);
  if (leader && !flags.json) {
    std::printf("# collective-bench %s: %s\n", flags.op.c_str(), c.Describe().c_str());
    std::printf(
        "# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %d(factor) warmup iters: 1 "
        "iters: %s agg iters: 1 validation: 1 graph: 0\n",
        min_bytes, max_bytes, flags.factor,
        flags.iters ? std::to_string(flags.iters).c_str() : "20/10/5 by size");
    std::printf("#\n# Using devices\n");
  }
  for (int r = 0; r < c.size(); ++r) {
    if (leader && !flags.json) {
      std::printf("#  Rank %2d Group  0 Pid %6d on %10s device  0 [host] cpu\n", r,
                  r == 0 ? getpid() : 0, "localhost");
    }
  }
  if (leader && !flags.json) {
    std::printf("#\n#%12s %12s %8s %6s %6s %7s %6s %6s %6s %7s %6s %6s %6s %10s\n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong", "median_max");
    std::printf("#%12s %12s %8s %6s %6s %7s %6s %6s %6s %7s %6s %6s %6s %10s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "", "(us, ip)");
  }
  StartupWarmup(c, op, min_bytes, absl::Milliseconds(flags.warmup_ms));
  double busbw_total = 0;
  int busbw_n = 0;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= flags.factor) {
    const int iters = flags.iters            ? flags.iters
                      : bytes <= (1u << 20)  ? 20
                      : bytes <= (16u << 20) ? 10
                                             : 5;
    const Shape s = ShapeOf(op, bytes, c.size());
    Placement out = Measure(c, op, bytes, false, iters, flags.async);
    Placement in = Measure(c, op, bytes, true, iters, flags.async);
    if (!leader) continue;
    auto algbw = [&](double us) { return bytes / us / 1e3; };
    if (flags.json) {
      for (const auto& [placement, m] : {std::pair{false, out}, std::pair{true, in}}) {
        nlohmann::json j = {{"impl", impl},
                            {"op", flags.op},
                            {"ranks", c.size()},
                            {"bytes", bytes},
                            {"count", s.count},
                            {"in_place", placement},
                            {"time_us", m.time_us},
                            {"algbw_gbps", algbw(m.time_us)},
                            {"busbw_gbps", algbw(m.time_us) * s.bus_factor},
                            {"median_max_us", m.median_max_us},
                            {"iters", iters},
                            {"async", flags.async},
                            {"wrong", m.wrong}};
        std::printf("%s\n", j.dump().c_str());
      }
    } else {
      std::printf(" %12zu %12zu %8s %6s %6s %s %s %s %6ld %s %s %s %6ld %s\n", bytes, s.count,
                  "float", op == Op::kAllReduce || op == Op::kReduceScatter ? "sum" : "none",
                  op == Op::kBroadcast ? "0" : "-1", Fixed(out.time_us, 7).c_str(),
                  Fixed(algbw(out.time_us), 6).c_str(),
                  Fixed(algbw(out.time_us) * s.bus_factor, 6).c_str(), static_cast<long>(out.wrong),
                  Fixed(in.time_us, 7).c_str(), Fixed(algbw(in.time_us), 6).c_str(),
                  Fixed(algbw(in.time_us) * s.bus_factor, 6).c_str(), static_cast<long>(in.wrong),
                  Fixed(in.median_max_us, 10).c_str());
    }
    busbw_total += algbw(out.time_us) * s.bus_factor + algbw(in.time_us) * s.bus_factor;
    busbw_n += 2;
    std::fflush(stdout);
  }
  if (flags.memcpy_ceiling) {
    for (size_t bytes : {max_bytes / 4, max_bytes}) {
      const double gbps = ConcurrentMemcpy(c, bytes);
      if (!leader) continue;
      if (flags.json) {
        std::printf("%s\n", nlohmann::json({{"impl", "memcpy"},
                                            {"ranks", c.size()},
                                            {"bytes", bytes},
                                            {"gbps_per_process", gbps}})
                                .dump()
                                .c_str());
      } else {
        std::printf("# Concurrent memcpy of %zu B on %d processes at once: %.2f GB/s each\n", bytes,
                    c.size(), gbps);
      }
    }
  }
  if (leader && !flags.json) {
    std::printf("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : %.4f\n#\n",
                busbw_n ? busbw_total / busbw_n : 0.0);
  }
  comm->reset();
  Die(dist::Shutdown(), "shutdown");
  return 0;
}
