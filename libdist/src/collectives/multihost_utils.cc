// jax.experimental.multihost_utils on a dist::Communicator.

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dist/collectives.h"
#include "libdist/src/collectives/reduce.h"

namespace dist {
namespace {

// A fixed-size description of an array's type and shape, exchanged before its data so that
// every rank issues the same calls whatever it holds.
constexpr int kMaxDims = 14;
struct Descriptor {
  int64_t values[2 + kMaxDims] = {};  // type, ndim, dims (the rest folded into the last)

  static Descriptor Of(const HostArray& a) {
    Descriptor d;
    d.values[0] = static_cast<int64_t>(a.type);
    d.values[1] = static_cast<int64_t>(a.shape.size());
    for (size_t i = 0; i < a.shape.size(); ++i) {
      if (i < kMaxDims) {
        d.values[2 + i] = a.shape[i];
      } else {
        d.values[1 + kMaxDims] = d.values[1 + kMaxDims] * 1000003 + a.shape[i];
      }
    }
    return d;
  }
  bool operator==(const Descriptor& o) const {
    return std::memcmp(values, o.values, sizeof(values)) == 0;
  }
  DataType type() const { return static_cast<DataType>(values[0]); }
  std::vector<int64_t> shape() const {
    std::vector<int64_t> s;
    for (int64_t i = 0; i < values[1] && i < kMaxDims; ++i) s.push_back(values[2 + i]);
    return s;
  }
  size_t num_elements() const {
    size_t n = 1;
    for (int64_t d : shape()) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
    return n;
  }
  bool valid() const {
    return values[0] >= 0 && values[0] <= static_cast<int64_t>(DataType::kFloat16) &&
           values[1] >= 0 && values[1] <= kMaxDims;
  }
};
constexpr size_t kDescriptorCount = 2 + kMaxDims;

std::string TypeAndShape(DataType type, const std::vector<int64_t>& shape) {
  return absl::StrCat(DataTypeName(type), "[", absl::StrJoin(shape, ","), "]");
}

std::string FormatValues(const HostArray& a) {
  constexpr size_t kShown = 8;
  const size_t n = std::min(a.num_elements(), a.bytes.size() / DataTypeSize(a.type));
  std::vector<std::string> parts;
  for (size_t i = 0; i < n && i < kShown; ++i) {
    const uint8_t* p = a.bytes.data() + i * DataTypeSize(a.type);
    switch (a.type) {
      case DataType::kFloat32: {
        float v;
        std::memcpy(&v, p, 4);
        parts.push_back(absl::StrCat(v));
        break;
      }
      case DataType::kFloat64: {
        double v;
        std::memcpy(&v, p, 8);
        parts.push_back(absl::StrCat(v));
        break;
      }
      case DataType::kInt32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        parts.push_back(absl::StrCat(v));
        break;
      }
      case DataType::kInt64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        parts.push_back(absl::StrCat(v));
        break;
      }
      case DataType::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        parts.push_back(absl::StrCat(internal::BFloat16ToFloat32(v)));
        break;
      }
      case DataType::kFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        parts.push_back(absl::StrCat(internal::Float16ToFloat32(v)));
        break;
      }
    }
  }
  if (n > kShown) parts.push_back(absl::StrCat("... (", n, " elements)"));
  return absl::StrCat(TypeAndShape(a.type, a.shape), "{", absl::StrJoin(parts, ", "), "}");
}

absl::Status CheckArray(const HostArray& a, const char* what) {
  if (a.shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": at most ", kMaxDims, " dimensions are supported"));
  }
  for (int64_t d : a.shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dimension"));
  }
  if (a.bytes.size() != a.num_elements() * DataTypeSize(a.type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the array holds ", a.bytes.size(), " bytes, but ", TypeAndShape(a.type, a.shape),
        " needs ", a.num_elements() * DataTypeSize(a.type)));
  }
  return absl::OkStatus();
}

}  // namespace

size_t HostArray::num_elements() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
  return n;
}

absl::StatusOr<HostArray> BroadcastOneToAll(Communicator& comm, const HostArray& array, int root,
                                            const CallOptions& options) {
  if (root < 0 || root >= comm.size()) {
    return absl::InvalidArgumentError(absl::StrCat("BroadcastOneToAll: root ", root,
                                                   " is not a rank (0..", comm.size() - 1, ")"));
  }
  const bool is_root = comm.rank() == root;
  if (is_root) {
    if (absl::Status s = CheckArray(array, "BroadcastOneToAll"); !s.ok()) return s;
  }
  Descriptor d = is_root ? Descriptor::Of(array) : Descriptor();
  if (absl::Status s =
          comm.Broadcast(d.values, d.values, kDescriptorCount, DataType::kInt64, root, options);
      !s.ok()) {
    return s;
  }
  HostArray out;
  out.type = d.type();
  out.shape = d.shape();
  if (is_root) {
    out.bytes = array.bytes;
  } else {
    out.bytes.resize(d.num_elements() * DataTypeSize(out.type));
  }
  if (absl::Status s = comm.Broadcast(out.bytes.data(), out.bytes.data(), d.num_elements(),
                                      out.type, root, options);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<HostArray> ProcessAllgather(Communicator& comm, const HostArray& array, bool tiled,
                                           const CallOptions& options) {
  // Every rank takes part in the descriptor exchange, even with a bad array, so that the
  // others learn of it instead of waiting.
  const absl::Status local = CheckArray(array, "ProcessAllgather");
  Descriptor mine = local.ok() ? Descriptor::Of(array) : Descriptor();
  if (!local.ok()) mine.values[0] = -1;
  const int p = comm.size();
  std::vector<int64_t> all(kDescriptorCount * p);
  if (absl::Status s =
          comm.AllGather(mine.values, all.data(), kDescriptorCount, DataType::kInt64, options);
      !s.ok()) {
    return s;
  }
  if (!local.ok()) return local;
  std::vector<std::string> differing;
  for (int r = 0; r < p; ++r) {
    Descriptor d;
    std::memcpy(d.values, &all[r * kDescriptorCount], sizeof(d.values));
    if (!(d == mine)) {
      differing.push_back(
          d.valid() ? absl::StrCat("process ", comm.processes()[r], " has ",
                                   TypeAndShape(d.type(), d.shape()))
                    : absl::StrCat("process ", comm.processes()[r], " passed an invalid array"));
    }
  }
  if (!differing.empty()) {
    if (differing.size() > 3) {
      const size_t more = differing.size() - 3;
      differing.resize(3);
      differing.push_back(absl::StrCat("and ", more, " more"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("ProcessAllgather needs the same type and shape on every process: process ",
                     comm.processes()[comm.rank()], " has ", TypeAndShape(array.type, array.shape),
                     ", ", absl::StrJoin(differing, ", ")));
  }
  HostArray out;
  out.type = array.type;
  out.bytes.resize(array.bytes.size() * p);
  if (absl::Status s = comm.AllGather(array.bytes.data(), out.bytes.data(), array.num_elements(),
                                      array.type, options);
      !s.ok()) {
    return s;
  }
  if (tiled && !array.shape.empty()) {
    out.shape = array.shape;
    out.shape[0] *= p;
  } else {
    out.shape.push_back(p);
    out.shape.insert(out.shape.end(), array.shape.begin(), array.shape.end());
  }
  return out;
}

absl::Status AssertEqual(Communicator& comm, const HostArray& array, absl::string_view fail_message,
                         const CallOptions& options) {
  if (comm.rank() == 0) {
    if (absl::Status s = CheckArray(array, "AssertEqual"); !s.ok()) return s;
  }
  absl::StatusOr<HostArray> expected = BroadcastOneToAll(comm, array, 0, options);
  if (!expected.ok()) return expected.status();
  if (comm.rank() == 0) return absl::OkStatus();
  if (expected->type == array.type && expected->shape == array.shape &&
      expected->bytes == array.bytes) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(fail_message, fail_message.empty() ? "" : " ",
                                                    "Expected: ", FormatValues(*expected),
                                                    "; got: ", FormatValues(array), "."));
}

}  // namespace dist
