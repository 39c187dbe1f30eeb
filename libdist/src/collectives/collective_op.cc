#include "libdist/src/collectives/collective_op.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dist {

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat16:
      return "float16";
  }
  return "unknown";
}

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kBFloat16:
    case DataType::kFloat16:
      return 2;
  }
  return 1;
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kNccl:
      return "nccl";
    case Backend::kHost:
      return "host";
  }
  return "unknown";
}

const char* HostTransportName(HostTransport transport) {
  switch (transport) {
    case HostTransport::kAuto:
      return "auto";
    case HostTransport::kShm:
      return "shm";
    case HostTransport::kTcp:
      return "tcp";
  }
  return "unknown";
}

namespace internal {

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "unknown";
}

std::string OpSignature::ToString() const {
  std::string s = absl::StrCat(CollectiveKindName(kind), " #", seq);
  if (kind == CollectiveKind::kBarrier) return s;
  absl::StrAppend(&s, " (", DataTypeName(type));
  if (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter) {
    absl::StrAppend(&s, " ", ReduceOpName(op));
  }
  absl::StrAppend(&s, ", ", count, count == 1 ? " element" : " elements");
  if (kind == CollectiveKind::kBroadcast) absl::StrAppend(&s, ", root ", root);
  return s + ")";
}

WireSignature ToWire(const OpSignature& sig) {
  return WireSignature{sig.seq,
                       static_cast<uint32_t>(sig.kind),
                       static_cast<uint32_t>(sig.type),
                       static_cast<uint32_t>(sig.op),
                       sig.root,
                       sig.count};
}

OpSignature FromWire(const WireSignature& w) {
  OpSignature sig;
  sig.seq = w.seq;
  sig.kind = static_cast<CollectiveKind>(w.kind);
  sig.type = static_cast<DataType>(w.type);
  sig.op = static_cast<ReduceOp>(w.op);
  sig.root = w.root;
  sig.count = w.count;
  return sig;
}

std::string RankNames::Name(int rank) const {
  const int process =
      rank >= 0 && rank < static_cast<int>(processes.size()) ? processes[rank] : rank;
  return absl::StrCat("process ", process);
}

std::string RankNames::List(const std::vector<int>& ranks) const {
  constexpr size_t kShown = 3;
  std::vector<std::string> ids;
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    const int r = ranks[i];
    ids.push_back(
        absl::StrCat(r >= 0 && r < static_cast<int>(processes.size()) ? processes[r] : r));
  }
  std::string s = ranks.size() == 1 ? "process " : "processes ";
  if (ranks.size() <= kShown) {
    if (ids.size() <= 1) return s + absl::StrJoin(ids, "");
    return absl::StrCat(s, absl::StrJoin(ids.begin(), ids.end() - 1, ", "), " and ", ids.back());
  }
  return absl::StrCat(s, absl::StrJoin(ids, ", "), " and ", ranks.size() - kShown, " more");
}

Range PartOf(size_t count, int parts, int index) {
  const size_t base = count / parts, extra = count % parts;
  const size_t i = static_cast<size_t>(index);
  return Range{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

}  // namespace internal
}  // namespace dist
