// allreduce-floor: how fast two processes on this machine can all-reduce through shared memory.
//
//   allreduce-floor [--sizes 64K,256K,1M] [--algorithms oneshot,...] [--iters 2000] [--passes 5]
//                   [--json]
//
// A lower bound for collective-bench's P = 2 float32 sum all-reduce, in place, with everything
// but the data movement taken away: no communicator, no signatures, no deadlines, no futex. Two
// processes (fork), pinned to CPUs 0 and 1 as MPI's default binding places two ranks, spin on
// counters in one shared mapping. Each algorithm is a way the data could move:
//
//   oneshot    copy the input into this rank's shared slot, then sum it with the peer's slot
//              (what libdist and Intel MPI do at this size);
//   ring       the same, the slot rotating over 8 (so a slot is rewritten after the peer's copy
//              of it has aged out of its cache);
//   pipelined  the same in 64 KiB blocks, each posted as soon as it is copied, the peer summing
//              block k while copying block k + 1;
//   twophase   reduce-scatter then all-gather: each rank posts the half its peer sums, sums its
//              own half into its buffer and its out-slot in one pass, then copies the peer's
//              summed half (slots alternating between two sets);
//   nt         oneshot, the copy done with non-temporal stores (no read for ownership);
//   cma        no copy into shared memory: each rank reads the half it sums straight out of the
//              peer's buffer (process_vm_readv), sums it in place, then reads the peer's summed
//              half the same way (three counters per call instead of two).
//
// Prints, per size and algorithm, the median and the worst of --passes passes (each the mean of
// --iters calls after a quarter as many warm-up calls), as a table or one JSON object per line.
// docs/benchmarks.md compares it with collective-bench and Intel MPI.
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

constexpr int kRingSlots = 8;
constexpr size_t kBlockBytes = 64 * 1024;

struct alignas(64) Counter {
  std::atomic<uint64_t> value{0};
};

// The head of each rank's part of the mapping.
struct Header {
  Counter posted;    // oneshot/ring/nt: calls posted; pipelined: blocks posted; cma: calls entered
  Counter consumed;  // calls for which this rank is done reading the peer's slot / summed half
  Counter finished;  // cma: calls whose peer's summed half this rank has read
  Counter ready;     // 1 once pid and buffer are written
  alignas(64) pid_t pid = 0;
  float* buffer = nullptr;
};

struct Shared {
  Header* header[2];
  float* slots[2];  // kRingSlots slots of the largest size each
};

void Pause() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

void WaitFor(const Counter& c, uint64_t target) {
  while (c.value.load(std::memory_order_acquire) < target) Pause();
}

void Post(Counter& c, uint64_t v) { c.value.store(v, std::memory_order_release); }

void Sum(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void CopyNonTemporal(float* dst, const float* src, size_t n) {
#if defined(__x86_64__)
  for (size_t i = 0; i < n; i += 4) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm_load_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  _mm_sfence();
#else
  std::memcpy(dst, src, n * sizeof(float));
#endif
}

bool ReadPeer(pid_t pid, float* local, const float* remote, size_t n) {
  iovec l{local, n * sizeof(float)};
  iovec r{const_cast<float*>(remote), n * sizeof(float)};
  return process_vm_readv(pid, &l, 1, &r, 1, 0) == static_cast<ssize_t>(n * sizeof(float));
}

// One all-reduce of `n` floats in place in `buf`, call number `call` (from 1).
bool AllReduce(const std::string& algo, Shared& s, int me, uint64_t call, float* buf,
               float* scratch, size_t n, size_t slot_floats) {
  const int peer = 1 - me;
  Header& mine = *s.header[me];
  Header& theirs = *s.header[peer];
  if (algo == "cma") {
    const size_t half = n / 2;
    const size_t my_begin = me * half;
    const size_t their_begin = peer * half;
    Post(mine.posted, call);
    WaitFor(theirs.posted, call);
    if (!ReadPeer(theirs.pid, scratch, theirs.buffer + my_begin, half)) return false;
    Sum(buf + my_begin, scratch, half);
    Post(mine.consumed, call);
    WaitFor(theirs.consumed, call);
    if (!ReadPeer(theirs.pid, buf + their_begin, theirs.buffer + their_begin, half)) return false;
    Post(mine.finished, call);
    WaitFor(theirs.finished, call);
    return true;
  }
  if (algo == "twophase") {
    // Reduce-scatter, then all-gather: each rank sums its half (writing it to its buffer and
    // to its out-slot in one pass) and copies the peer's summed half.
    const size_t half = n / 2;
    const size_t mine_at = me * half, theirs_at = peer * half;
    const size_t len_mine = me == 0 ? half : n - half, len_theirs = n - len_mine;
    const size_t slot = call % 2;
    float* in_out = s.slots[me] + 2 * slot * slot_floats;  // what the peer sums
    float* sum_out = in_out + slot_floats;                 // this rank's summed half
    const float* in_peer = s.slots[peer] + 2 * slot * slot_floats;
    const float* sum_peer = in_peer + slot_floats;
    WaitFor(theirs.consumed, call - 1);
    std::memcpy(in_out, buf + theirs_at, len_theirs * sizeof(float));
    Post(mine.posted, call);
    WaitFor(theirs.posted, call);
    float* __restrict b = buf + mine_at;
    for (size_t i = 0; i < len_mine; ++i) sum_out[i] = b[i] = b[i] + in_peer[i];
    Post(mine.finished, call);
    WaitFor(theirs.finished, call);
    std::memcpy(buf + theirs_at, sum_peer, len_theirs * sizeof(float));
    Post(mine.consumed, call);
    return true;
  }
  const size_t slot = algo == "ring" ? call % kRingSlots : 0;
  float* out = s.slots[me] + slot * slot_floats;
  const float* in = s.slots[peer] + slot * slot_floats;
  WaitFor(theirs.consumed, call - 1);  // the peer is done with this rank's slot
  if (algo == "pipelined") {
    const size_t block = std::min(n, kBlockBytes / sizeof(float));
    const size_t blocks = (n + block - 1) / block;
    const uint64_t base = (call - 1) * blocks;
    for (size_t k = 0; k <= blocks; ++k) {
      if (k < blocks) {
        const size_t len = std::min(block, n - k * block);
        std::memcpy(out + k * block, buf + k * block, len * sizeof(float));
        Post(mine.posted, base + k + 1);
      }
      if (k > 0) {
        const size_t j = k - 1;
        WaitFor(theirs.posted, base + j + 1);
        Sum(buf + j * block, in + j * block, std::min(block, n - j * block));
      }
    }
  } else {
    if (algo == "nt") {
      CopyNonTemporal(out, buf, n);
    } else {
      std::memcpy(out, buf, n * sizeof(float));
    }
    Post(mine.posted, call);
    WaitFor(theirs.posted, call);
    Sum(buf, in, n);
  }
  Post(mine.consumed, call);
  return true;
}

void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: a 1-CPU machine runs both on CPU 0
}

size_t ParseSize(const std::string& text) {
  if (text.empty() || text[0] < '0' || text[0] > '9') {
    throw std::invalid_argument("'" + text + "' is not a size (use a byte count, or K or M: 64K)");
  }
  size_t end = 0;
  size_t value = std::stoul(text, &end);
  const std::string unit = text.substr(end);
  if (unit == "K") return value << 10;
  if (unit == "M") return value << 20;
  if (unit.empty()) return value;
  throw std::invalid_argument("unknown unit '" + unit + "' in '" + text +
                              "' (use a byte count, or K or M)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The floor for a two-process shared-memory all-reduce on this machine"};
  std::string sizes_text = "64K,256K,1M";
  std::string algos_text = "oneshot,ring,pipelined,twophase,nt,cma";
  int iters = 2000;
  int passes = 5;
  bool json = false;
  app.add_option("--sizes", sizes_text, "comma-separated message sizes (K, M suffixes)");
  app.add_option("--algorithms", algos_text,
                 "comma-separated: oneshot,ring,pipelined,twophase,nt,cma");
  app.add_option("--iters", iters, "timed calls per pass")->check(CLI::PositiveNumber);
  app.add_option("--passes", passes, "passes per size and algorithm")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "one JSON object per size and algorithm");
  CLI11_PARSE(app, argc, argv);

  std::vector<size_t> sizes;
  try {
    for (const auto& t : CLI::detail::split(sizes_text, ',')) sizes.push_back(ParseSize(t));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce-floor: --sizes '%s': %s\n", sizes_text.c_str(), e.what());
    return 2;
  }
  const std::vector<std::string> algos = CLI::detail::split(algos_text, ',');
  for (const auto& a : algos) {
    if (a != "oneshot" && a != "ring" && a != "pipelined" && a != "nt" && a != "cma" &&
        a != "twophase") {
      std::fprintf(stderr,
                   "allreduce-floor: unknown algorithm '%s' (one of oneshot, ring, "
                   "pipelined, twophase, nt, cma)\n",
                   a.c_str());
      return 2;
    }
  }
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const size_t slot_floats = (max_bytes + 4095) / 4096 * 1024;
  const size_t part = 4096 + kRingSlots * slot_floats * sizeof(float);
  if (!json)
    std::printf("%10s %10s %12s %12s %12s\n", "size", "algorithm", "median_us", "worst_us",
                "busbw_GB/s");
  for (size_t bytes : sizes) {
    for (const std::string& algo : algos) {
      std::vector<double> pass_us;
      for (int pass = 0; pass < passes; ++pass) {
        void* map =
            mmap(nullptr, 2 * part, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (map == MAP_FAILED) {
          std::perror("allreduce-floor: mmap");
          return 1;
        }
        Shared s;
        for (int r = 0; r < 2; ++r) {
          char* base = static_cast<char*>(map) + r * part;
          s.header[r] = new (base) Header();
          s.slots[r] = reinterpret_cast<float*>(base + 4096);
        }
        auto* result = static_cast<std::atomic<double>*>(
            mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
        const pid_t child = fork();
        const int me = child == 0 ? 1 : 0;
        Pin(me);
        const size_t n = bytes / sizeof(float);
        std::vector<float> buf(n, 1e-9f), scratch(n, 0.0f);
        s.header[me]->buffer = buf.data();
        s.header[me]->pid = getpid();
        Post(s.header[me]->ready, 1);
        WaitFor(s.header[1 - me]->ready, 1);
        bool ok = true;
        const int warmup = iters / 4;
        absl::Time start;
        for (int i = 1; ok && i <= warmup + iters; ++i) {
          if (i == warmup + 1) start = absl::Now();
          ok = AllReduce(algo, s, me, i, buf.data(), scratch.data(), n, slot_floats);
        }
        const double us = absl::ToDoubleMicroseconds(absl::Now() - start) / iters;
        if (!ok) {
          std::fprintf(stderr,
                       "allreduce-floor: %s: process_vm_readv: %s (it needs ptrace "
                       "permission over the peer: the same user and yama ptrace_scope 0)\n",
                       algo.c_str(), std::strerror(errno));
        }
        if (child == 0) {
          result->store(ok ? us : -1.0);
          _exit(ok ? 0 : 1);
        }
        int status = 0;
        waitpid(child, &status, 0);
        const double peer_us = result->load();
        munmap(result, 4096);
        munmap(map, 2 * part);
        if (!ok || peer_us < 0) return 1;
        pass_us.push_back(std::max(us, peer_us));
      }
      std::sort(pass_us.begin(), pass_us.end());
      const double median = pass_us[pass_us.size() / 2];
      const double worst = pass_us.back();
      const double busbw = bytes / median / 1e3;  // P = 2: busbw = algbw
      if (json) {
        std::printf("%s\n", nlohmann::json{{"workload", "allreduce-floor"},
                                           {"bytes", bytes},
                                           {"algorithm", algo},
                                           {"passes", passes},
                                           {"iters", iters},
                                           {"median_us", median},
                                           {"worst_us", worst},
                                           {"busbw_gbps", busbw}}
                                .dump()
                                .c_str());
      } else {
        std::printf("%10zu %10s %12.2f %12.2f %12.2f\n", bytes, algo.c_str(), median, worst, busbw);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
