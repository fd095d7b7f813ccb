// The attention for the shapes the decode and chunked kernels (kernels/attention.cuh) do not take:
// K/V of any cache type, any head_dim up to 256, any GQA group (kernels/attention_choice.h decides).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

// Attention with the semantics of LaunchAttention (kernels/attention.cuh) for K/V of kv_type and any
// head_dim <= 256 and any GQA group: one warp per (query, head) takes the keys in tiles of 32 slots
// (a lane a slot's dot product, then the tile's V rows in slot order) with an online softmax (fp32).
// Used for the head sizes the chunked kernels do not take (the bundled draft's 32).
//   q [n, heads, head_dim] fp32, k_cache/v_cache [capacity, kv_heads, head_dim] of kv_type (kF32, kF16 or
//   kBF16), mask [n, n] or null,
//   out [n, heads, head_dim] fp32 (must not alias q). A query that sees no key yields zeros.
//   d_n_past: optional device int32 read instead of n_past (CUDA graphs), as in LaunchAttention.
cudaError_t LaunchAttentionSimple(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, cudaStream_t stream,
                                  const int32_t* d_n_past = nullptr);

// gpt-oss's attention (ModelFeature::kAttentionSinks, kSlidingWindow; Backend's AttentionShape), which
// only this kernel computes (ChooseAttentionKernel sends such problems here):
//   sinks   [heads] of sinks_type, or null: head h's softmax counts e^sinks[h] in its denominator only
//           (it joins the max as a key with no value would: the online softmax starts from it)
//   window  > 0: query i (at positions[i]) sees only slots holding positions > positions[i] − window;
//           a prefix slot j holds position j, batch slot n_past + b holds positions[b]. 0: no window.
//   positions [n] int32, device (needed with a window)
// Tiles wholly before a query's window are skipped: they would add nothing, so the arithmetic is that
// of the unwindowed kernel over the visible slots, and still independent of the batch.
struct AttentionSinksWindow {
  const void* sinks = nullptr;
  ElemType sinks_type = ElemType::kF32;
  int window = 0;
  const int32_t* positions = nullptr;
};
cudaError_t LaunchAttentionSimple(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type,
                                  const uint8_t* mask, float* out, int n, int n_past, int heads,
                                  int kv_heads, int head_dim, float scale, const AttentionSinksWindow& extra,
                                  cudaStream_t stream);

}  // namespace specgen::kernels
