#pragma once

// Element-wise reductions of the host backend, in a fixed order so that every rank computes the
// same bits: out = in[0] op in[1] op ... op in[n-1], left to right. 16-bit floating types are
// widened to float32, reduced, and rounded once at the end.

#include <cstddef>
#include <cstdint>

#include "dist/collectives.h"

namespace dist::internal {

// out[i] = inputs[0][i] op ... op inputs[n-1][i] for i < count; kAvg divides the sum by
// `num_ranks` (integers truncate toward zero). `out` may alias any input. n >= 1.
void ReduceInto(DataType type, ReduceOp op, const void* const* inputs, int n, void* out,
                size_t count, int num_ranks);

// float32 <-> bfloat16 / float16, rounding to nearest even (NaN stays NaN).
uint16_t Float32ToBFloat16(float f);
float BFloat16ToFloat32(uint16_t b);
uint16_t Float32ToFloat16(float f);
float Float16ToFloat32(uint16_t h);

// The type a ring step accumulates in: float32 for the 16-bit types, else the type itself.
DataType AccumulationType(DataType type);
// Converts count elements between `type` and AccumulationType(type) (a copy when they agree).
void WidenToAccumulation(DataType type, const void* in, void* out, size_t count);
void NarrowFromAccumulation(DataType type, const void* in, void* out, size_t count);
// data[i] /= divisor, in `type` (the kAvg step of a ring).
void DivideInPlace(DataType type, void* data, size_t count, int divisor);

}  // namespace dist::internal
