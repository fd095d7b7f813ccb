// Fused kernels for the single-token decode of a dense model (the resident draft's CUDA graph):
// RMSNorm folded into the GEMV's prologue, several weight matrices (bf16, f16, or packed GGUF blocks)
// in one launch, SwiGLU and the
// residual add in the GEMV's epilogue, q/k-norm + RoPE + KV append in one launch. Nothing reads a
// host value that changes per token: the position and the cache row come from device memory, so a
// captured graph replays for every token. Each output is computed with exactly the operations, in
// exactly the order, of the unfused kernels (norm.cu, gemv.cu, rope.cu, elementwise.cu), so the fused
// path is bit-identical to the Backend ops it replaces (and so batch invariant as they are).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/gemv.cuh"  // GemvSegment, GemvEpilogue
#include "kernels/kernel_types.h"
#include "kernels/programmatic_launch.cuh"
#include "kernels/rope.cuh"

namespace specgen::kernels {

// Per-token device state of a graph-replayed decode step.
struct DecodeState {
  int32_t token;  // the input token id
  int32_t pos;    // its position = the KV row it is stored at = the committed cache length
};

// state->token = device_token ? *device_token : host_token; state->pos = pos. One thread.
cudaError_t LaunchSetDecodeState(DecodeState* state, const int32_t* device_token, int32_t host_token,
                                 int32_t pos, cudaStream_t stream);

// A decode step's input, as one kernel: LaunchSetDecodeState's state (token = *device_token when set,
// else host_token; pos) and LaunchEmbedding's row of that token into out (NaN for a token outside
// [0, vocab)). The graphed draft's first node: SetDecodeInputNodeArgs gives it each replay's token and
// position, so a replayed token is one graph launch and nothing else (no state kernel queued between
// two replays; see GraphedDraft::Decode).
struct DecodeInput {
  DecodeState* state = nullptr;
  const int32_t* device_token = nullptr;  // or null: host_token
  int32_t host_token = 0;
  int32_t pos = 0;
  const void* table = nullptr;  // [vocab, dim] of table_type (a 16-bit, f32 or packed type), device
  ElemType table_type = ElemType::kBF16;
  int64_t vocab = 0;
  int dim = 0;
  float* out = nullptr;  // [dim] fp32, device
};
cudaError_t LaunchDecodeInput(const DecodeInput& in, cudaStream_t stream);
// Replaces the arguments of a captured LaunchDecodeInput in `exec` (effective from its next launch;
// launches already queued keep theirs). `node`: that launch's node in the graph `exec` was instantiated
// from.
cudaError_t SetDecodeInputNodeArgs(cudaGraphExec_t exec, cudaGraphNode_t node, const DecodeInput& in);

// One token: y = epilogue(x' · W^T) over up to 3 segments (rows concatenated, one launch), where
// x' = RmsNorm(x; norm_w, eps) over all `in` elements (as LaunchRmsNorm with dim = in) when norm_w is
// set, else x. Reduction order per output is LaunchGemv's (lane l sums k = l*8 + 256*s + j with fmaf,
// then the butterfly), so results equal LaunchRmsNorm + LaunchGemv (+ LaunchAdd / LaunchSwiGlu) bit
// for bit.
//   x         [in] fp32, device (may not alias any y)
//   norm_w    [in] of norm_type, device, or nullptr
//   in        multiple of 8, at most kFusedGemvMaxIn
//   max_blocks  grid cap (rows are walked grid-stride by warps; results do not depend on it)
// x (and the norm weights) are staged in 32 KB of shared memory each.
inline constexpr int kFusedGemvMaxIn = 8192;
cudaError_t LaunchFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                            const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                            GemvEpilogue epilogue, int max_blocks, cudaStream_t stream);
// The same, launched with programmatic dependent launch when `programmatic` (sm_90+; see
// kernels/programmatic_launch.cuh): the first row's weight loads are issued before waiting for the previous kernel.
// rows_per_warp > 0: a grid of just enough blocks (at most max_blocks) for each warp to have that many
// output rows (kSwiGlu: row pairs); 0: max_blocks.
cudaError_t LaunchFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                            const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                            GemvEpilogue epilogue, int max_blocks, cudaStream_t stream,
                            bool programmatic, int rows_per_warp = 0);

// LaunchFusedGemv for packed weights (IsPacked(w_type); kernels/decode_fused_packed.cu), which
// LaunchFusedGemv hands them to: the input staged and normed as above, then each row's product in the
// packed product of the packed kernels (kernels/packed_mma.cuh) and the epilogues of
// LaunchPackedGemvSegments, so the results equal LaunchRmsNorm + LaunchGemvSegments on packed weights
// bit for bit. `in` a whole number of blocks.
cudaError_t LaunchPackedFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                                  const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                                  GemvEpilogue epilogue, int max_blocks, cudaStream_t stream, bool programmatic,
                                  int rows_per_warp);

// One token, after the q/k/v projections: per head, optional RMSNorm over head_dim (q_norm / k_norm,
// as LaunchRmsNorm with dim = head_dim), RoPE at position state->pos (as LaunchRope, rot_dim =
// head_dim), then q → q_out, k → k_cache row state->pos, v → v_cache row state->pos (rounded to
// kv_type to nearest even, as Backend::NormRopeStore stores them).
//   q [heads*d], k, v [kv_heads*d] fp32, device;  q_out [heads*d] fp32 (may be q)
//   q_norm, k_norm [d] of norm_type or both nullptr (no q/k norm)
//   k_cache, v_cache [capacity, kv_heads*d] of kv_type (kF32, kF16 or kBF16), device; state->pos <
//   capacity is the caller's duty
//   head_dim  even, at most 256
cudaError_t LaunchQkNormRopeAppend(const float* q, const float* k, const float* v, float* q_out,
                                   const void* q_norm, const void* k_norm, ElemType norm_type,
                                   float eps, void* k_cache, void* v_cache, ElemType kv_type,
                                   const DecodeState* state, int heads, int kv_heads, int head_dim, double theta,
                                   RopeStyle style, cudaStream_t stream);

// RoPE's cos/sin for positions 0..positions-1 (rot_dim = head_dim): table[pos * head_dim/2 + i] =
// {cos, sin} of pos * theta^(-2i/head_dim), computed in double and rounded to float exactly as
// LaunchRope does per call, so a kernel reading the table rotates bit-identically.
//   table  [positions * head_dim / 2] float2, device
cudaError_t LaunchRopeTable(float2* table, int positions, int head_dim, double theta,
                            cudaStream_t stream);

// LaunchQkNormRopeAppend with cos/sin read from `rope_table` (LaunchRopeTable with the same head_dim
// and theta, at least state->pos + 1 positions) instead of computed per call (double pow + sincos per
// thread, the kernel's largest cost); same results bit for bit. `programmatic`: PDL launch (sm_90+).
cudaError_t LaunchQkNormRopeAppend(const float* q, const float* k, const float* v, float* q_out,
                                   const void* q_norm, const void* k_norm, ElemType norm_type,
                                   float eps, void* k_cache, void* v_cache, ElemType kv_type,
                                   const DecodeState* state, int heads, int kv_heads, int head_dim,
                                   const float2* rope_table, RopeStyle style, cudaStream_t stream,
                                   bool programmatic);

}  // namespace specgen::kernels
