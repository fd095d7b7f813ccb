// Kernels the CUDA backend needs beyond the model-level families: a general matrix product for any
// weight type and batch (f32 weights, odd widths), an attention for head sizes the chunked kernel does
// not instantiate, row gather / scaled scatter-add for the expert FFN, and fp32 → bf16 conversion of
// activations for the cuBLAS prefill path. Every reduction has one fixed order per output element.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// y[t, o] = sum_k x[t, k] * W[o, k] for t < n, o < out, any n >= 1 and any in >= 1.
//   w  [out, in] of type w_type (kF32, kF16 or kBF16), row-major, device
//   x  [n, in] fp32, device;  y [n, out] fp32, device (must not alias x)
// Reduction order of y[t, o]: lane l of a warp sums k = l, l + 32, ... with fmaf, then a fixed
// butterfly over the lanes; independent of n (batch invariant). One warp per output row.
cudaError_t LaunchMatMulRows(const void* w, ElemType w_type, const float* x, float* y, int n,
                             int out, int in, cudaStream_t stream);

// Attention with the semantics of LaunchAttention (kernels/attention.cuh) for fp32 K/V and any
// head_dim <= 256 and any GQA group: one warp per (query, head) takes the keys in tiles of 32 slots
// (a lane a slot's dot product, then the tile's V rows in slot order) with an online softmax (fp32).
// Used for the head sizes the chunked kernels do not take (the bundled draft's 32).
//   q [n, heads, head_dim], k_cache/v_cache [capacity, kv_heads, head_dim] fp32, mask [n, n] or null,
//   out [n, heads, head_dim] fp32 (must not alias q). A query that sees no key yields zeros.
//   d_n_past: optional device int32 read instead of n_past (CUDA graphs), as in LaunchAttention.
cudaError_t LaunchAttentionSimple(const float* q, const float* k_cache, const float* v_cache,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, cudaStream_t stream,
                                  const int32_t* d_n_past = nullptr);

// dst[i, :] = src[rows[i], :] for i < m.  src [*, cols], dst [m, cols] fp32; rows [m] int32, device.
cudaError_t LaunchGatherRows(const float* src, const int32_t* rows, int m, int cols, float* dst,
                             cudaStream_t stream);

// dst[rows[i], :] += scales[i] * src[i, :] for i = 0, 1, ..., m-1 in that order (each column is one
// thread walking i, so repeated rows accumulate in order). src [m, cols]; rows, scales [m], device.
cudaError_t LaunchScatterAddScaled(const float* src, const int32_t* rows, const float* scales, int m,
                                   int cols, float* dst, cudaStream_t stream);

// dst[i] = bf16(src[i]) round-to-nearest-even, i < n.  dst is uint16_t bf16 bits.
cudaError_t LaunchF32ToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream);

}  // namespace specgen::kernels
