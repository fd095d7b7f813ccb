// Attention of a batch of 1..64 new positions over a KV cache, GQA, causal or explicit (tree) mask,
// fp32 softmax with scale 1/sqrt(head_dim) passed in. Keys are processed in fixed chunks of
// kAttentionChunk cache slots whose partial results are merged in slot order, so a query's output
// depends only on the keys it sees, never on how many queries share the pass (batch invariance).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_types.h"
#include "kernels/rope.cuh"

namespace specgen::kernels {

inline constexpr int kAttentionChunk = 256;   // cache slots per partial
inline constexpr int kAttentionMaxQueries = 64;
inline constexpr int kAttentionMaxGroup = 8;  // query heads per KV head

// Bytes of the fp32 scratch LaunchAttention needs for `queries` positions, `heads` query heads,
// `max_keys` = n_past + queries cache slots at most, head size `head_dim`.
size_t AttentionWorkspaceBytes(int queries, int heads, int max_keys, int head_dim);

// out[i, h, :] = sum_j softmax_j(scale * q[i, h] . K[j, h / G]) V[j, h / G], G = heads / kv_heads,
// over the cache slots j that query i sees:
//   every j < n_past (the committed prefix), and the batch's own slots j = n_past + b, b < n, where
//   mask == nullptr: b <= i (causal);  mask != nullptr: mask[i * n + b] != 0 (tree; a node sees its
//   ancestors and itself). A query seeing no key yields zeros.
//   q          [n, heads, head_dim] fp32, device
//   k_cache    [capacity, kv_heads, head_dim] of kv_type (kF32, kF16 or kBF16), device; slots
//              n_past .. n_past + n - 1 already hold the batch's own keys
//   v_cache    same layout and type as k_cache
//   mask       [n, n] uint8 or nullptr, device
//   out        [n, heads, head_dim] fp32, device (must not alias q)
//   n          1..kAttentionMaxQueries;  n_past >= 0
//   head_dim   64, 128 or 256;  heads % kv_heads == 0, heads / kv_heads <= kAttentionMaxGroup
//   workspace  AttentionWorkspaceBytes(n, heads, n_past + n, head_dim) bytes of device memory
//   d_n_past   optional device int32 (for CUDA graphs, which replay fixed arguments): the kernels read
//              the committed length from it, and `n_past` is only its upper bound (grid and workspace
//              are sized for it; chunks past the keys exit at once). Results equal a launch with
//              n_past = *d_n_past bit for bit.
cudaError_t LaunchAttention(const float* q, const void* k_cache, const void* v_cache,
                            ElemType kv_type, const uint8_t* mask, float* out, int n, int n_past,
                            int heads, int kv_heads, int head_dim, float scale, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream,
                            const int32_t* d_n_past = nullptr);
// The same; `programmatic`: launched with programmatic dependent launch (sm_90+, for the decode graph:
// the kernels may start during the previous kernel's tail and wait for it before reading anything, see
// decode_fused.cuh).
cudaError_t LaunchAttention(const float* q, const void* k_cache, const void* v_cache,
                            ElemType kv_type, const uint8_t* mask, float* out, int n, int n_past,
                            int heads, int kv_heads, int head_dim, float scale, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream, const int32_t* d_n_past,
                            bool programmatic);

// Single-query decode attention for a graph-replayed draft step (one new position whose own K/V are
// already in the cache). Unlike LaunchAttention (one warp per 32-key tile, lane per key), each block of
// 8 warps takes one (query head, chunk): one chunk up to 128 slots (head_dim 128; 256 for 64, 64 for
// 256), else up to 16 chunks of whole 64-slot units; warp w takes the chunk's slots w, w + 8, ..., lanes
// split head_dim, and every K and V row of a batch of slots is loaded at once, so up to 1024 slots cost
// one memory round trip in each warp. Chunks are merged in chunk order by the last block of each query
// head to finish (a counter in the workspace), so no merge launch. The reduction order depends only on
// the number of keys seen (never on max_past, the grid or which block finishes last): results are
// deterministic and equal for graph and eager launches; they differ from LaunchAttention's by fp32
// rounding only.
//   q          [heads, head_dim] fp32, device, 16-byte aligned
//   k_cache, v_cache  [capacity >= max_past + 1, kv_heads, head_dim] of kv_type (kF32, kF16 or kBF16),
//              16-byte aligned, device
//   out        [heads, head_dim] fp32, device
//   The query sees slots 0 .. n_past (inclusive), n_past = *d_n_past (device int32 <= max_past; the
//   grid is sized for max_past and blocks past the keys exit at once), or max_past when d_n_past is
//   nullptr. With `programmatic` (PDL) the kernel reads *d_n_past and the cache rows before slot n_past
//   before waiting for the previous kernel: those must not be written by it (the previous kernel may
//   write q and the row of slot n_past).
//   head_dim   32, 64, 128 or 256 (DecodeAttentionTakes);  heads % kv_heads == 0, heads / kv_heads <= kAttentionMaxGroup
//   workspace  DecodeAttentionWorkspaceBytes(heads, kv_heads, max_past + 1, head_dim) bytes, ZEROED
//              once before the first launch (it holds per-query-head counters that every launch
//              leaves at zero); one launch at a time per workspace.
//   (queries: LaunchDecodeAttentionBatch's batch; 1 for the single-query launches.)
size_t DecodeAttentionWorkspaceBytes(int heads, int kv_heads, int max_keys, int head_dim, int queries = 1);
cudaError_t LaunchDecodeAttention(const float* q, const void* k_cache, const void* v_cache,
                                  ElemType kv_type, float* out, int max_past, int heads, int kv_heads,
                                  int head_dim, float scale, void* workspace, size_t workspace_bytes,
                                  const int32_t* d_n_past, cudaStream_t stream, bool programmatic);

// The q/k-norm + RoPE + KV append of the new position (LaunchQkNormRopeAppend with a RoPE table)
// fused into LaunchDecodeAttention, so the graphed draft's layer has one kernel fewer: each block
// normalizes and rotates its query head from q_raw into shared memory; the blocks whose chunk holds the
// new slot (n_past) normalize and rotate that slot's K row themselves, and the first of each kv head's
// blocks writes it and the V row into the caches. The arithmetic is QkNormRopeAppendKernel's
// (warp_norm_rope.cuh), so the caches receive the same bits and the attention output equals the unfused
// pair's.
struct DecodeRopeAppend {
  const float* q_raw = nullptr;        // [heads * head_dim] fp32: the projection's q
  const float* k_raw = nullptr;        // [kv_heads * head_dim] fp32
  const float* v_raw = nullptr;        // [kv_heads * head_dim] fp32
  const void* q_norm = nullptr;        // [head_dim] of norm_type, or null (then k_norm is null too)
  const void* k_norm = nullptr;
  ElemType norm_type = ElemType::kF32;
  float eps = 0.f;
  const float2* rope_table = nullptr;  // LaunchRopeTable(table, >= n_past + 1, head_dim, theta)
  RopeStyle style = RopeStyle::kRotateHalf;
};
// As LaunchDecodeAttention with q replaced by the rotated rope.q_raw; the caches (of kv_type) must be
// writable: the new slot is written here, rounded to kv_type as LaunchQkNormRopeAppend rounds it, and
// the new slot's keys and values enter the attention as stored.
cudaError_t LaunchDecodeAttention(const DecodeRopeAppend& rope, void* k_cache, void* v_cache, ElemType kv_type,
                                  float* out, int max_past, int heads, int kv_heads, int head_dim, float scale,
                                  void* workspace, size_t workspace_bytes, const int32_t* d_n_past,
                                  cudaStream_t stream, bool programmatic);

// The same kernel over a causal batch of `queries` new positions (the Backend's attention for a
// verification pass or a one-token step; the caller stores the batch's K/V rows first): query t sees
// slots 0 .. n_past + t. Query t's output equals, bit for bit, a single-query launch's with n_past + t
// (the reduction order depends only on the keys a query sees), so it does not depend on the batch it
// came in: what keeps target-only and speculative greedy runs token-identical. Launched with
// programmatic dependent launch where the device takes it (the cache rows before n_past are loaded
// before waiting for the previous kernel, the batch's own rows after).
//   q, out     [queries, heads, head_dim] fp32, device, 16-byte aligned
//   queries    1..kDecodeMaxQueries
//   workspace  DecodeAttentionWorkspaceBytes(heads, kv_heads, n_past + queries, head_dim, queries)
//              bytes, ZEROED once before the first launch (per-(query, head) counters every launch
//              leaves at zero); one launch at a time per workspace.
//   d_n_past   optional device int32 (a graph-captured verification, whose arguments are fixed): the
//              committed length is read from it, `n_past` is only its upper bound (grid and workspace
//              are sized for it; blocks past a query's keys return at once), and the results equal a
//              launch with n_past = *d_n_past bit for bit. It must be set before the previous kernel.
inline constexpr int kDecodeMaxQueries = 16;
// The head sizes LaunchDecodeAttention / LaunchDecodeAttentionBatch take.
inline constexpr bool DecodeAttentionTakes(int head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}
cudaError_t LaunchDecodeAttentionBatch(const float* q, const void* k_cache, const void* v_cache,
                                       ElemType kv_type, float* out, int n_past, int queries, int heads,
                                       int kv_heads, int head_dim, float scale, void* workspace,
                                       size_t workspace_bytes, cudaStream_t stream,
                                       const int32_t* d_n_past = nullptr);

}  // namespace specgen::kernels
