// Row conversion between fp32 and every DType on the CPU: dequantization of the GGUF block formats
// (byte-exact per docs/formats.md §2) and simple round-to-nearest quantizers for the types
// that synth/convert write. A row is n elements along a tensor's contiguous dimension; for block types
// n must be a whole number of blocks.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/core/dtype.h"

namespace specgen {

// src (RowBytes(t, n) bytes of `t`) → dst (n floats). Every DType is supported.
absl::Status DequantizeRow(DType t, const void* src, int64_t n, float* dst);
// `rows` consecutive rows of `row_elems` elements each (row r at src + r·RowBytes(t, row_elems)).
absl::Status DequantizeRows(DType t, const void* src, int64_t rows, int64_t row_elems, float* dst);

// Whether QuantizeRow can produce `t` (F32, F16, BF16, Q8_0, Q4_0, Q4_K).
bool CanQuantize(DType t);
// src (n floats) → dst (RowBytes(t, n) bytes of `t`). Round-to-nearest with the block scale chosen so
// that every element's error is at most half a quantization step (see quant.cc per type).
absl::Status QuantizeRow(DType t, const float* src, int64_t n, void* dst);

// The same two calls with the (src, dst, n) argument order some callers use.
inline absl::Status DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  return DequantizeRow(t, src, n, dst);
}
inline absl::Status QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  return QuantizeRow(t, src, n, dst);
}

}  // namespace specgen
