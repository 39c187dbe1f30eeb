#include "libdist/src/collectives/hybrid_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "libdist/src/collectives/reduce.h"

namespace dist::internal {

HybridBackend::HybridBackend(int local_rank, int local_size, int num_hosts, int world_size,
                             std::unique_ptr<CollectiveBackend> local,
                             std::unique_ptr<CollectiveBackend> rail,
                             std::unique_ptr<CollectiveBackend> flat)
    : local_rank_(local_rank),
      local_size_(local_size),
      num_hosts_(num_hosts),
      world_size_(world_size),
      local_(std::move(local)),
      rail_(std::move(rail)),
      flat_(std::move(flat)) {}

std::unique_ptr<HybridBackend> HybridBackend::Assemble(int rank, const std::vector<int>& local,
                                                       const std::vector<int>& rail,
                                                       std::vector<SharedSegment> local_segments,
                                                       const RankNames& names,
                                                       std::unique_ptr<TcpBackend> flat) {
  const int local_rank =
      static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  RankNames local_names;
  for (int r : local) local_names.processes.push_back(names.processes[r]);
  std::unique_ptr<CollectiveBackend> rail_backend = TcpBackend::Subset(*flat, rail);
  return std::make_unique<HybridBackend>(
      local_rank, static_cast<int>(local.size()), static_cast<int>(rail.size()),
      static_cast<int>(names.processes.size()),
      std::make_unique<ShmBackend>(local_rank, std::move(local_names), std::move(local_segments)),
      std::move(rail_backend), std::move(flat));
}

std::string HybridBackend::Describe() const {
  return absl::StrCat("host backend over shared memory within each of ", num_hosts_, " hosts (",
                      local_size_, " ranks each) and TCP between them");
}

void HybridBackend::Abort() {
  local_->Abort();
  rail_->Abort();
  flat_->Abort();
}

absl::Status HybridBackend::Run(const CollectiveCall& call) {
  if (call.sig.kind == CollectiveKind::kAllReduce && call.sig.count > 0) return AllReduce(call);
  return flat_->Run(call);
}

absl::Status HybridBackend::AllReduce(const CollectiveCall& call) {
  const DataType type = call.sig.type;
  const DataType acc = AccumulationType(type);
  const size_t aes = DataTypeSize(acc);
  const size_t n = call.sig.count;
  const size_t block = (n + local_size_ - 1) / local_size_;
  const size_t padded = block * local_size_;
  if (scratch_.size() < padded * aes) scratch_.resize(padded * aes);
  uint8_t* work = scratch_.data();
  WidenToAccumulation(type, call.send, work, n);
  std::memset(work + n * aes, 0, (padded - n) * aes);  // Padding: reduced, then dropped.
  uint8_t* mine = work + local_rank_ * block * aes;
  const ReduceOp step_op = call.sig.op == ReduceOp::kAvg ? ReduceOp::kSum : call.sig.op;

  // The same steps on every rank, so the sub-calls' signatures agree across ranks.
  CollectiveCall step = call;
  step.sig.type = acc;
  step.sig.op = step_op;
  step.sig.count = block;
  step.sig.kind = CollectiveKind::kReduceScatter;
  step.send = work;
  step.recv = mine;
  if (absl::Status s = local_->Run(step); !s.ok()) return s;
  step.sig.kind = CollectiveKind::kAllReduce;
  step.send = mine;
  if (absl::Status s = rail_->Run(step); !s.ok()) return s;
  if (call.sig.op == ReduceOp::kAvg) DivideInPlace(acc, mine, block, world_size_);
  step.sig.kind = CollectiveKind::kAllGather;
  step.send = mine;
  step.recv = work;
  if (absl::Status s = local_->Run(step); !s.ok()) return s;
  NarrowFromAccumulation(type, work, call.recv, n);
  return absl::OkStatus();
}

}  // namespace dist::internal
