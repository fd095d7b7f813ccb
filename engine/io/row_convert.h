// Row conversion between any supported DType and fp32: the one place where io/ (synthetic weights,
// GGUF export, conversion) meets the quantizers of engine/core/quant.h. A row is n elements along a
// tensor's contiguous dimension; quantized rows must be a whole number of blocks.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/core/dtype.h"
#include "engine/io/weight_set.h"

namespace specgen {

// src (n elements of `src_type`) → dst (n floats): DequantizeRow (engine/core/quant.h).
absl::Status RowToF32(DType src_type, const void* src, int64_t n, float* dst);
// src (n floats) → dst (n elements of `dst_type`, RowBytes(dst_type, n) bytes): QuantizeRow.
absl::Status RowFromF32(DType dst_type, const float* src, int64_t n, void* dst);

// The dtype a tensor is stored in when `requested` is asked for: norms (1-D) and routers stay f32
// (llama.cpp never quantizes them), and a row whose length is not a multiple of the requested block
// size falls back to f16 (K-quants need 256). Sets *fell_back when the fallback was taken.
DType StorageDType(Role role, int64_t row_len, DType requested, bool* fell_back = nullptr);

}  // namespace specgen
