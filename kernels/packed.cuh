// Kernels on weights kept packed in a GGUF block type (ElemType kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K; rows
// of whole blocks in the file's layout, docs/formats.md §2): dequantization of whole rows (to fp32 with
// the CPU's bits, or to bf16 for the tensor-core prefill), the embedding gather, and the packed product
// of up to 64 tokens that LaunchGemvSegments (kernels/gemv.cuh) hands packed weights to.
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

inline constexpr int kPackedProductMaxTokens = 64;

// LaunchGemvSegments for packed weights (all segments of `type`, 16-byte aligned; in a whole number of
// blocks), for n = 1..kPackedProductMaxTokens: every product is the packed product's one definition
// (engine/core/packed_product.h) whatever n, the epilogue, the GemvOrder or the layout, so results
// are batch invariant and equal the CPU backend's MatMul bit for bit, and the epilogues equal
// LaunchGemv + LaunchAdd / LaunchSwiGlu on each matrix alone. `layout` (speed only): kAuto takes rows
// up to kPackedRowsMaxTokens tokens a launch, tiles beyond.
inline constexpr int kPackedRowsMaxTokens = 16;
// The layout the launchers take where theirs is kAuto: a process-wide choice, which benchmarks set to
// compare the layouts inside whole passes. Speed only, since every layout gives the same bits; kAuto
// (the default) picks by token count. A CUDA graph keeps the layout it was captured with.
void SetPackedLayout(PackedLayout layout);
PackedLayout DefaultPackedLayout();
cudaError_t LaunchPackedGemvSegments(const GemvSegment* segments, int n_segments, ElemType type, const float* x,
                                     int n, int in, GemvEpilogue epilogue, cudaStream_t stream,
                                     PackedLayout layout = PackedLayout::kAuto);

}  // namespace specgen::kernels
