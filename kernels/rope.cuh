// Rotary position embedding applied in place to q or k, in the two pairings models use: rotate-half
// (HF llama/qwen: element i pairs with i + rot_dim/2) and interleaved (GGUF llama: 2i with 2i+1).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

enum class RopeStyle : uint8_t { kRotateHalf = 0, kInterleaved = 1 };

// For token t, head h, pair index i < rot_dim/2 with inverse frequency f_i = theta^(-2i/rot_dim) and
// angle a = positions[t] * f_i (computed in double, then cos/sin rounded to fp32):
//   (x0, x1) <- (x0 cos a - x1 sin a, x0 sin a + x1 cos a)
// where (x0, x1) = (x[i], x[i + rot_dim/2]) for kRotateHalf, (x[2i], x[2i+1]) for kInterleaved.
//   x          [tokens, heads, head_dim] fp32, device, rotated in place (elements >= rot_dim untouched)
//   positions  [tokens] int32 absolute positions, device
//   rot_dim    rotated prefix of each head (even, <= head_dim); head_dim for full rotary
//   theta      RoPE base (10000, 1e6, ...)
cudaError_t LaunchRope(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
                       int rot_dim, double theta, RopeStyle style, cudaStream_t stream);

// A RoPE whose frequencies are given (scaled RoPE such as YaRN, partial RoPE: Backend::RopePartial):
// pair i < rot_dim / 2 turns by a = positions[t] · inv_freq[i], the product rounded to fp32 as the CPU
// forms it, and cos a, sin a (from double, rounded to fp32) are each multiplied by `factor` (YaRN's
// attention factor; 1 otherwise) before the rotation, whose two products and sum are rounded one by one
// (no FMA): the CPU's arithmetic but for its libm's cosf/sinf (within an ulp of ours).
struct RopeFrequencies {
  const float* inv_freq = nullptr;  // [rot_dim / 2] fp32, device
  int rot_dim = 0;                  // even, <= head_dim; the dims past it are kept
  float factor = 1.0f;
};
cudaError_t LaunchRopeFrequencies(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
                                  const RopeFrequencies& f, RopeStyle style, cudaStream_t stream);

// The attention block's per-head step in one kernel (Backend::NormRopeStore): for each of n tokens,
// every q and k head RMS-normed (when q_norm is set; LaunchRmsNorm's arithmetic with dim = head_dim),
// then rotated with full rotary (LaunchRope's arithmetic), in place; the rotated k and v rows copied
// to cache rows dst_row + t. The same bits as LaunchRmsNorm, LaunchRope and the copies one after the
// other. One block per (token, head): H q heads, then Hkv k heads, then Hkv v heads. Launched with
// programmatic dependent launch where the device takes it (it reads nothing before the previous
// kernel's end).
//   q          [n, heads, head_dim] fp32, device;  k, v  [n, kv_heads, head_dim] fp32, device
//   q_norm, k_norm  [head_dim] of norm_type, device, or both null
//   positions  [n] int32, device;  head_dim even, <= 256
//   k_cache, v_cache  [>= dst_row + n, kv_heads, head_dim] of kv_type (kF32, kF16 or kBF16), device;
//              the rows are rounded to it to nearest even (q and k in place stay fp32)
//   d_base     optional device int32 (a graph-captured verification): token t's position and cache row
//              are *d_base + t (positions and dst_row are then not read); the same bits as a launch
//              with positions[t] = dst_row + t = *d_base + t. It must be set before the previous kernel.
//   freqs      optional: rotate as LaunchRopeFrequencies (theta is then not read), the dims past
//              freqs->rot_dim normed and stored unrotated; the same bits as that launch after the norm
cudaError_t LaunchNormRopeStore(float* q, float* k, const float* v, const void* q_norm, const void* k_norm,
                                ElemType norm_type, float eps, const int32_t* positions, int n, int heads,
                                int kv_heads, int head_dim, double theta, RopeStyle style, void* k_cache,
                                void* v_cache, int64_t dst_row, cudaStream_t stream,
                                const int32_t* d_base = nullptr, ElemType kv_type = ElemType::kF32,
                                const RopeFrequencies* freqs = nullptr);

}  // namespace specgen::kernels
