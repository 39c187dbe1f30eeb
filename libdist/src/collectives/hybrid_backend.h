#pragma once

#include <memory>
#include <string>
#include <vector>

#include "libdist/src/collectives/collective_op.h"
#include "libdist/src/collectives/shm_backend.h"
#include "libdist/src/collectives/tcp_backend.h"

namespace dist::internal {

// The host backend for ranks on several hosts with several ranks on each: shared memory within a
// host, TCP between hosts. An all-reduce is hierarchical: a reduce-scatter over the host's
// shared memory (local rank l ends with block l of the host's sum), an all-reduce of that block
// with the ranks of local index l on the other hosts (a "rail", TCP), and an all-gather over
// shared memory; so each byte crosses the network once per host instead of once per rank, and
// every element is still reduced once, in one order, then copied: every rank gets the same bits.
// 16-bit types run the whole pipeline in float32. The other operations run over TCP between
// every pair (`flat`). Needs the same number of ranks on every host.
class HybridBackend final : public CollectiveBackend {
 public:
  // `local`: this host's ranks over shared memory (this rank is local rank `local_rank` of
  // `local_size`); `rail`: the ranks with this local index, one per host; `flat`: every rank.
  HybridBackend(int local_rank, int local_size, int num_hosts, int world_size,
                std::unique_ptr<CollectiveBackend> local, std::unique_ptr<CollectiveBackend> rail,
                std::unique_ptr<CollectiveBackend> flat);

  // `rank`'s backend from its parts: `local` (this host's ranks, this rank among them) with their
  // segments in the same order, `rail` (the ranks of this local index, one per host), and `flat`
  // (TCP between every rank of `names`), whose rail connections it shares.
  static std::unique_ptr<HybridBackend> Assemble(int rank, const std::vector<int>& local,
                                                 const std::vector<int>& rail,
                                                 std::vector<SharedSegment> local_segments,
                                                 const RankNames& names,
                                                 std::unique_ptr<TcpBackend> flat);

  absl::Status Run(const CollectiveCall& call) override;
  void Abort() override;
  std::string Describe() const override;

 private:
  absl::Status AllReduce(const CollectiveCall& call);

  const int local_rank_;
  const int local_size_;
  const int num_hosts_;
  const int world_size_;
  std::unique_ptr<CollectiveBackend> local_, rail_, flat_;
  std::vector<uint8_t> scratch_;
};

}  // namespace dist::internal
