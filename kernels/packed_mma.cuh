// The packed product's one definition (engine/core/packed_product.h, docs/design.md §6.11) on tensor
// cores: activations quantized per 32-block to int8 in shared memory, each weight block's codes
// multiplied with them by mma.m16n8k16 (s8 x s8 -> s32, exact in any order), the fp32 block terms
// formed and summed in the definition's order. Internal to kernels/: included from .cu files only.
//
// A block of kSliceWarps (16) warps owns a tile of 16 rows; warp s runs the row's blocks of slice s in
// ascending order (its accumulators are the definition's p_s), then the block adds the sixteen
// partials as the definition's pairwise tree. Every token is its own mma column, zero-padded, so a token's bits never
// depend on the tokens beside it, the tile, the grid or the kernel: the product is batch invariant and
// equals the CPU's (engine/core/packed_product.cc) bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/kernel_types.h"
#include "kernels/packed_blocks.cuh"

namespace specgen::kernels::detail {

inline constexpr int kProductBlock = 32;  // packed_product::kBlock
inline constexpr int kSliceWarps = 16;    // packed_product::kSlices
inline constexpr int kTileRows = 16;
inline constexpr int kMaxTokenTiles = 2;  // tokens of one launch: 8 a tile, so up to 16

__host__ __device__ constexpr int SliceBegin(int nb, int s) { return nb * s / kSliceWarps; }

// ---- activations in shared memory --------------------------------------------------------------

// Token t's codes at q + t * QStride(in) (padded so that a tile's 8 tokens read 8 different banks),
// its block scales at d + t * nb, its code sums at s + t * nb.
__host__ __device__ constexpr int QStride(int in) { return in + 16; }
__host__ __device__ constexpr size_t ActsBytes(int tokens, int in) {
  return static_cast<size_t>(tokens) * QStride(in) + static_cast<size_t>(tokens) * (in / kProductBlock) * 8;
}
struct SmemActs {
  int8_t* q;
  float* d;
  int32_t* s;
  int in;
  int nb;
  __device__ static SmemActs Carve(void* smem, int tokens, int in) {
    SmemActs a;
    a.in = in;
    a.nb = in / kProductBlock;
    a.q = static_cast<int8_t*>(smem);
    a.d = reinterpret_cast<float*>(a.q + static_cast<size_t>(tokens) * QStride(in));
    a.s = reinterpret_cast<int32_t*>(a.d + static_cast<size_t>(tokens) * a.nb);
    return a;
  }
};

// Step 1 of the definition for tokens 0 .. padded-1 (load4(t, k): token t's inputs k .. k + 3, k a
// multiple of 4; tokens >= n zero), by the whole block; the caller synchronizes before reading. One
// thread a block of 32: d = amax / 127, q = rint(x · (127 / amax)), s = Σ q; NaN d for a non-finite block.
template <typename Load4>
__device__ __forceinline__ void QuantizeToSmemWith(const SmemActs& a, int n, int padded, Load4 load4) {
  for (int i = threadIdx.x; i < padded * a.nb; i += blockDim.x) {
    const int t = i / a.nb, b = i - t * a.nb;
    uint32_t words[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float d = 0.f;
    int32_t sum = 0;
    if (t < n) {
      float x[32];
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        const float4 f = load4(t, b * kProductBlock + 4 * v);
        x[4 * v] = f.x;
        x[4 * v + 1] = f.y;
        x[4 * v + 2] = f.z;
        x[4 * v + 3] = f.w;
      }
      float amax = 0.f;
      bool finite = true;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        finite &= isfinite(x[j]);
        amax = fmaxf(amax, fabsf(x[j]));
      }
      if (!finite) {
        d = __int_as_float(0x7fc00000);
      } else if (amax > 0.f) {
        d = __fdiv_rn(amax, 127.f);
        const float id = __fdiv_rn(127.f, amax);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int v = min(127, max(-127, __float2int_rn(__fmul_rn(x[j], id))));
          sum += v;
          words[j / 4] |= (static_cast<uint32_t>(v) & 0xFFu) << (8 * (j % 4));
        }
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(a.q + static_cast<size_t>(t) * QStride(a.in) + b * kProductBlock);
    dst[0] = make_uint4(words[0], words[1], words[2], words[3]);
    dst[1] = make_uint4(words[4], words[5], words[6], words[7]);
    a.d[t * a.nb + b] = d;
    a.s[t * a.nb + b] = sum;
  }
}

// QuantizeToSmemWith for inputs in global memory: token t's at row_of(t), 16-byte aligned.
template <typename RowOf>
__device__ __forceinline__ void QuantizeToSmem(const SmemActs& a, int n, int padded, RowOf row_of) {
  QuantizeToSmemWith(a, n, padded, [&row_of](int t, int k) { return __ldg(reinterpret_cast<const float4*>(row_of(t) + k)); });
}

// ---- one 32-block of one weight row: 8 codes of the lane's, and the block's scales -----------------

struct BlockScales {
  float d;
  float dmin;
  int s0;
  int s1;
  int m;
};

// 4 little-endian bytes at a 2-byte aligned address.
__device__ __forceinline__ uint32_t Load4At2(const uint8_t* p) { return LoadNc16(p) | (LoadNc16(p + 2) << 16); }

// ---- a block's codes from the words that hold them, as int8 bytes, for both layouts -------------
// (packed_product.cc UnpackBlock's codes: four a word, the k-th code in byte k % 4)

// Q4_0: the low nibbles of w are codes k (lo), its high nibbles codes 16 + k (hi), less 8.
__device__ __forceinline__ void Q4_0Codes(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = __vsub4(w & 0x0F0F0F0Fu, 0x08080808u);
  *hi = __vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
}
// Q4_K / Q5_K sub-block j: the nibble of qs at `shift` (4 for odd j), with Q5_K's fifth bit j of qh.
template <bool kFive>
__device__ __forceinline__ uint32_t K45Codes(uint32_t qs, uint32_t qh, int shift, int j) {
  const uint32_t low = (qs >> shift) & 0x0F0F0F0Fu;
  if constexpr (kFive) return low | (((qh >> j) & 0x01010101u) << 4);
  return low;
}
// Q6_K: four bits of ql at ls and two of qh at hs, less 32.
__device__ __forceinline__ uint32_t Q6Codes(uint32_t ql, uint32_t qh, int ls, int hs) {
  return __vsub4(((ql >> ls) & 0x0F0F0F0Fu) | (((qh >> hs) & 0x03030303u) << 4), 0x20202020u);
}
// Q6_K sub-block r of half h of super-block sb: d and the two 16-code scales. They serve the
// super-block's 8 sub-blocks: read through L1.
__device__ __forceinline__ BlockScales Q6Scales(const uint8_t* sb, int h, int r) {
  const uint32_t sc = __ldg(reinterpret_cast<const unsigned short*>(sb + 192 + 8 * h + 2 * r));
  const uint32_t d = __ldg(reinterpret_cast<const unsigned short*>(sb + 208));
  return BlockScales{HalfBits(d), 0.f, static_cast<int>(static_cast<int8_t>(sc & 0xFFu)),
                     static_cast<int>(static_cast<int8_t>(sc >> 8)), 0};
}
// MXFP4: as Q4_0, the nibbles' doubled E2M1 values.
__device__ __forceinline__ void Mxfp4Codes(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = Mxfp4Values(w & 0x0F0F0F0Fu);
  *hi = Mxfp4Values((w >> 4) & 0x0F0F0F0Fu);
}

// Codes k = 4c .. 4c + 3 (lo) and 16 + 4c .. 16 + 4c + 3 (hi) of block b of a row, as int8 bytes, with
// the block's scales (packed_product.cc UnpackBlock, the same codes and values).
template <ElemType kT>
struct MmaBlock;

template <>
struct MmaBlock<ElemType::kQ8_0> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 34;
    *s = BlockScales{HalfBits(LoadNc16(blk)), 0.f, 1, 1, 0};
    *lo = Load4At2(blk + 2 + 4 * c);
    *hi = Load4At2(blk + 18 + 4 * c);
  }
};

template <>
struct MmaBlock<ElemType::kQ4_0> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 18;
    *s = BlockScales{HalfBits(LoadNc16(blk)), 0.f, 1, 1, 0};
    Q4_0Codes(Load4At2(blk + 2 + 4 * c), lo, hi);
  }
};

// Sub-block j's scales from its Q4_K/Q5_K super-block sb. The 16-byte head serves the super-block's 8
// sub-blocks: read through L1.
__device__ __forceinline__ BlockScales K45Scales(const uint8_t* sb, int j) {
  const uint4 head = __ldg(reinterpret_cast<const uint4*>(sb));
  uint32_t sc, m;
  ScaleMinK4(j, head.y, head.z, head.w, &sc, &m);
  return BlockScales{HalfBits(head.x & 0xFFFFu), HalfBits(head.x >> 16), static_cast<int>(sc), static_cast<int>(sc),
                     static_cast<int>(m)};
}

template <bool kFive>
__device__ __forceinline__ void LoadK45(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi, BlockScales* s) {
  const uint8_t* sb = row + static_cast<int64_t>(b >> 3) * (kFive ? 176 : 144);
  const int j = b & 7, shift = 4 * (j & 1);
  *s = K45Scales(sb, j);  // (the codes bypass L1)
  const uint8_t* qs = sb + (kFive ? 48 : 16) + 32 * (j >> 1);
  uint32_t qh_lo = 0, qh_hi = 0;
  if constexpr (kFive) qh_lo = LoadNc32(sb + 16 + 4 * c), qh_hi = LoadNc32(sb + 32 + 4 * c);
  *lo = K45Codes<kFive>(LoadNc32(qs + 4 * c), qh_lo, shift, j);
  *hi = K45Codes<kFive>(LoadNc32(qs + 16 + 4 * c), qh_hi, shift, j);
}
template <>
struct MmaBlock<ElemType::kQ4_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    LoadK45<false>(row, b, c, lo, hi, s);
  }
};
template <>
struct MmaBlock<ElemType::kQ5_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    LoadK45<true>(row, b, c, lo, hi, s);
  }
};

template <>
struct MmaBlock<ElemType::kQ6_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    const uint8_t* sb = row + static_cast<int64_t>(b >> 3) * 210;
    const int j = b & 7, h = j >> 2, r = j & 3;
    *s = Q6Scales(sb, h, r);  // (the codes bypass L1)
    const uint8_t* ql = sb + 64 * h + 32 * (r & 1);
    const uint8_t* qh = sb + 128 + 32 * h;
    const int ls = 4 * (r >> 1), hs = 2 * r;
    *lo = Q6Codes(Load4At2(ql + 4 * c), Load4At2(qh + 4 * c), ls, hs);
    *hi = Q6Codes(Load4At2(ql + 16 + 4 * c), Load4At2(qh + 16 + 4 * c), ls, hs);
  }
};

template <>
struct MmaBlock<ElemType::kMXFP4> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, int c, uint32_t* lo, uint32_t* hi,
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 17;
    *s = BlockScales{Mxfp4Scale(__ldg(blk)), 0.f, 1, 1, 0};
    uint32_t w[1];
    LoadWordsAny<1>(blk + 1 + 4 * c, w);
    Mxfp4Codes(w[0], lo, hi);
  }
};

// c_b (packed_product.cc BlockContribution): the same roundings, in the same order.
template <ElemType kT>
__device__ __forceinline__ float Contribution(const BlockScales& s, int lo, int hi, float da, int sa) {
  if constexpr (kT == ElemType::kQ4_K || kT == ElemType::kQ5_K) {
    const float scaled = __fmul_rn(s.d, __int2float_rn(s.s0 * (lo + hi)));
    const float mins = __fmul_rn(s.dmin, __int2float_rn(s.m * sa));
    return __fmul_rn(da, __fsub_rn(scaled, mins));
  } else {
    return __fmul_rn(da, __fmul_rn(s.d, __int2float_rn(s.s0 * lo + s.s1 * hi)));
  }
}

// c[0..3] = A (16 x 16 s8: rows g and g + 8, codes a0 / a1) x B (16 x 8 s8: b0) as mma.m16n8k16.
__device__ __forceinline__ void MmaS8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// ---- a warp's slice of a 16-row tile --------------------------------------------------------------

// acc[m][t][e] += the c_b of blocks [b0, b1) of kMats matrices' tile rows (rows[m][0]: the warp's row
// g = lane / 4 of matrix m, rows[m][1]: row g + 8) for token tiles t < kNT, element e of the mma
// output (e = 0, 1: row g, tokens 8t + 2c, 8t + 2c + 1; e = 2, 3: row g + 8), in ascending b.
template <ElemType kT, int kMats, int kNT>
__device__ __forceinline__ void SliceProducts(const uint8_t* const (&rows)[kMats][2], int b0, int b1,
                                              const SmemActs& a, int ntiles, float (&acc)[kMats][kNT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  constexpr int kAhead = 4 / kMats;  // blocks whose weights are loaded before the first of them is used
  for (int bb = b0; bb < b1; bb += kAhead) {
    uint32_t lo[kAhead][kMats][2], hi[kAhead][kMats][2];
    BlockScales sc[kAhead][kMats][2];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (bb + u < b1) {
#pragma unroll
        for (int m = 0; m < kMats; ++m)
#pragma unroll
          for (int r = 0; r < 2; ++r) MmaBlock<kT>::Load(rows[m][r], bb + u, c, &lo[u][m][r], &hi[u][m][r], &sc[u][m][r]);
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int b = bb + u;
      if (b >= b1) break;
#pragma unroll
      for (int t = 0; t < kNT; ++t) {
        if (t >= ntiles) break;
        const int tok = 8 * t + g;
        const int8_t* qt = a.q + static_cast<size_t>(tok) * QStride(a.in) + b * kProductBlock;
        const uint32_t blo = *reinterpret_cast<const uint32_t*>(qt + 4 * c);
        const uint32_t bhi = *reinterpret_cast<const uint32_t*>(qt + 16 + 4 * c);
        const int t0 = 8 * t + 2 * c;
        const float da[2] = {a.d[t0 * a.nb + b], a.d[(t0 + 1) * a.nb + b]};
        const int sa[2] = {a.s[t0 * a.nb + b], a.s[(t0 + 1) * a.nb + b]};
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          int clo[4], chi[4];
          MmaS8(clo, lo[u][m][0], lo[u][m][1], blo);
          MmaS8(chi, hi[u][m][0], hi[u][m][1], bhi);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[m][t][e] = __fadd_rn(acc[m][t][e], Contribution<kT>(sc[u][m][e >> 1], clo[e], chi[e], da[e & 1], sa[e & 1]));
          }
        }
      }
    }
  }
}

// Shared memory for the slices' partial sums of one tile: [kSliceWarps][kMats][kNT][4][32] floats.
template <int kMats, int kNT>
inline constexpr size_t kPartialBytes = sizeof(float) * kSliceWarps * kMats * kNT * 4 * 32;

// The results a warp ends TileProducts with: token tile t, mma element e (lane (g, c): row g for
// e < 2, else g + 8; token 8 t + 2 c + (e & 1)).
struct TileElement {
  int t;
  int e;
};

// The block's tile: each warp runs its slice (warp % kSliceWarps) into `partial`, the block
// synchronizes, then warp 4 t + e of the slice group sums element e of token tile t (t < ntiles) for
// every matrix: out[m] = the pairwise tree of the sixteen partials (so four warps a token tile share
// the trees instead of one warp summing them all). Returns whether the calling warp holds such an
// element, and which in *el. The caller synchronizes the block before `partial` is written again.
template <ElemType kT, int kMats, int kNT>
__device__ __forceinline__ bool TileProducts(const uint8_t* const (&rows)[kMats][2], const SmemActs& a, int ntiles,
                                             float* partial, float (&out)[kMats], TileElement* el) {
  const int warp = (threadIdx.x >> 5) % kSliceWarps, lane = threadIdx.x & 31;
  float acc[kMats][kNT][4];
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int t = 0; t < kNT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][t][e] = 0.f;
  SliceProducts<kT, kMats, kNT>(rows, SliceBegin(a.nb, warp), SliceBegin(a.nb, warp + 1), a, ntiles, acc);
  const auto at = [&](int w, int m, int t, int e) { return (((w * kMats + m) * kNT + t) * 4 + e) * 32 + lane; };
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int t = 0; t < kNT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[at(warp, m, t, e)] = acc[m][t][e];
  __syncthreads();
  const int t = warp >> 2, e = warp & 3;
  if (warp >= 4 * kNT || t >= ntiles) return false;  // (from this helper only: the caller's loop goes on)
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
    float p[kSliceWarps];
#pragma unroll
    for (int w = 0; w < kSliceWarps; ++w) p[w] = partial[at(w, m, t, e)];
#pragma unroll
    for (int width = kSliceWarps / 2; width >= 1; width /= 2) {
#pragma unroll
      for (int i = 0; i < width; ++i) p[i] = __fadd_rn(p[2 * i], p[2 * i + 1]);
    }
    out[m] = p[0];
  }
  *el = TileElement{t, e};
  return true;
}

}  // namespace specgen::kernels::detail

namespace specgen::kernels::detail {

// Blocks of `kernel` (`threads` a block, `smem` bytes of dynamic shared memory) resident on the current
// device at once, at least 1; raises the kernel's shared-memory limit where smem needs it.
template <typename Kernel>
__host__ cudaError_t ResidentBlocks(Kernel kernel, int threads, size_t smem, int* blocks) {
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (e != cudaSuccess) return e;
  *blocks = sms * (per_sm > 0 ? per_sm : 1);
  return cudaSuccess;
}

// ResidentBlocks for the tile kernels' kSliceWarps warps a block.
template <typename Kernel>
__host__ cudaError_t ResidentProductBlocks(Kernel kernel, size_t smem, int* blocks) {
  return ResidentBlocks(kernel, kSliceWarps * 32, smem, blocks);
}

}  // namespace specgen::kernels::detail
