#pragma once

// How the ranks of one host hand each other their shared-memory segments before the shared-memory
// backend's first call: each rank serves its segment's file descriptor on an abstract Unix socket.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/shm_backend.h"

namespace dist::internal {

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
