#pragma once

// Which backends a communicator runs, decided alike on every rank from every rank's
// announcement: a pure function, so each branch is a row of a table test.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/collective_op.h"

namespace dist::internal {

// One rank's announcement to the others.
struct PeerInfo {
  std::string locality;   // LocalityKey(): ranks with the same one can share memory.
  std::string transport;  // What it asked for: auto|shm|tcp.
  std::string shm;        // Its segment server, or "" when it has none.
  std::string tcp;        // Its TCP address, or "".
  std::string backend;    // What it asked for: auto|nccl|host.
  std::string nccl;       // "" when NCCL is usable there, else why not.

  std::string Encode() const;
  static PeerInfo Decode(const std::string& s);
};

struct BackendPlan {
  enum class Host {
    kNone,    // No host backend (COHORT_COLLECTIVES=nccl).
    kSelf,    // One rank: shared memory with itself.
    kShm,     // Every rank on this host: shared memory.
    kTcp,     // TCP between every pair.
    kHybrid,  // Several hosts with the same number of ranks each: shm within, TCP between.
  };
  Host host = Host::kNone;
  bool nccl = false;
  // kShm: every rank; kHybrid: this host's ranks, in rank order (this rank among them).
  std::vector<int> local;
  // kHybrid: the ranks with this rank's local index, one per host, in host order.
  std::vector<int> rail;
  int num_hosts = 1;
  // For Describe(): "shared memory", "TCP", "shared memory within each of 2 hosts (...)".
  std::string transport;
};

// InvalidArgument when the ranks asked for different backends or transports; Unavailable when
// COHORT_COLLECTIVES=nccl and a rank cannot run NCCL, or COHORT_HOST_TRANSPORT=shm and a rank is
// on another host (each message names the ranks and says what to set).
absl::StatusOr<BackendPlan> PlanBackends(const std::vector<PeerInfo>& peers, int rank,
                                         const std::string& communicator, const RankNames& names);

}  // namespace dist::internal
