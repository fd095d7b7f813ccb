// The bf16 small-batch product on tensor cores (GemvOrder::kTensorCores), shared by gemv.cu and
// routed_experts.cu so that both reduce every row in the same order.
//
// A warp owns a 16-row tile and part p of P of the row's 32-input blocks; each thread loads 16 bytes of
// rows g and g + 8 (g = lane / 4) at inputs kb + 8 (lane % 4) .. + 8, which are the A fragments of two
// m16n8k16 steps under a permutation of k that B shares: thread (g, q) supplies x of token g at the
// same 8 inputs, split into bf16 hi + lo (x - hi, rounded), so the products keep ~16 bits of x.
// Sums: per warp hi and lo accumulators (mma order), hi + lo, then the parts in order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/kernel_types.h"

namespace specgen::kernels::detail {

__device__ __forceinline__ void MmaBf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair (lo in the low half), rounded to nearest even.
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// x[0..7] as hi (4 pairs) and lo = x - hi (4 pairs).
__device__ __forceinline__ void SplitX(const float (&v)[8], uint32_t (&h)[4], uint32_t (&l)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    h[i] = PackBf16(v[2 * i], v[2 * i + 1]);
    const float h0 = __uint_as_float(h[i] << 16), h1 = __uint_as_float(h[i] & 0xffff0000u);
    l[i] = PackBf16(v[2 * i] - h0, v[2 * i + 1] - h1);
  }
}

// x_frag for MmaTilePart reading fp32 rows: x_at(t) is token t's inputs; fills inputs k..k+7 split.
template <typename XAt>
__device__ __forceinline__ auto XFromRows(XAt x_at) {
  return [x_at](int t, int k, uint32_t (&h)[4], uint32_t (&l)[4]) {
    const float4* xp = reinterpret_cast<const float4*>(x_at(t) + k);
    const float4 a = __ldg(xp), c = __ldg(xp + 1);
    const float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
    SplitX(v, h, l);
  };
}

// x's inputs [lo, hi) split once per block into shared memory: xs[2 * (t * (hi - lo) / 8 + (k - lo) / 8)]
// holds inputs k..k+7 of token t as hi, + 1 as lo (the same bits SplitX gives in registers). Every
// thread of the block calls it.
__device__ __forceinline__ void StageSplitX(const float* __restrict__ x, int in, int n, int lo, int hi, uint4* xs) {
  const int cw = (hi - lo) / 8, chunks = n * cw;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const int t = c / cw, k = lo + (c - t * cw) * 8;
    const float4* xp = reinterpret_cast<const float4*>(x + static_cast<int64_t>(t) * in + k);
    const float4 a = __ldg(xp), b = __ldg(xp + 1);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint32_t h[4], l[4];
    SplitX(v, h, l);
    xs[2 * c] = make_uint4(h[0], h[1], h[2], h[3]);
    xs[2 * c + 1] = make_uint4(l[0], l[1], l[2], l[3]);
  }
  __syncthreads();
}

// One warp's sums over a 16-row tile's 32-input blocks [b0, b1) in the tensor-core order: sum[e][j][i]
// is matrix e's (kPer: gate and up share x) row g + 8 (i >> 1) of the tile, token j * 8 + 2 q + (i & 1),
// where g = lane / 4, q = lane % 4. wrow[h * kPer + e]: this thread's rows g (h = 0) and g + 8 (h = 1).
// x_frag(t, k, h, l): token t's inputs k..k+7 split as SplitX does (t < n). The first U blocks' weights
// are requested before wait() (the PDL wait of a kernel whose weights do not depend on its predecessor),
// each next U while the current ones are multiplied. The bits of a row depend on its
// weights, x, the blocks [b0, b1) and nothing else: not on the tile's other rows or the other tokens
// (the tensor core computes each output on its own), so any kernel computing the same parts matches.
template <int NT, int kPer, int U, typename XFrag, typename Wait>
__device__ __forceinline__ void MmaTilePart(const uint16_t* const (&wrow)[2 * kPer], bool live, int b0, int b1,
                                            int n, XFrag x_frag, Wait wait, float (&sum)[kPer][NT][4]) {
  constexpr int kA = 2 * kPer;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q = lane & 3;
  float acc_h[kPer][NT][4], acc_l[kPer][NT][4];
#pragma unroll
  for (int e = 0; e < kPer; ++e)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc_h[e][j][i] = acc_l[e][j][i] = 0.f;
  uint4 wa[U][kA];
  const auto load = [&](int b) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = (b + u) * 32 + q * 8;
#pragma unroll
      for (int r = 0; r < kA; ++r) {
        wa[u][r] = (live && b + u < b1) ? detail::LoadWeights16(wrow[r] + k) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  load(b0);
  wait();
  for (int b = b0; b < b1; b += U) {
    uint4 cur[U][kA];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kA; ++r) cur[u][r] = wa[u][r];
    if (b + U < b1) load(b + U);  // the next iteration's weights while these are multiplied
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (b + u >= b1) break;
      const int k = (b + u) * 32 + q * 8;
      uint32_t xh[NT][4], xl[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int t = j * 8 + g;
        if (t < n) {
          x_frag(t, k, xh[j], xl[j]);
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i) xh[j][i] = xl[j][i] = 0u;
        }
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const uint4 ra = cur[u][e], rb = cur[u][kPer + e];  // rows g and g + 8
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          MmaBf16(acc_h[e][j], ra.x, rb.x, ra.y, rb.y, xh[j][0], xh[j][1]);
          MmaBf16(acc_l[e][j], ra.x, rb.x, ra.y, rb.y, xl[j][0], xl[j][1]);
          MmaBf16(acc_h[e][j], ra.z, rb.z, ra.w, rb.w, xh[j][2], xh[j][3]);
          MmaBf16(acc_l[e][j], ra.z, rb.z, ra.w, rb.w, xl[j][2], xl[j][3]);
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kPer; ++e)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[e][j][i] = acc_h[e][j][i] + acc_l[e][j][i];
}

// The parts of a tile are warps warp - warp % P .. + P - 1 of the block: their sums added in part order
// through shared memory. Every warp of the block calls it; true for the part-0 warps, which then hold
// the tile's totals.
template <int W, int P, int kVals>
__device__ __forceinline__ bool AddParts(float* v) {
  if constexpr (P == 1) {
    return true;
  } else {
    __shared__ float xch[W][kVals][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % P;
    if (part != 0) {
#pragma unroll
      for (int i = 0; i < kVals; ++i) xch[warp][i][lane] = v[i];
    }
    __syncthreads();
    if (part != 0) return false;
#pragma unroll
    for (int p = 1; p < P; ++p)
#pragma unroll
      for (int i = 0; i < kVals; ++i) v[i] = v[i] + xch[warp + p][i][lane];
    return true;
  }
}

// Every accumulator sum[.][j][i] of this lane, as MmaTilePart leaves them (the mma.m16n8 C layout):
// f(t, h, j, i) with t its token (column j * 8 + 2 (lane % 4) + i % 2) and h its half of the tile (row
// lane / 4 + 8 h). The epilogues (MmaStoreTile, the routed experts') walk their outputs through it.
template <int NT, typename F>
__device__ __forceinline__ void ForEachTileSum(F f) {
  const int q = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) f(j * 8 + 2 * q + (i & 1), i >> 1, j, i);
}

// The 32-input blocks of part `part` of P over `in` inputs.
__device__ __forceinline__ void PartBlocks(int in, int P, int part, int* b0, int* b1) {
  const int blocks = in / 32, per_part = (blocks + P - 1) / P;
  *b0 = part * per_part;
  *b1 = min(blocks, *b0 + per_part);
}

// Parts a matrix of `rows` x `in` splits each row's inputs over: a function of the shape alone (so of
// no device fact or batch size): the fewest (a power of 2, up to 16) that give 2048 warps, each part
// at least 4 blocks of 32 inputs: enough warps to fill the device without splitting short rows into
// parts whose final sum costs more than the parallelism gains (other targets: docs/experiments.md).
inline int MmaParts(int rows, int in) {
  constexpr int kMaxParts = 16, kTargetWarps = 2048, kMinBlocks = 4;
  const int tiles = (rows + 15) / 16;
  int p = 1;
  while (p < kMaxParts && tiles * p < kTargetWarps && in / 32 / (2 * p) >= kMinBlocks) p *= 2;
  return p;
}

// Whether a product of w_type weights over `in` inputs takes this order (LaunchGemv and every kernel
// that must equal it bit for bit decide by this alone).
inline bool MmaOrder(GemvOrder order, ElemType w_type, int in) {
  return order == GemvOrder::kTensorCores && w_type == ElemType::kBF16 && in % 32 == 0;
}

}  // namespace specgen::kernels::detail
