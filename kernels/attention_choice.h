// Which attention kernel (kernels/attention.cuh) takes a problem: the one answer the CUDA backend's
// Attention and the graphed draft both follow, so that a draft decoding through its own kernels sums
// in the same order as the Transformer on the same backend.
#pragma once

#include <cstdint>

#include "kernels/attention.cuh"

namespace specgen::kernels {

enum class AttentionKernel : uint8_t {
  kDecode = 0,   // LaunchDecodeAttention / LaunchDecodeAttentionBatch
  kChunked = 1,  // LaunchAttention
  kSimple = 2,   // LaunchAttentionSimple: whatever the other two do not take
};

struct AttentionProblem {
  int head_dim = 0;
  int heads = 0;
  int kv_heads = 0;
  int queries = 1;
  bool masked = false;          // an explicit (tree) mask rather than causal
  bool caches_aligned = true;   // the K/V caches 16-byte aligned (the decode kernel's vector loads)
  bool sinks_or_window = false; // gpt-oss's sinks or a sliding window: only the simple kernel has them
};

// The decode kernel for a causal batch of up to kDecodeMaxQueries over aligned caches with a head size
// it takes; else the chunked kernel for head_dim 64/128/256 and up to kAttentionMaxQueries; else the
// simple one. Both fast kernels take at most kAttentionMaxGroup query heads per KV head. Sinks and
// windows go to the simple kernel whatever the shape (LaunchAttentionSimple's AttentionSinksWindow).
constexpr AttentionKernel ChooseAttentionKernel(const AttentionProblem& p) {
  if (p.sinks_or_window) return AttentionKernel::kSimple;
  const bool group_fits = p.kv_heads > 0 && p.heads / p.kv_heads <= kAttentionMaxGroup;
  if (!p.masked && p.queries <= kDecodeMaxQueries && DecodeAttentionTakes(p.head_dim) && group_fits &&
      p.caches_aligned) {
    return AttentionKernel::kDecode;
  }
  if ((p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) && p.queries <= kAttentionMaxQueries &&
      group_fits) {
    return AttentionKernel::kChunked;
  }
  return AttentionKernel::kSimple;
}

}  // namespace specgen::kernels
