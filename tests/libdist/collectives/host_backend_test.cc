// The host backend's transports (shared memory and TCP on loopback), each rank a thread of this
// process with its own backend: every op x data type x size x rank count, in and out of place,
// against a reference computed here, with the ranks' results compared bit for bit. Then the
// failure paths: a rank that never comes, a rank that calls something else, Abort().

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/hybrid_backend.h"
#include "libdist/src/collectives/reduce.h"
#include "libdist/src/collectives/shm_backend.h"
#include "libdist/src/collectives/tcp_backend.h"

namespace dist::internal {
namespace {

using ::testing::HasSubstr;

enum class Transport { kShm, kTcp };

RankNames Names(int p) {
  RankNames n;
  for (int r = 0; r < p; ++r) n.processes.push_back(r);
  return n;
}

std::vector<std::unique_ptr<CollectiveBackend>> MakeGroup(Transport transport, int p) {
  std::vector<std::unique_ptr<CollectiveBackend>> group(p);
  if (transport == Transport::kShm) {
    std::vector<SharedSegment> owners;
    for (int r = 0; r < p; ++r)
      owners.push_back(*SharedSegment::Create(ShmBackend::SegmentBytes()));
    for (int r = 0; r < p; ++r) {
      std::vector<SharedSegment> segs;
      for (int q = 0; q < p; ++q) {
        segs.push_back(*SharedSegment::Map(dup(owners[q].fd()), ShmBackend::SegmentBytes()));
      }
      group[r] = std::make_unique<ShmBackend>(r, Names(p), std::move(segs));
    }
    return group;
  }
  std::vector<TcpListener> listeners;
  std::vector<std::string> addresses;
  for (int r = 0; r < p; ++r) {
    listeners.push_back(*TcpListener::Listen("127.0.0.1"));
    addresses.push_back(listeners.back().address());
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto b = TcpBackend::Connect(r, Names(p), std::move(listeners[r]), addresses, 42,
                                   absl::Now() + absl::Seconds(30));
      ASSERT_TRUE(b.ok()) << b.status();
      group[r] = std::move(*b);
    });
  }
  for (auto& t : threads) t.join();
  return group;
}

// `hosts` hosts of `local` ranks each (rank = host * local + local rank): shared memory within
// a host, TCP between (rails of equal local rank, and every pair for the other ops).
std::vector<std::unique_ptr<CollectiveBackend>> MakeHybridGroup(int hosts, int local) {
  const int p = hosts * local;
  auto flat = MakeGroup(Transport::kTcp, p);
  std::vector<std::unique_ptr<CollectiveBackend>> group(p);
  for (int h = 0; h < hosts; ++h) {
    std::vector<SharedSegment> owners;
    for (int l = 0; l < local; ++l)
      owners.push_back(*SharedSegment::Create(ShmBackend::SegmentBytes()));
    std::vector<int> members;
    for (int l = 0; l < local; ++l) members.push_back(h * local + l);
    for (int l = 0; l < local; ++l) {
      const int r = h * local + l;
      std::vector<SharedSegment> segs;
      for (int q = 0; q < local; ++q) {
        segs.push_back(*SharedSegment::Map(dup(owners[q].fd()), ShmBackend::SegmentBytes()));
      }
      std::vector<int> rail;
      for (int g = 0; g < hosts; ++g) rail.push_back(g * local + l);
      std::unique_ptr<TcpBackend> tcp(static_cast<TcpBackend*>(flat[r].release()));
      group[r] =
          HybridBackend::Assemble(r, members, rail, std::move(segs), Names(p), std::move(tcp));
    }
  }
  return group;
}

// Small integers, so that every order of summation (and products of +-1, +-2) is exact in every
// type: the reference does not depend on the backend's order, only the rounding of avg does.
double Input(CollectiveKind kind, ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd &&
      (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter)) {
    static const double kFactors[] = {-2, -1, 1, 2, 1};
    return kFactors[(rank * 3 + i) % 5];
  }
  return static_cast<double>(static_cast<int64_t>((rank * 31 + i * 7) % 13) - 6);
}

void Store(DataType type, void* base, size_t i, double v) {
  switch (type) {
    case DataType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(base)[i] = v;
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = Float32ToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = Float32ToFloat16(static_cast<float>(v));
      break;
  }
}

// The reduction of exact small integers, rounded as the backend must: sum, then the division of
// avg in the accumulation type, then one rounding to the type.
void StoreReduced(DataType type, ReduceOp op, void* base, size_t i, const std::vector<double>& xs) {
  double acc = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += xs[k];
        break;
      case ReduceOp::kProd:
        acc *= xs[k];
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, xs[k]);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, xs[k]);
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    const int p = static_cast<int>(xs.size());
    switch (type) {
      case DataType::kFloat64:
        acc = acc / p;
        break;
      case DataType::kInt32:
      case DataType::kInt64:
        acc = static_cast<double>(static_cast<int64_t>(acc) / p);
        break;
      default:
        acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(p));
        break;
    }
  }
  Store(type, base, i, acc);
}

struct Case {
  CollectiveKind kind;
  DataType type;
  ReduceOp op;
  size_t count;
  bool in_place;
  int root;
};

std::string Describe(const Case& c, int p, Transport t) {
  OpSignature sig{1, c.kind, c.type, c.op, c.root, c.count};
  return absl::StrCat(sig.ToString(), c.in_place ? " in place" : " out of place", " on ", p,
                      " ranks over ", t == Transport::kShm ? "shm" : "tcp");
}

// Runs one case on every rank at once; checks each rank against the reference and all ranks
// against each other.
void RunCase(std::vector<std::unique_ptr<CollectiveBackend>>& group, const Case& c,
             Transport transport, uint64_t seq) {
  const int p = static_cast<int>(group.size());
  const size_t es = DataTypeSize(c.type);
  size_t send_elems = c.count, recv_elems = c.count;
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      recv_elems = c.count * p;
      break;
    case CollectiveKind::kReduceScatter:
      send_elems = c.count * p;
      break;
    case CollectiveKind::kAllToAll:
      send_elems = recv_elems = c.count * p;
      break;
    default:
      break;
  }
  // Buffers: in place, recv holds send (all-gather: at its block; reduce-scatter: send is the
  // whole buffer and recv points into it).
  std::vector<std::vector<uint8_t>> storage(p), outside(p);
  std::vector<const void*> send(p);
  std::vector<void*> recv(p);
  for (int r = 0; r < p; ++r) {
    std::vector<uint8_t> input(send_elems * es + 1);
    for (size_t i = 0; i < send_elems; ++i)
      Store(c.type, input.data(), i, Input(c.kind, c.op, r, i));
    if (!c.in_place) {
      outside[r] = input;
      storage[r].assign(recv_elems * es + 1, 0xAB);
      send[r] = outside[r].data();
      recv[r] = storage[r].data();
    } else if (c.kind == CollectiveKind::kAllGather) {
      storage[r].assign(recv_elems * es + 1, 0xAB);
      std::memcpy(storage[r].data() + r * c.count * es, input.data(), c.count * es);
      send[r] = storage[r].data() + r * c.count * es;
      recv[r] = storage[r].data();
    } else if (c.kind == CollectiveKind::kReduceScatter) {
      storage[r] = input;
      send[r] = storage[r].data();
      recv[r] = storage[r].data() + r * c.count * es;
    } else {
      storage[r] = input;
      storage[r].resize(std::max(send_elems, recv_elems) * es + 1);
      send[r] = recv[r] = storage[r].data();
    }
  }
  std::vector<absl::Status> status(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      CollectiveCall call;
      call.sig = OpSignature{
          seq, c.kind, c.type, c.op, c.kind == CollectiveKind::kBroadcast ? c.root : -1, c.count};
      call.send = send[r];
      call.recv = recv[r];
      call.deadline = absl::Now() + absl::Seconds(60);
      status[r] = group[r]->Run(call);
    });
  }
  for (auto& t : threads) t.join();
  const std::string what = Describe(c, p, transport);
  for (int r = 0; r < p; ++r)
    ASSERT_TRUE(status[r].ok()) << what << ": rank " << r << ": " << status[r];

  // The reference.
  std::vector<uint8_t> expected(recv_elems * es);
  std::vector<double> xs(p);
  for (size_t i = 0; i < c.count; ++i) {
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
        for (int r = 0; r < p; ++r) xs[r] = Input(c.kind, c.op, r, i);
        StoreReduced(c.type, c.op, expected.data(), i, xs);
        break;
      case CollectiveKind::kBroadcast:
        Store(c.type, expected.data(), i, Input(c.kind, c.op, c.root, i));
        break;
      case CollectiveKind::kAllGather:
        for (int r = 0; r < p; ++r)
          Store(c.type, expected.data(), r * c.count + i, Input(c.kind, c.op, r, i));
        break;
      default:
        break;
    }
  }
  for (int r = 0; r < p; ++r) {
    std::vector<uint8_t> want = expected;
    if (c.kind == CollectiveKind::kReduceScatter) {
      want.assign(c.count * es, 0);
      for (size_t i = 0; i < c.count; ++i) {
        for (int q = 0; q < p; ++q) xs[q] = Input(c.kind, c.op, q, r * c.count + i);
        StoreReduced(c.type, c.op, want.data(), i, xs);
      }
    } else if (c.kind == CollectiveKind::kAllToAll) {
      want.assign(c.count * p * es, 0);
      for (int q = 0; q < p; ++q) {
        for (size_t i = 0; i < c.count; ++i)
          Store(c.type, want.data(), q * c.count + i, Input(c.kind, c.op, q, r * c.count + i));
      }
    }
    const auto* got = static_cast<const uint8_t*>(recv[r]);
    const size_t n = want.size();
    ASSERT_EQ(std::memcmp(got, want.data(), n), 0)
        << what << ": rank " << r << " differs from the reference";
    if (!c.in_place) {
      EXPECT_EQ(storage[r][recv_elems * es], 0xAB) << what << ": wrote past the end of recv";
    }
    if (r > 0 && c.kind != CollectiveKind::kReduceScatter && c.kind != CollectiveKind::kAllToAll) {
      ASSERT_EQ(std::memcmp(got, recv[0], n), 0)
          << what << ": rank " << r << " differs from rank 0";
    }
  }
}

class HostBackendTest : public ::testing::TestWithParam<std::tuple<Transport, int>> {};

TEST_P(HostBackendTest, EveryOpTypeAndSize_MatchesReferenceOnEveryRank) {
  const auto [transport, p] = GetParam();
  auto group = MakeGroup(transport, p);
  ASSERT_EQ(group.size(), static_cast<size_t>(p));
  uint64_t seq = 0;
  const std::vector<size_t> sizes = {0, 1, 7, 1001, 70001};
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64,  DataType::kInt32,
                            DataType::kInt64,   DataType::kBFloat16, DataType::kFloat16};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kAvg};
  for (DataType type : types) {
    for (size_t count : sizes) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : ops) {
          RunCase(group, {CollectiveKind::kAllReduce, type, op, count, in_place, -1}, transport,
                  ++seq);
          RunCase(group, {CollectiveKind::kReduceScatter, type, op, count, in_place, -1}, transport,
                  ++seq);
          if (HasFatalFailure()) return;
        }
        RunCase(group, {CollectiveKind::kAllGather, type, ReduceOp::kSum, count, in_place, -1},
                transport, ++seq);
        RunCase(group, {CollectiveKind::kBroadcast, type, ReduceOp::kSum, count, in_place, p - 1},
                transport, ++seq);
        RunCase(group, {CollectiveKind::kBroadcast, type, ReduceOp::kSum, count, in_place, 0},
                transport, ++seq);
        if (!in_place) {
          RunCase(group, {CollectiveKind::kAllToAll, type, ReduceOp::kSum, count, false, -1},
                  transport, ++seq);
        }
        if (HasFatalFailure()) return;
      }
    }
  }
  RunCase(group, {CollectiveKind::kBarrier, DataType::kFloat32, ReduceOp::kSum, 0, false, -1},
          transport, ++seq);
}

TEST_P(HostBackendTest, SixtyFourMebibytes_EveryOpAndEveryTypeOfAllReduce) {
  const auto [transport, p] = GetParam();
  auto group = MakeGroup(transport, p);
  uint64_t seq = 0;
  if (p > 3) {
    // 5 and 8 ranks on 2 cores: the all-reduce and the all-gather (the full set runs on 1-3).
    const size_t n = (64u << 20) / 4;
    RunCase(group, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, n, true, -1},
            transport, ++seq);
    RunCase(group,
            {CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, n / p, false, -1},
            transport, ++seq);
    return;
  }
  // Every op at 64 MiB per rank (float32), in and out of place ...
  const size_t n = (64u << 20) / 4;
  for (bool in_place : {true, false}) {
    RunCase(group,
            {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, n, in_place, -1},
            transport, ++seq);
    RunCase(group,
            {CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, n, in_place, p - 1},
            transport, ++seq);
    // Per-rank blocks of the gathering ops: 64 MiB in all (not divisible by every P).
    RunCase(group,
            {CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, n / p, in_place, -1},
            transport, ++seq);
    RunCase(
        group,
        {CollectiveKind::kReduceScatter, DataType::kFloat32, ReduceOp::kMax, n / p, in_place, -1},
        transport, ++seq);
    if (!in_place) {
      RunCase(group,
              {CollectiveKind::kAllToAll, DataType::kFloat32, ReduceOp::kSum, n / p, false, -1},
              transport, ++seq);
    }
    if (HasFatalFailure()) return;
  }
  // ... and the all-reduce of 64 MiB in every other type.
  for (DataType type : {DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kBFloat16,
                        DataType::kFloat16}) {
    const size_t count = (64u << 20) / DataTypeSize(type);
    RunCase(group, {CollectiveKind::kAllReduce, type, ReduceOp::kAvg, count, false, -1}, transport,
            ++seq);
    if (HasFatalFailure()) return;
  }
}

// The ranks run free, never joined between calls: a rank may start call k + 1 while a peer still
// reads call k, and single-phase calls (which put their chunks in the in- and out-slots in turn)
// alternate with two-phase all-reduces and multi-chunk gathers that use both slots of a chunk.
// Every result is checked as it comes; a slot rewritten while a peer still reads it shows here.
TEST_P(HostBackendTest, MixedSizesBackToBack_EveryResultExact) {
  // Not a structured binding: the threads below capture p (clang 14 cannot capture bindings).
  const auto transport = std::get<0>(GetParam());
  const int p = std::get<1>(GetParam());
  if (p == 1 || p > 3) GTEST_SKIP() << "2 and 3 ranks cover both single- and two-phase steps";
  auto group = MakeGroup(transport, p);
  // Elements (float32): single-phase and two-phase all-reduces, and a gather of many chunks.
  const std::vector<size_t> counts = {256, 75'000, 16'384, 262'144, 2'048, 65'537, 300'000};
  constexpr int kCalls = 120;
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buf, gathered;
      for (int k = 0; k < kCalls && errors[r].empty(); ++k) {
        const size_t n = counts[k % counts.size()];
        const bool gather = k % 5 == 4;
        CollectiveCall call;
        call.deadline = absl::Now() + absl::Seconds(60);
        // Small integers, different per rank, call and element: float sums are exact.
        auto input = [&](int q, size_t i) { return static_cast<float>((q + 1) * (k + 1) + i % 7); };
        if (gather) {
          const size_t per_rank = n / 4;
          buf.resize(per_rank);
          gathered.assign(per_rank * p, -1.0f);
          for (size_t i = 0; i < per_rank; ++i) buf[i] = input(r, i);
          call.sig = OpSignature{static_cast<uint64_t>(k + 1),
                                 CollectiveKind::kAllGather,
                                 DataType::kFloat32,
                                 ReduceOp::kSum,
                                 -1,
                                 per_rank};
          call.send = buf.data();
          call.recv = gathered.data();
          if (absl::Status s = group[r]->Run(call); !s.ok()) {
            errors[r] = absl::StrCat("call ", k, ": ", s.ToString());
            break;
          }
          for (int q = 0; q < p && errors[r].empty(); ++q) {
            for (size_t i = 0; i < per_rank; ++i) {
              if (gathered[q * per_rank + i] != input(q, i)) {
                errors[r] = absl::StrCat("all_gather call ", k, " of ", per_rank, ": block ", q,
                                         " element ", i, " is ", gathered[q * per_rank + i]);
                break;
              }
            }
          }
          continue;
        }
        buf.resize(n);
        for (size_t i = 0; i < n; ++i) buf[i] = input(r, i);
        call.sig = OpSignature{static_cast<uint64_t>(k + 1),
                               CollectiveKind::kAllReduce,
                               DataType::kFloat32,
                               ReduceOp::kSum,
                               -1,
                               n};
        call.send = call.recv = buf.data();
        if (absl::Status s = group[r]->Run(call); !s.ok()) {
          errors[r] = absl::StrCat("call ", k, ": ", s.ToString());
          break;
        }
        for (size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < p; ++q) want += input(q, i);
          if (buf[i] != want) {
            errors[r] = absl::StrCat("all_reduce call ", k, " of ", n, ": element ", i, " is ",
                                     buf[i], ", want ", want);
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(RanksAndTransports, HostBackendTest,
                         ::testing::Combine(::testing::Values(Transport::kShm, Transport::kTcp),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) == Transport::kShm ? "Shm" : "Tcp",
                               std::get<1>(info.param), "Ranks");
                         });

class HybridBackendTest : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(HybridBackendTest, EveryOpTypeAndSize_MatchesReferenceOnEveryRank) {
  const auto [hosts, local] = GetParam();
  const int p = hosts * local;
  auto group = MakeHybridGroup(hosts, local);
  uint64_t seq = 0;
  for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64,
                        DataType::kBFloat16, DataType::kFloat16}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{70001}}) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op :
             {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
          RunCase(group, {CollectiveKind::kAllReduce, type, op, count, in_place, -1},
                  Transport::kTcp, ++seq);
          if (HasFatalFailure()) return;
        }
        RunCase(group, {CollectiveKind::kAllGather, type, ReduceOp::kSum, count, in_place, -1},
                Transport::kTcp, ++seq);
        RunCase(group, {CollectiveKind::kBroadcast, type, ReduceOp::kSum, count, in_place, p - 1},
                Transport::kTcp, ++seq);
        RunCase(group, {CollectiveKind::kReduceScatter, type, ReduceOp::kSum, count, in_place, -1},
                Transport::kTcp, ++seq);
        if (HasFatalFailure()) return;
      }
    }
  }
  RunCase(
      group,
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, (64u << 20) / 4, true, -1},
      Transport::kTcp, ++seq);
  RunCase(group, {CollectiveKind::kBarrier, DataType::kFloat32, ReduceOp::kSum, 0, false, -1},
          Transport::kTcp, ++seq);
}

INSTANTIATE_TEST_SUITE_P(HostsTimesRanks, HybridBackendTest,
                         ::testing::Values(std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.first, "Hosts", info.param.second,
                                               "RanksEach");
                         });

class HostBackendFailureTest : public ::testing::TestWithParam<Transport> {};

TEST_P(HostBackendFailureTest, RankThatNeverCalls_DeadlineNamesIt) {
  auto group = MakeGroup(GetParam(), 3);
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> buf(1000, 1.0f);
      CollectiveCall call;
      call.sig =
          OpSignature{1, CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1, 1000};
      call.send = call.recv = buf.data();
      call.deadline = absl::Now() + absl::Milliseconds(300);
      status[r] = group[r]->Run(call);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[r])) << status[r];
    EXPECT_THAT(status[r].message(), HasSubstr("all_reduce #1"));
  }
  // Shared memory sees every rank's progress; a TCP ring only its neighbour's (rank 0 waits on
  // rank 2, rank 1 on rank 0: the watchdog's cross-rank view names the culprit there).
  EXPECT_THAT(status[0].message(), HasSubstr("process 2"));
  if (GetParam() == Transport::kShm) {
    EXPECT_THAT(status[1].message(), HasSubstr("process 2 has not entered it"));
  }
}

TEST_P(HostBackendFailureTest, DifferentCalls_MismatchNamesBoth) {
  auto group = MakeGroup(GetParam(), 2);
  std::vector<absl::Status> status(2);
  std::thread t0([&] {
    std::vector<float> buf(10, 1.0f);
    CollectiveCall call;
    call.sig =
        OpSignature{1, CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1, 10};
    call.send = call.recv = buf.data();
    call.deadline = absl::Now() + absl::Seconds(5);
    status[0] = group[0]->Run(call);
  });
  std::thread t1([&] {
    std::vector<float> buf(40, 1.0f);
    CollectiveCall call;
    call.sig =
        OpSignature{1, CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, -1, 20};
    call.send = buf.data();
    call.recv = buf.data();
    call.deadline = absl::Now() + absl::Seconds(5);
    status[1] = group[1]->Run(call);
  });
  t0.join();
  t1.join();
  // At least the rank that saw the other's header names both calls; with shared memory both do.
  int named = 0;
  for (int r = 0; r < 2; ++r) {
    if (absl::IsFailedPrecondition(status[r])) {
      ++named;
      EXPECT_THAT(status[r].message(), HasSubstr("all_reduce #1 (float32 sum, 10 elements)"));
      EXPECT_THAT(status[r].message(), HasSubstr("all_gather #1 (float32, 20 elements)"));
    }
  }
  EXPECT_GE(named, 1) << status[0] << " / " << status[1];
}

TEST_P(HostBackendFailureTest, AbortFromAnotherThread_BlockedCallReturnsAbortedAtOnce) {
  auto group = MakeGroup(GetParam(), 2);
  absl::Status status;
  absl::Notification returned;
  std::thread t([&] {
    std::vector<float> buf(1000, 1.0f);
    CollectiveCall call;
    call.sig =
        OpSignature{1, CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, -1, 1000};
    call.send = call.recv = buf.data();
    call.deadline = absl::Now() + absl::Seconds(60);
    status = group[0]->Run(call);
    returned.Notify();
  });
  EXPECT_FALSE(returned.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  const absl::Time aborted_at = absl::Now();
  group[0]->Abort();
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(1)));
  EXPECT_LT(absl::Now() - aborted_at, absl::Seconds(1));
  t.join();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
}

INSTANTIATE_TEST_SUITE_P(Transports, HostBackendFailureTest,
                         ::testing::Values(Transport::kShm, Transport::kTcp), [](const auto& info) {
                           return std::string(info.param == Transport::kShm ? "Shm" : "Tcp");
                         });

TEST(ReduceTest, HalfConversions_RoundToNearestEven) {
  EXPECT_EQ(Float32ToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bfloat16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(Float32ToBFloat16(1.00390625f), 0x3f80);
  EXPECT_EQ(Float32ToBFloat16(1.01171875f), 0x3f82);  // 1 + 3*2^-8: ties to even (up).
  EXPECT_TRUE(std::isnan(BFloat16ToFloat32(Float32ToBFloat16(NAN))));
  EXPECT_EQ(Float32ToFloat16(1.0f), 0x3c00);
  EXPECT_EQ(Float32ToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(Float32ToFloat16(65520.0f), 0x7c00);  // Rounds to infinity.
  EXPECT_EQ(Float32ToFloat16(-2.0f), 0xc000);
  EXPECT_EQ(Float16ToFloat32(0x0001), std::ldexp(1.0f, -24));  // Smallest subnormal.
  EXPECT_EQ(Float32ToFloat16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Float32ToFloat16(std::ldexp(1.0f, -26)), 0x0000);  // Below half the smallest.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    ASSERT_EQ(Float32ToFloat16(Float16ToFloat32(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(ReduceTest, SixteenBitTypes_AccumulateInFloat32AndRoundOnce) {
  // 256 + 1 + 1 in bfloat16 steps would stay 256 (257 is not representable); in float32 it is
  // 258, which bfloat16 represents.
  const uint16_t a = Float32ToBFloat16(256.0f), b = Float32ToBFloat16(1.0f);
  const void* inputs[3] = {&a, &b, &b};
  uint16_t out = 0;
  ReduceInto(DataType::kBFloat16, ReduceOp::kSum, inputs, 3, &out, 1, 3);
  EXPECT_EQ(BFloat16ToFloat32(out), 258.0f);
}

TEST(ReduceTest, IntegerAvg_TruncatesTowardZero) {
  const int32_t a = -7, b = 0;
  const void* inputs[2] = {&a, &b};
  int32_t out = 0;
  ReduceInto(DataType::kInt32, ReduceOp::kAvg, inputs, 2, &out, 1, 2);
  EXPECT_EQ(out, -3);
}

}  // namespace
}  // namespace dist::internal
