#pragma once

// What one collective call is, as the communicator hands it to a backend, and the interface the
// backends (host: shared memory or TCP; NCCL) implement.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "dist/collectives.h"

namespace dist::internal {

enum class CollectiveKind : uint32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kBarrier,
};
const char* CollectiveKindName(CollectiveKind kind);  // "all_reduce", ...

// Everything the ranks must agree on for one call. Sent along with the data (a 32-byte header)
// so that a rank that called something else is named at once instead of corrupting data.
struct OpSignature {
  uint64_t seq = 0;  // 1 for the communicator's first call, +1 per call.
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = -1;   // Broadcast only.
  uint64_t count = 0;  // The call's count argument.

  bool SameCall(const OpSignature& other) const {
    return seq == other.seq && kind == other.kind && type == other.type && op == other.op &&
           root == other.root && count == other.count;
  }
  // e.g. "all_reduce #12 (float32 sum, 1000 elements)".
  std::string ToString() const;
};

// The wire form of OpSignature: fixed size, no padding, the same on every rank of a job.
struct WireSignature {
  uint64_t seq;
  uint32_t kind;
  uint32_t type;
  uint32_t op;
  int32_t root;
  uint64_t count;
};
static_assert(sizeof(WireSignature) == 32);
WireSignature ToWire(const OpSignature& sig);
OpSignature FromWire(const WireSignature& wire);

// One call: its signature, buffers, and deadline.
struct CollectiveCall {
  OpSignature sig;
  const void* send = nullptr;
  void* recv = nullptr;
  absl::Time deadline = absl::InfiniteFuture();
  void* cuda_stream = nullptr;  // NCCL only.
};

// How the ranks' process ids are named in messages: "process 7".
struct RankNames {
  std::vector<int> processes;  // processes[rank] = the job's process id.
  std::string Name(int rank) const;
  // "processes 3, 5 and 9" (at most three, then "and N more").
  std::string List(const std::vector<int>& ranks) const;
};

// A backend runs the calls of one communicator. Run() is called by one thread at a time; Abort()
// from any thread, at any time: it makes every pending and later Run() return Aborted promptly.
// Errors of Run(): DeadlineExceeded naming the ranks it waited for, FailedPrecondition naming a
// rank that called something else, Internal for a broken transport, Aborted after Abort().
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual absl::Status Run(const CollectiveCall& call) = 0;
  virtual void Abort() = 0;
  // e.g. "host backend over shared memory".
  virtual std::string Describe() const = 0;
};

// The element ranges a count splits into over `parts`: near-equal, the first ones one larger.
struct Range {
  size_t begin = 0;
  size_t size = 0;
};
Range PartOf(size_t count, int parts, int index);

}  // namespace dist::internal
