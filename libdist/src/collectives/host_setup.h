#pragma once

// What the host backend needs before its first call: where this process runs (so that ranks on
// one host use shared memory), the address its TCP transport announces, and the exchange of
// shared-memory segments between the ranks of one host.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/shm_transport.h"

namespace dist::internal {

// Processes with the same key share memory and reach each other's abstract Unix sockets: the
// kernel's boot id plus the network namespace's inode.
std::string LocalityKey();

// The address to announce for TCP: `configured` when set, else COHORT_POD_IP, else the address
// this host uses towards the coordinator (127.0.0.1 when the coordinator is on loopback or
// unknown).
std::string TcpHost(const std::string& configured, const std::string& coordinator_address);

// A listening abstract Unix socket with a random name, that hands this rank's segment to every
// local peer that connects. RAII.
class SegmentServer {
 public:
  static absl::StatusOr<SegmentServer> Start();
  SegmentServer() = default;
  SegmentServer(SegmentServer&& other) noexcept;
  SegmentServer& operator=(SegmentServer&& other) noexcept;
  ~SegmentServer();
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string name_;  // Without the leading NUL.
};

// Exchanges segments among the ranks in `local` (communicator ranks; this rank among them):
// connects to every other local rank's server (`names[r]`), hands `mine` to each one that
// connects, and maps theirs. Returns segments indexed by communicator rank (empty for ranks not
// in `local`). DeadlineExceeded naming the ranks that did not answer.
absl::StatusOr<std::vector<SharedSegment>> ExchangeSegments(
    int rank, const std::vector<int>& local, const std::vector<std::string>& names,
    SegmentServer& server, SharedSegment mine, const RankNames& rank_names,
    absl::Time deadline);

}  // namespace dist::internal
