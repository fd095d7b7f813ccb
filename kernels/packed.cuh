// Kernels on weights kept packed in a GGUF block type (ElemType kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K; rows
// of whole blocks in the file's layout, docs/formats.md §2): dequantization of whole rows (to fp32 with
// the CPU's bits, or to bf16 for the tensor-core prefill), the embedding gather, and the small-batch
// product that LaunchGemvSegments (kernels/gemv.cuh) hands packed weights to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/gemv.cuh"
#include "kernels/kernel_types.h"

namespace specgen::kernels {

// Rows [row0, row0 + rows) of a packed matrix w ([*, in] of `type`, device, 16-byte aligned; `in` a
// whole number of blocks) dequantized into dst [rows, in]: fp32 (dst_f32, the bits of engine/core's
// DequantizeRow) or bf16 (dst_bf16: those fp32 values rounded to nearest even). Exactly one of the two
// is non-null.
cudaError_t LaunchDequantizePacked(const void* w, ElemType type, int64_t row0, int64_t rows, int in,
                                   float* dst_f32, uint16_t* dst_bf16, cudaStream_t stream);

// out[t] = row ids[t] of a packed table [vocab, dim] dequantized to fp32 (the CPU's bits), t < tokens;
// an id outside [0, vocab) gives a row of NaN (as LaunchEmbedding).
cudaError_t LaunchPackedEmbedding(const void* table, ElemType type, int64_t vocab, int dim, const int32_t* ids,
                                  int tokens, float* out, cudaStream_t stream);

// LaunchGemvSegments for packed weights (all segments of `type`, 16-byte aligned; in a whole number of
// blocks): each product reduced in the one order of kernels/packed_blocks.cuh (PackedRowDots), whatever
// n (1..kGemvMaxTokens) and the epilogue, so results are batch invariant bit for bit and equal
// LaunchGemv (+ LaunchAdd / LaunchSwiGlu) on each matrix alone. Packed weights have this one order under
// either GemvOrder.
cudaError_t LaunchPackedGemvSegments(const GemvSegment* segments, int n_segments, ElemType type, const float* x,
                                     int n, int in, GemvEpilogue epilogue, cudaStream_t stream);

}  // namespace specgen::kernels
