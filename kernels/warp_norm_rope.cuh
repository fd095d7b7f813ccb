// One warp's q/k-norm + RoPE of a single head, with the arithmetic of QkNormRopeAppendKernel
// (decode_fused.cu): that kernel's block of T = round32(head_dim) threads holds one element per thread,
// sums the squares per warp and then the warp sums with a butterfly; here lane l holds elements
// l, l + 32, ..., and lanes 0..per-1 carry the per-32 sums into the same butterfly, so the results are
// the same bits. Used by the fused decode attention (attention.cu), which appends the same K rows to the
// cache as the unfused path.
// Internal to kernels/: included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include "kernels/device_util.cuh"
#include "kernels/kernel_types.h"
#include "kernels/rope.cuh"

namespace specgen::kernels::detail {

inline constexpr int kMaxNormRopeDim = 256;
inline constexpr int kMaxNormRopePer = kMaxNormRopeDim / 32;  // elements per lane at most

// What one lane of WarpNormRopeValues reads besides the head itself: its elements' norm weights as fp32
// (zero without a norm) and the cos/sin pairs i = lane, lane + 32, ... of the position's table row.
// Constant data: a kernel can load them before waiting for its predecessor (PDL).
struct NormRopeConsts {
  float norm[kMaxNormRopePer];
  float2 cs[kMaxNormRopePer / 2];
};
__device__ __forceinline__ void LoadNormRopeConsts(int D, const void* norm_w, ElemType norm_type,
                                                   const float2* rope, NormRopeConsts* c) {
  const int lane = threadIdx.x & 31, per = (D + 31) / 32, half = D / 2;
#pragma unroll
  for (int e = 0; e < kMaxNormRopePer; ++e) {
    const int i = e * 32 + lane;
    c->norm[e] = norm_w != nullptr && e < per && i < D ? LoadAsF32(norm_w, norm_type, i) : 0.f;
  }
#pragma unroll
  for (int k = 0; k < kMaxNormRopePer / 2; ++k) {
    c->cs[k] = lane + 32 * k < half ? rope[lane + 32 * k] : make_float2(0.f, 0.f);
  }
}

// y[e] holds element e * 32 + lane of the head (zero past D, D even and at most 256). Writes
// dst[0..D) = RoPE(RmsNorm(y; norm weights, eps)) at the position whose cos/sin `c` holds, or RoPE(y)
// when !has_norm. `tmp`: D floats of shared memory (may be dst when dst is shared memory: each lane reads
// and writes only its own pairs). The whole warp calls it.
__device__ __forceinline__ void WarpNormRopeValues(float (&y)[kMaxNormRopePer], int D,
                                                   const NormRopeConsts& c, bool has_norm, float eps,
                                                   RopeStyle style, float* tmp, float* dst) {
  const int lane = threadIdx.x & 31, per = (D + 31) / 32;
  if (has_norm) {
    float t = 0.f;
#pragma unroll
    for (int e = 0; e < kMaxNormRopePer; ++e) {
      if (e < per) {
        const float s = WarpSum(fmaf(y[e], y[e], 0.f));
        if (lane == e) t = s;
      }
    }
    t = WarpSum(t);
    const float inv = rsqrtf(t / static_cast<float>(D) + eps);
#pragma unroll
    for (int e = 0; e < kMaxNormRopePer; ++e) {
      const int i = e * 32 + lane;
      if (e < per && i < D) y[e] = y[e] * inv * c.norm[e];
    }
  }
#pragma unroll
  for (int e = 0; e < kMaxNormRopePer; ++e) {
    const int i = e * 32 + lane;
    if (e < per && i < D) tmp[i] = y[e];
  }
  __syncwarp();
  const int half = D / 2;
#pragma unroll
  for (int k = 0; k < kMaxNormRopePer / 2; ++k) {
    const int i = lane + 32 * k;
    if (i < half) {
      const float cf = c.cs[k].x, sf = c.cs[k].y;
      const int i0 = style == RopeStyle::kRotateHalf ? i : 2 * i;
      const int i1 = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
      const float x0 = tmp[i0], x1 = tmp[i1];
      dst[i0] = x0 * cf - x1 * sf;
      dst[i1] = x0 * sf + x1 * cf;
    }
  }
  __syncwarp();
}

// The same, reading the norm weights (norm_w of norm_type, or null: no norm) and the position's cos/sin
// row `rope` (D / 2 float2) itself.
__device__ __forceinline__ void WarpNormRopeValues(float (&y)[kMaxNormRopePer], int D, const void* norm_w,
                                                   ElemType norm_type, float eps, const float2* rope,
                                                   RopeStyle style, float* tmp, float* dst) {
  NormRopeConsts c;
  LoadNormRopeConsts(D, norm_w, norm_type, rope, &c);
  WarpNormRopeValues(y, D, c, norm_w != nullptr, eps, style, tmp, dst);
}

}  // namespace specgen::kernels::detail
