#pragma once

// The shared-memory backend's segments, and how the ranks of one host hand them to each other
// before its first call: each rank serves its segment's file descriptor on an abstract Unix
// socket. shm_backend.h includes this header for SharedSegment, so this one must not include it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "libdist/src/collectives/collective_op.h"

namespace dist::internal {

// A shared-memory segment: a memfd (never a file in /dev/shm, which containers cap at 64 MiB,
// and nothing is left behind when the processes die) mapped into this process. RAII.
class SharedSegment {
 public:
  // A new zero-filled segment of `bytes`. Internal (naming the syscall) when it cannot be made.
  static absl::StatusOr<SharedSegment> Create(size_t bytes);
  // Maps a segment received from a peer; takes ownership of `fd`.
  static absl::StatusOr<SharedSegment> Map(int fd, size_t bytes);
  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  ~SharedSegment();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // Closes the fd (the mapping stays); done once every peer has its own copy.
  void CloseFd();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

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
    SegmentServer& server, SharedSegment mine, const RankNames& rank_names, absl::Time deadline);

}  // namespace dist::internal
