#include "libdist/src/collectives/reduce.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dist::internal {
namespace {

// How many elements are reduced at a time: the accumulator stays in L1.
constexpr size_t kTile = 1024;

struct Sum {
  template <typename A>
  static A Apply(A a, A b) {
    return a + b;
  }
};
struct Prod {
  template <typename A>
  static A Apply(A a, A b) {
    return a * b;
  }
};
struct Min {
  template <typename A>
  static A Apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename A>
  static A Apply(A a, A b) {
    return a < b ? b : a;
  }
};

// T: the stored type; A: what it is reduced in. Load/Store convert between them.
template <typename T, typename A>
struct Plain {
  static A Load(T v) { return static_cast<A>(v); }
  static T Store(A v) { return static_cast<T>(v); }
};
struct BF16 {
  static float Load(uint16_t v) { return BFloat16ToFloat32(v); }
  static uint16_t Store(float v) { return Float32ToBFloat16(v); }
};
struct F16 {
  static float Load(uint16_t v) { return Float16ToFloat32(v); }
  static uint16_t Store(float v) { return Float32ToFloat16(v); }
};

template <typename T, typename A, typename Conv, typename Op>
void ReduceTyped(const void* const* inputs, int n, void* out_v, size_t count, int avg_divisor) {
  T* out = static_cast<T*>(out_v);
  if constexpr (std::is_same_v<T, A>) {
    // Accumulate straight into `out`, left to right, when no input after the first two is
    // `out` itself (in place, out is this rank's input: it must be read before it is written).
    bool direct = n <= 4;
    for (int k = 2; k < n; ++k) direct &= inputs[k] != out_v;
    if (direct) {
      // One pass, every input read once per element, left to right (up to four inputs).
      const T* in0 = static_cast<const T*>(inputs[0]);
      const T* in1 = n > 1 ? static_cast<const T*>(inputs[1]) : nullptr;
      const T* in2 = n > 2 ? static_cast<const T*>(inputs[2]) : nullptr;
      const T* in3 = n > 3 ? static_cast<const T*>(inputs[3]) : nullptr;
      switch (n) {
        case 1:
          if (in0 != out) std::memcpy(out, in0, count * sizeof(T));
          break;
        case 2:
          for (size_t j = 0; j < count; ++j) out[j] = Op::Apply(in0[j], in1[j]);
          break;
        case 3:
          for (size_t j = 0; j < count; ++j) {
            out[j] = Op::Apply(Op::Apply(in0[j], in1[j]), in2[j]);
          }
          break;
        default:
          for (size_t j = 0; j < count; ++j) {
            out[j] = Op::Apply(Op::Apply(Op::Apply(in0[j], in1[j]), in2[j]), in3[j]);
          }
          break;
      }
      if (avg_divisor > 0) {
        const T d = static_cast<T>(avg_divisor);
        for (size_t j = 0; j < count; ++j) out[j] = out[j] / d;
      }
      return;
    }
  }
  A acc[kTile];
  for (size_t base = 0; base < count; base += kTile) {
    const size_t len = std::min(kTile, count - base);
    const T* __restrict in0 = static_cast<const T*>(inputs[0]) + base;
    for (size_t j = 0; j < len; ++j) acc[j] = Conv::Load(in0[j]);
    for (int k = 1; k < n; ++k) {
      const T* __restrict in = static_cast<const T*>(inputs[k]) + base;
      for (size_t j = 0; j < len; ++j) acc[j] = Op::Apply(acc[j], Conv::Load(in[j]));
    }
    if (avg_divisor > 0) {
      const A d = static_cast<A>(avg_divisor);
      for (size_t j = 0; j < len; ++j) acc[j] = acc[j] / d;
    }
    T* o = out + base;
    for (size_t j = 0; j < len; ++j) o[j] = Conv::Store(acc[j]);
  }
}

template <typename T, typename A, typename Conv>
void ReduceWithOp(ReduceOp op, const void* const* inputs, int n, void* out, size_t count,
                  int num_ranks) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceTyped<T, A, Conv, Sum>(inputs, n, out, count, 0);
    case ReduceOp::kAvg:
      return ReduceTyped<T, A, Conv, Sum>(inputs, n, out, count, num_ranks);
    case ReduceOp::kProd:
      return ReduceTyped<T, A, Conv, Prod>(inputs, n, out, count, 0);
    case ReduceOp::kMin:
      return ReduceTyped<T, A, Conv, Min>(inputs, n, out, count, 0);
    case ReduceOp::kMax:
      return ReduceTyped<T, A, Conv, Max>(inputs, n, out, count, 0);
  }
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

uint16_t Float32ToBFloat16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float BFloat16ToFloat32(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint16_t Float32ToFloat16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // Rounds to infinity (>= 65520) or is inf.
  if (abs < 0x38800000u) {                        // Below the smallest normal half (2^-14).
    // Subnormal half: value / 2^-24 rounded to nearest even. Exact in float arithmetic.
    const float scaled = BitsFloat(abs) * 16777216.0f;  // * 2^24
    float r = __builtin_rintf(scaled);                  // Ties to even (default rounding).
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits.
  uint32_t m = abs - 0x38000000u;  // exponent - 112
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | static_cast<uint16_t>(m >> 13);
}

float Float16ToFloat32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
    return sign ? -v : v;
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

void ReduceInto(DataType type, ReduceOp op, const void* const* inputs, int n, void* out,
                size_t count, int num_ranks) {
  switch (type) {
    case DataType::kFloat32:
      return ReduceWithOp<float, float, Plain<float, float>>(op, inputs, n, out, count, num_ranks);
    case DataType::kFloat64:
      return ReduceWithOp<double, double, Plain<double, double>>(op, inputs, n, out, count,
                                                                 num_ranks);
    case DataType::kInt32:
      return ReduceWithOp<int32_t, int32_t, Plain<int32_t, int32_t>>(op, inputs, n, out, count,
                                                                     num_ranks);
    case DataType::kInt64:
      return ReduceWithOp<int64_t, int64_t, Plain<int64_t, int64_t>>(op, inputs, n, out, count,
                                                                     num_ranks);
    case DataType::kBFloat16:
      return ReduceWithOp<uint16_t, float, BF16>(op, inputs, n, out, count, num_ranks);
    case DataType::kFloat16:
      return ReduceWithOp<uint16_t, float, F16>(op, inputs, n, out, count, num_ranks);
  }
}

DataType AccumulationType(DataType type) {
  return type == DataType::kBFloat16 || type == DataType::kFloat16 ? DataType::kFloat32 : type;
}

void WidenToAccumulation(DataType type, const void* in, void* out, size_t count) {
  const auto* src = static_cast<const uint16_t*>(in);
  auto* dst = static_cast<float*>(out);
  if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = BFloat16ToFloat32(src[i]);
  } else if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = Float16ToFloat32(src[i]);
  } else if (in != out) {
    std::memmove(out, in, count * DataTypeSize(type));
  }
}

void NarrowFromAccumulation(DataType type, const void* in, void* out, size_t count) {
  const auto* src = static_cast<const float*>(in);
  auto* dst = static_cast<uint16_t*>(out);
  if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = Float32ToBFloat16(src[i]);
  } else if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) dst[i] = Float32ToFloat16(src[i]);
  } else if (in != out) {
    std::memmove(out, in, count * DataTypeSize(type));
  }
}

void DivideInPlace(DataType type, void* data, size_t count, int divisor) {
  auto divide = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    const T d = static_cast<T>(divisor);
    for (size_t i = 0; i < count; ++i) p[i] = p[i] / d;
  };
  switch (type) {
    case DataType::kFloat32:
      return divide(static_cast<float*>(data));
    case DataType::kFloat64:
      return divide(static_cast<double*>(data));
    case DataType::kInt32:
      return divide(static_cast<int32_t*>(data));
    case DataType::kInt64:
      return divide(static_cast<int64_t*>(data));
    case DataType::kBFloat16:
    case DataType::kFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      const bool bf = type == DataType::kBFloat16;
      for (size_t i = 0; i < count; ++i) {
        const float v = (bf ? BFloat16ToFloat32(p[i]) : Float16ToFloat32(p[i])) / divisor;
        p[i] = bf ? Float32ToBFloat16(v) : Float32ToFloat16(v);
      }
      return;
    }
  }
}

}  // namespace dist::internal
