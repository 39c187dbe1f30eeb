// Collectives as a program uses them, for the multi-process tests: each scenario prints lines
// the tests look for (RESULT ..., COLLECTIVE_RETURNED ..., ERROR ...).

#include "tests/integration/collective_scenarios.h"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "dist/collectives.h"

namespace cohort::testing {
namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

uint64_t Fnv(const void* data, size_t len) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct Checker {
  int failures = 0;
  int checks = 0;
  void Expect(bool ok, const std::string& what) {
    ++checks;
    if (!ok) {
      ++failures;
      Say("ERROR " + what);
    }
  }
  bool Ok(const absl::Status& s, const std::string& what) {
    Expect(s.ok(), absl::StrCat(what, ": ", s.ToString()));
    return s.ok();
  }
};

// The same bits on every process: each publishes its result's hash, and compares with rank 0's.
void ExpectSameOnEveryRank(Checker& c, const std::string& name, const void* data, size_t len) {
  const int rank = dist::ProcessIndex();
  const std::string mine = absl::StrCat(Fnv(data, len));
  c.Ok(dist::KeyValueSet(absl::StrCat("hash/", name, "/", rank), mine), "publish hash");
  absl::StatusOr<std::string> first =
      dist::KeyValueGet(absl::StrCat("hash/", name, "/0"), absl::Seconds(60));
  if (c.Ok(first.status(), "read hash")) {
    c.Expect(*first == mine, absl::StrCat(name, ": rank ", rank, " differs from rank 0"));
  }
}

std::unique_ptr<dist::Communicator> World(Checker& c) {
  absl::StatusOr<std::unique_ptr<dist::Communicator>> comm = dist::Communicator::Create();
  if (!c.Ok(comm.status(), "create communicator")) return nullptr;
  Say(absl::StrCat("COMMUNICATOR ", (*comm)->Describe()));
  return std::move(*comm);
}

// Every op on the world and on a split, with results checked against what every rank can
// compute, and the multihost utilities.
int Collectives() {
  Checker c;
  auto comm = World(c);
  if (!comm) return 3;
  const int p = comm->size(), r = comm->rank();
  for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{1} << 20}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((r + 1) * ((i % 5) + 1));
    c.Ok(comm->AllReduce(x.data(), x.data(), n, dist::DataType::kFloat32, dist::ReduceOp::kSum),
         "all_reduce");
    bool right = true;
    for (size_t i = 0; i < n; ++i)
      right &= x[i] == static_cast<float>(p * (p + 1) / 2 * ((i % 5) + 1));
    c.Expect(right, absl::StrCat("all_reduce of ", n, " floats: wrong result"));
    ExpectSameOnEveryRank(c, absl::StrCat("allreduce", n), x.data(), n * 4);

    std::vector<int64_t> mine(n, r), gathered(n * p, -1);
    c.Ok(comm->AllGather(mine.data(), gathered.data(), n, dist::DataType::kInt64), "all_gather");
    right = true;
    for (size_t i = 0; i < n * p; ++i) right &= gathered[i] == static_cast<int64_t>(i / n);
    c.Expect(right, absl::StrCat("all_gather of ", n, ": wrong result"));

    std::vector<double> blocks(n * p), reduced(n);
    for (size_t i = 0; i < n * p; ++i) blocks[i] = static_cast<double>(i / n + r);
    c.Ok(comm->ReduceScatter(blocks.data(), reduced.data(), n, dist::DataType::kFloat64,
                             dist::ReduceOp::kMax),
         "reduce_scatter");
    right = true;
    for (size_t i = 0; i < n; ++i) right &= reduced[i] == static_cast<double>(r + p - 1);
    c.Expect(right, absl::StrCat("reduce_scatter of ", n, ": wrong result"));

    std::vector<int32_t> b(n, r == p - 1 ? 77 : 0);
    c.Ok(comm->Broadcast(b.data(), b.data(), n, dist::DataType::kInt32, p - 1), "broadcast");
    right = true;
    for (size_t i = 0; i < n; ++i) right &= b[i] == 77;
    c.Expect(right, absl::StrCat("broadcast of ", n, ": wrong result"));

    std::vector<int32_t> to(n * p), from(n * p, -1);
    for (size_t i = 0; i < n * p; ++i) to[i] = static_cast<int32_t>(r * 1000 + i / n);
    c.Ok(comm->AllToAll(to.data(), from.data(), n, dist::DataType::kInt32), "all_to_all");
    right = true;
    for (size_t i = 0; i < n * p; ++i) right &= from[i] == static_cast<int32_t>((i / n) * 1000 + r);
    c.Expect(right, absl::StrCat("all_to_all of ", n, ": wrong result"));
  }
  c.Ok(comm->Barrier(), "barrier");

  // A split into even and odd processes; each half sums its process ids.
  absl::StatusOr<std::unique_ptr<dist::Communicator>> half = comm->Split(r % 2, r);
  if (c.Ok(half.status(), "split") && *half) {
    int64_t v = r, sum = 0;
    c.Ok((*half)->AllReduce(&v, &sum, 1, dist::DataType::kInt64, dist::ReduceOp::kSum),
         "all_reduce on the split");
    int64_t want = 0;
    for (int q = r % 2; q < p; q += 2) want += q;
    c.Expect(sum == want, absl::StrCat("split sum ", sum, " != ", want));
  }

  // Multihost utilities.
  dist::HostArray a =
      dist::HostArray::Of(dist::DataType::kFloat32, {2}, std::vector<float>{float(r), 1.5f});
  absl::StatusOr<dist::HostArray> b = dist::BroadcastOneToAll(*comm, a, p - 1);
  if (c.Ok(b.status(), "broadcast_one_to_all")) {
    float got[2];
    std::memcpy(got, b->bytes.data(), 8);
    c.Expect(got[0] == float(p - 1) && got[1] == 1.5f, "broadcast_one_to_all: wrong values");
  }
  absl::StatusOr<dist::HostArray> stacked = dist::ProcessAllgather(*comm, a);
  if (c.Ok(stacked.status(), "process_allgather")) {
    c.Expect(stacked->shape == std::vector<int64_t>{p, 2}, "process_allgather: wrong shape");
  }
  absl::StatusOr<dist::HostArray> tiled = dist::ProcessAllgather(*comm, a, /*tiled=*/true);
  if (c.Ok(tiled.status(), "process_allgather tiled")) {
    c.Expect(tiled->shape == std::vector<int64_t>{2 * p}, "process_allgather tiled: wrong shape");
  }
  dist::HostArray same =
      dist::HostArray::Of(dist::DataType::kInt32, {3}, std::vector<int32_t>{1, 2, 3});
  c.Ok(dist::AssertEqual(*comm, same, "params"), "assert_equal of equal arrays");
  dist::HostArray differs =
      dist::HostArray::Of(dist::DataType::kInt32, {3}, std::vector<int32_t>{1, 2, r == 1 ? 9 : 3});
  absl::Status s = dist::AssertEqual(*comm, differs, "params diverged.");
  if (r == 1) {
    c.Expect(absl::IsFailedPrecondition(s), "assert_equal: rank 1 must fail");
    Say(absl::StrCat("ASSERT_EQUAL_MESSAGE ", s.message()));
  } else {
    c.Ok(s, "assert_equal on a rank that agrees with rank 0");
  }
  c.Ok(dist::SyncGlobalDevices("checkpoint-1"), "sync_global_devices");
  s = dist::SyncGlobalDevices(r == p - 1 && p > 1 ? "checkpoint-x" : "checkpoint-2");
  if (r == p - 1 && p > 1) {
    c.Expect(absl::IsFailedPrecondition(s), "sync_global_devices: a different name must fail");
    Say(absl::StrCat("SYNC_MISMATCH_MESSAGE ", s.message()));
  } else {
    c.Ok(s, "sync_global_devices on a process that agrees with process 0");
  }

  // The segments are memfds, not files in /dev/shm.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool memfd = false;
  while (std::getline(maps, line))
    memfd |= line.find("memfd:cohort-collectives") != std::string::npos;
  Say(absl::StrCat("SEGMENTS memfd=", memfd ? "yes" : "no"));

  comm.reset();
  c.Ok(dist::Shutdown(), "shutdown");
  Say(absl::StrCat("RESULT rank=", r, " checks=", c.checks, " failures=", c.failures));
  return c.failures == 0 ? 0 : 3;
}

// Says IN_COLLECTIVE, all-reduces `x`, and says how (and after how long) the call returned.
int EnterAllReduce(dist::Communicator& comm, std::vector<float>& x) {
  Say("IN_COLLECTIVE");
  const absl::Time start = absl::Now();
  absl::Status s =
      comm.AllReduce(x.data(), x.data(), x.size(), dist::DataType::kFloat32, dist::ReduceOp::kSum);
  Say(absl::StrCat("COLLECTIVE_RETURNED after ", absl::ToInt64Milliseconds(absl::Now() - start),
                   " ms: ", s.ToString()));
  return s.ok() ? 0 : 5;
}

// Waits for each Work in turn, saying how (and after how long) each ended, then how many failed;
// the exit status.
int WaitForEach(std::vector<dist::Work>& works) {
  const absl::Time start = absl::Now();
  int failed = 0;
  for (dist::Work& w : works) {
    absl::Status s = w.Wait();
    failed += !s.ok();
    Say(absl::StrCat("WORK_RETURNED #", w.sequence(), " after ",
                     absl::ToInt64Milliseconds(absl::Now() - start), " ms: ", s.ToString()));
  }
  Say(absl::StrCat("COLLECTIVE_RETURNED after ", absl::ToInt64Milliseconds(absl::Now() - start),
                   " ms: ", failed, " of ", works.size(), " failed"));
  return failed == 0 ? 0 : 5;
}

// Says IN_COLLECTIVE, starts three asynchronous all-reduces, and with `wait` waits for each,
// saying how (and after how long) each ended; without, it never looks at them again: the job
// must still learn of a timeout.
int EnterAllReduceAsync(dist::Communicator& comm, std::vector<float>& x, bool wait) {
  std::vector<std::vector<float>> bufs(3, x);
  std::vector<dist::Work> works;
  for (auto& b : bufs) {
    absl::StatusOr<dist::Work> w = comm.AllReduceAsync(
        b.data(), b.data(), b.size(), dist::DataType::kFloat32, dist::ReduceOp::kSum);
    if (!w.ok()) {
      Say(absl::StrCat("ENQUEUE_FAILED ", w.status().ToString()));
      return 5;
    }
    works.push_back(*w);
  }
  Say("IN_COLLECTIVE");
  if (!wait) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 4;
  }
  return WaitForEach(works);
}

// `bytes` of device memory from the CUDA runtime, loaded at run time as libdist loads it; nullptr
// (after saying why) without one.
void* DeviceBuffer(size_t bytes) {
  void* cudart = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (cudart == nullptr) cudart = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
  if (cudart == nullptr) {
    Say(absl::StrCat("ERROR no CUDA runtime: ", dlerror()));
    return nullptr;
  }
  using MallocFn = int (*)(void**, size_t);
  using MemsetFn = int (*)(void*, int, size_t);
  auto cuda_malloc = reinterpret_cast<MallocFn>(dlsym(cudart, "cudaMalloc"));
  auto cuda_memset = reinterpret_cast<MemsetFn>(dlsym(cudart, "cudaMemset"));
  void* p = nullptr;
  if (cuda_malloc == nullptr || cuda_memset == nullptr || cuda_malloc(&p, bytes) != 0 ||
      cuda_memset(p, 0, bytes) != 0) {
    Say("ERROR cudaMalloc failed");
    return nullptr;
  }
  return p;
}

// An NCCL communicator of every rank with `count` floats of device memory, after one all-reduce
// that every rank completed. Says the communicator and its pid (for a test's signal); nullopt
// (after saying why) when any of it fails.
struct NcclRank {
  std::unique_ptr<dist::Communicator> comm;
  float* buf = nullptr;
  size_t count = 0;
};
std::optional<NcclRank> NcclWarmedUp(Checker& c, size_t count) {
  dist::CommunicatorOptions options;
  options.backend = dist::Backend::kNccl;
  absl::StatusOr<std::unique_ptr<dist::Communicator>> comm = dist::Communicator::Create(options);
  if (!c.Ok(comm.status(), "create communicator")) return std::nullopt;
  Say(absl::StrCat("COMMUNICATOR ", (*comm)->Describe()));
  Say(absl::StrCat("PID ", getpid()));
  auto* buf = static_cast<float*>(DeviceBuffer(count * sizeof(float)));
  if (buf == nullptr) return std::nullopt;
  if (!c.Ok((*comm)->AllReduce(buf, buf, count, dist::DataType::kFloat32, dist::ReduceOp::kSum),
            "warm-up")) {
    return std::nullopt;
  }
  return NcclRank{*std::move(comm), buf, count};
}

// NCCL: after the warm-up, the last rank stalls while the others enqueue three asynchronous
// all-reduces of device memory and wait for them (a test kills the last rank meanwhile).
int KillNcclAsync() {
  Checker c;
  std::optional<NcclRank> nccl = NcclWarmedUp(c, 1 << 18);
  if (!nccl) return 3;
  const int r = nccl->comm->rank(), p = nccl->comm->size();
  if (r == p - 1) {
    Say("STALLING");
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 4;
  }
  std::vector<dist::Work> works;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<dist::Work> w = nccl->comm->AllReduceAsync(
        nccl->buf, nccl->buf, nccl->count, dist::DataType::kFloat32, dist::ReduceOp::kSum);
    if (!c.Ok(w.status(), "enqueue")) return 5;
    works.push_back(*w);
  }
  Say("IN_COLLECTIVE");
  return WaitForEach(works);
}

// The last rank enters an all-reduce at once, the others a second later: a test stops the last
// one while it waits inside. COHORT_TEST_ALLREDUCE_FLOATS: the all-reduce's size (1 << 16).
int StopInside() {
  Checker c;
  auto comm = World(c);
  if (!comm) return 3;
  const int r = comm->rank(), p = comm->size();
  const char* floats = std::getenv("COHORT_TEST_ALLREDUCE_FLOATS");
  std::vector<float> x(floats != nullptr ? std::strtoul(floats, nullptr, 10) : 1 << 16, 1.0f);
  c.Ok(
      comm->AllReduce(x.data(), x.data(), x.size(), dist::DataType::kFloat32, dist::ReduceOp::kSum),
      "warm-up");
  if (r != p - 1) std::this_thread::sleep_for(std::chrono::seconds(1));
  return EnterAllReduce(*comm, x);
}

// Every rank but the last enters an all-reduce; the last one stalls outside it (a sleep, or the
// test stops or kills it). Prints how the all-reduce ended. `async`: three asynchronous
// all-reduces instead, waited for or not.
int Stall(bool async = false, bool wait = true) {
  Checker c;
  auto comm = World(c);
  if (!comm) return 3;
  const int r = comm->rank(), p = comm->size();
  std::vector<float> x(1 << 16, 1.0f);
  // One collective that everybody completes first, so that the stall is at #2.
  c.Ok(
      comm->AllReduce(x.data(), x.data(), x.size(), dist::DataType::kFloat32, dist::ReduceOp::kSum),
      "warm-up");
  if (r == p - 1) {
    Say("STALLING");
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 4;
  }
  if (async) return EnterAllReduceAsync(*comm, x, /*wait=*/wait);
  return EnterAllReduce(*comm, x);
}

// The last rank calls a different collective.
int Mismatch() {
  Checker c;
  auto comm = World(c);
  if (!comm) return 3;
  const int r = comm->rank(), p = comm->size();
  std::vector<float> x(1000 * p, 1.0f), y(1000 * p);
  absl::Status s = r == p - 1 ? comm->AllGather(x.data(), y.data(), 1000, dist::DataType::kFloat32)
                              : comm->AllReduce(x.data(), x.data(), 1000, dist::DataType::kFloat32,
                                                dist::ReduceOp::kSum);
  Say(absl::StrCat("COLLECTIVE_RETURNED ", s.ToString()));
  // The job fails (cause: collective timeout); the default handler ends the process.
  std::this_thread::sleep_for(std::chrono::seconds(30));
  return 5;
}

// NCCL, as StopInside on device memory: the last rank enters an all-reduce at once (its kernel
// waits on the GPU for the others, its host thread for the kernel), the others a second later;
// a test stops the last one while it waits inside.
int StopInsideNccl() {
  Checker c;
  std::optional<NcclRank> nccl = NcclWarmedUp(c, 1 << 18);
  if (!nccl) return 3;
  if (nccl->comm->rank() != nccl->comm->size() - 1)
    std::this_thread::sleep_for(std::chrono::seconds(1));
  Say("IN_COLLECTIVE");
  const absl::Time start = absl::Now();
  absl::Status s = nccl->comm->AllReduce(nccl->buf, nccl->buf, nccl->count,
                                         dist::DataType::kFloat32, dist::ReduceOp::kSum);
  Say(absl::StrCat("COLLECTIVE_RETURNED after ", absl::ToInt64Milliseconds(absl::Now() - start),
                   " ms: ", s.ToString()));
  return s.ok() ? 0 : 5;
}

}  // namespace

bool IsCollectiveScenario(const std::string& scenario, dist::Options* options) {
  if (scenario == "collective-kill" || scenario == "collective-kill-async" ||
      scenario == "collective-kill-nccl-async") {
    // Handle the failure without exiting, so that the blocked collective's return is seen.
    options->on_peer_failure = [](const dist::PeerFailure& f) {
      Say(absl::StrCat("HANDLED failed=", f.process_id,
                       " cause=", dist::FailureCauseName(f.cause)));
    };
    return true;
  }
  return scenario == "collectives" || scenario == "collective-stall" ||
         scenario == "collective-stall-async" || scenario == "collective-mismatch" ||
         scenario == "collective-stop-inside" || scenario == "collective-stop-inside-nccl";
}

int RunCollectiveScenario(const std::string& scenario) {
  if (scenario == "collectives") return Collectives();
  if (scenario == "collective-stall" || scenario == "collective-kill") return Stall();
  if (scenario == "collective-kill-async") return Stall(/*async=*/true, /*wait=*/true);
  if (scenario == "collective-kill-nccl-async") return KillNcclAsync();
  if (scenario == "collective-stall-async") return Stall(/*async=*/true, /*wait=*/false);
  if (scenario == "collective-mismatch") return Mismatch();
  if (scenario == "collective-stop-inside") return StopInside();
  if (scenario == "collective-stop-inside-nccl") return StopInsideNccl();
  return 2;
}

}  // namespace cohort::testing
