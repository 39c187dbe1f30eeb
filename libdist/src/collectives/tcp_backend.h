#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libdist/src/collectives/collective_op.h"

namespace dist::internal {

// A listening TCP socket bound to host:0. RAII.
class TcpListener {
 public:
  static absl::StatusOr<TcpListener> Listen(const std::string& host);
  TcpListener() = default;
  TcpListener(TcpListener&& other) noexcept;
  TcpListener& operator=(TcpListener&& other) noexcept;
  ~TcpListener();
  int fd() const { return fd_; }
  const std::string& address() const { return address_; }  // host:port

 private:
  int fd_ = -1;
  std::string address_;
};

// The host backend between hosts: a TCP connection between every pair of ranks, driven by the
// calling thread with poll() (no I/O threads). Rings for all-reduce (reduce-scatter then
// all-gather; 16-bit types accumulate in float32 on the wire), all-gather, reduce-scatter and
// broadcast (a pipelined chain from the root), pairwise exchange for all-to-all, dissemination for
// the barrier. Each message carries the call's signature, so a rank that called something else
// is named. Abort() wakes the caller through an eventfd.
class TcpBackend final : public CollectiveBackend {
 public:
  // Connects every pair: rank r dials every higher rank and accepts every lower one.
  // `addresses[r]` is rank r's listener address; `nonce` identifies this communicator so that a
  // stray or stale connection is turned away. DeadlineExceeded names the ranks not connected.
  static absl::StatusOr<std::unique_ptr<TcpBackend>> Connect(
      int rank, RankNames names, TcpListener listener, const std::vector<std::string>& addresses,
      uint64_t nonce, absl::Time deadline);
  // A backend among `members` (ranks of `full`, in the order given, this rank among them) over
  // copies of full's connections. Calls on the two must not overlap (one caller thread).
  static std::unique_ptr<TcpBackend> Subset(const TcpBackend& full,
                                            const std::vector<int>& members);
  ~TcpBackend() override;

  absl::Status Run(const CollectiveCall& call) override;
  void Abort() override;
  std::string Describe() const override;

  // One message in flight: to or from `peer`, a header then `len` bytes of `data`.
  struct Transfer;

 private:
  TcpBackend(int rank, RankNames names, std::vector<int> fds);
  absl::Status Drive(std::vector<Transfer*> transfers, const OpSignature& sig, absl::Time deadline);
  absl::Status SendRecv(int to, const void* send, size_t send_len, int from, void* recv,
                        size_t recv_len, const OpSignature& sig, absl::Time deadline);
  int Next(int step = 1) const { return (rank_ + step) % size_; }
  int Prev(int step = 1) const { return ((rank_ - step) % size_ + size_) % size_; }
  uint8_t* Scratch(size_t bytes);

  // After it, rank r's block r of `work` (in acc_type) holds the reduction over every rank.
  absl::Status RingReduceScatter(uint8_t* work, const std::vector<Range>& blocks, DataType acc_type,
                                 ReduceOp op, const OpSignature& sig, absl::Time deadline);
  // Every rank's block r of `data` to every rank.
  absl::Status RingAllGather(uint8_t* data, const std::vector<Range>& blocks, DataType type,
                             const OpSignature& sig, absl::Time deadline);
  absl::Status AllReduce(const CollectiveCall& call);
  absl::Status AllGather(const CollectiveCall& call);
  absl::Status ReduceScatter(const CollectiveCall& call);
  absl::Status Broadcast(const CollectiveCall& call);
  absl::Status AllToAll(const CollectiveCall& call);
  absl::Status Barrier(const CollectiveCall& call);

  const int rank_;
  const int size_;
  const RankNames names_;
  std::vector<int> fds_;  // fds_[peer]; -1 for this rank.
  int abort_fd_ = -1;     // eventfd
  std::vector<uint8_t> scratch_, scratch2_;
  std::atomic<bool> aborted_{false};
};

}  // namespace dist::internal
