// The packed product's one definition (engine/core/packed_product.h, docs/design.md §6.11) for a few
// tokens, a half-warp a row: lane s of the half runs slice s of the row (its blocks in ascending order,
// each block's codes dotted with the token's int8 codes by __dp4a, exact), then the half-warp adds the
// sixteen partials by xor shuffles 1, 2, 4, 8, which is the definition's pairwise tree (fp32 addition
// commutes, so both lanes of a pair hold the same bits). So it gives the bits of packed_mma.cuh's
// tensor-core tiles and of the CPU, and the launch may pick either by its token count.
//
// Why a second layout: at a few tokens the tile layout is latency-bound (a 16-row tile's slices,
// a barrier, a tree in shared memory, one block of sixteen warps an SM); here every row is
// independent, a lane issues its slice's loads at once, and no barrier follows the quantization. The
// loads keep L1 (__ldg): a lane reads whole blocks, so one load instruction of a warp touches many
// lines that its next instructions read again. Internal to kernels/: included from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/packed_blocks.cuh"
#include "kernels/packed_mma.cuh"

namespace specgen::kernels::detail {

inline constexpr int kRowMaxTokens = 16;  // tokens a row launch takes at most
inline constexpr int kRowWarps = 8;      // warps a block: 16 rows a step

// f(integral_constant<M>) for the row kernels' token bound M >= n (n <= kRowMaxTokens): 1, 2, 4, 8
// or 16.
template <typename F>
cudaError_t WithRowTokens(int n, F f) {
  static_assert(kRowMaxTokens == 16, "the bounds below end at kRowMaxTokens");
  if (n <= 1) return f(std::integral_constant<int, 1>{});
  if (n <= 2) return f(std::integral_constant<int, 2>{});
  if (n <= 4) return f(std::integral_constant<int, 4>{});
  if (n <= 8) return f(std::integral_constant<int, 8>{});
  return f(std::integral_constant<int, 16>{});
}

// ---- one whole 32-block of a row: its codes as int8 words and its scales ------------------------

__device__ __forceinline__ uint32_t Ldg32(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ uint32_t Ldg16(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }

// kWords little-endian words of the bytes at p (2-byte aligned), as LoadWords2, through L1.
template <int kWords>
__device__ __forceinline__ void LdgWords2(const uint8_t* p, uint32_t (&w)[kWords]) {
  LoadWords2With(p, w, [](const uint8_t* q) { return Ldg32(q); }, [](const uint8_t* q) { return Ldg16(q); });
}

// 32 bytes at a 16-byte aligned p as 8 words.
__device__ __forceinline__ void LdgWords16(const uint8_t* p, uint32_t (&w)[8]) {
  const uint4 a = __ldg(reinterpret_cast<const uint4*>(p)), b = __ldg(reinterpret_cast<const uint4*>(p + 16));
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

// Block b of a row: lo[i] codes 4i .. 4i + 3, hi[i] codes 16 + 4i .. 16 + 4i + 3 (int8 bytes), and the
// scales: MmaBlock<kT>::Load's values for c = 0 .. 3 at once.
template <ElemType kT>
struct RowBlock;

template <>
struct RowBlock<ElemType::kQ8_0> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 34;
    *s = BlockScales{HalfBits(Ldg16(blk)), 0.f, 1, 1, 0};
    uint32_t w[8];
    LdgWords2<8>(blk + 2, w);
#pragma unroll
    for (int i = 0; i < 4; ++i) lo[i] = w[i], hi[i] = w[4 + i];
  }
};

template <>
struct RowBlock<ElemType::kQ4_0> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 18;
    *s = BlockScales{HalfBits(Ldg16(blk)), 0.f, 1, 1, 0};
    uint32_t w[4];
    LdgWords2<4>(blk + 2, w);
#pragma unroll
    for (int i = 0; i < 4; ++i) Q4_0Codes(w[i], &lo[i], &hi[i]);
  }
};

template <bool kFive>
__device__ __forceinline__ void RowK45(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4], BlockScales* s) {
  const uint8_t* sb = row + static_cast<int64_t>(b >> 3) * (kFive ? 176 : 144);
  const int j = b & 7, shift = 4 * (j & 1);
  *s = K45Scales(sb, j);
  uint32_t q[8];
  LdgWords16(sb + (kFive ? 48 : 16) + 32 * (j >> 1), q);
  uint32_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if constexpr (kFive) LdgWords16(sb + 16, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo[i] = K45Codes<kFive>(q[i], h[i], shift, j);
    hi[i] = K45Codes<kFive>(q[4 + i], h[4 + i], shift, j);
  }
}
template <>
struct RowBlock<ElemType::kQ4_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    RowK45<false>(row, b, lo, hi, s);
  }
};
template <>
struct RowBlock<ElemType::kQ5_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    RowK45<true>(row, b, lo, hi, s);
  }
};

template <>
struct RowBlock<ElemType::kQ6_K> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    const uint8_t* sb = row + static_cast<int64_t>(b >> 3) * 210;
    const int j = b & 7, h = j >> 2, r = j & 3;
    *s = Q6Scales(sb, h, r);
    uint32_t ql[8], qh[8];
    LdgWords2<8>(sb + 64 * h + 32 * (r & 1), ql);
    LdgWords2<8>(sb + 128 + 32 * h, qh);
    const int ls = 4 * (r >> 1), hs = 2 * r;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = Q6Codes(ql[i], qh[i], ls, hs);
      hi[i] = Q6Codes(ql[4 + i], qh[4 + i], ls, hs);
    }
  }
};

template <>
struct RowBlock<ElemType::kMXFP4> {
  static __device__ __forceinline__ void Load(const uint8_t* row, int b, uint32_t (&lo)[4], uint32_t (&hi)[4],
                                              BlockScales* s) {
    const uint8_t* blk = row + static_cast<int64_t>(b) * 17;
    *s = BlockScales{Mxfp4Scale(__ldg(blk)), 0.f, 1, 1, 0};
    uint32_t w[4];
    LoadWordsAnyWith(blk + 1, w, [](const uint8_t* q) { return Ldg32(q); });
#pragma unroll
    for (int i = 0; i < 4; ++i) Mxfp4Codes(w[i], &lo[i], &hi[i]);
  }
};

// Asks L1 for the start of the lane's slice of a row of nb blocks (row_bytes long): a hint issued
// before the inputs are quantized, so that a row's first loads overlap that work (nothing reads the
// weights until it is done). The address lies inside the row.
__device__ __forceinline__ void PrefetchSlice(const uint8_t* row, int nb, int64_t row_bytes) {
  const int s = threadIdx.x & (kSliceWarps - 1);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(row + row_bytes * SliceBegin(nb, s) / nb));
}

// ---- a lane's slice, and the half-warp's tree ---------------------------------------------------

// acc[m][t] = p_s of the row rows[m] for token t < n (t < kM), s = the lane's slice: from 0, the c_b of
// blocks [b0, b1) in ascending b. Blocks are loaded kAhead at a time before the first is used.
template <ElemType kT, int kMats, int kM>
__device__ __forceinline__ void RowSlice(const uint8_t* const (&rows)[kMats], int b0, int b1, const SmemActs& a,
                                         int n, float (&acc)[kMats][kM]) {
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int t = 0; t < kM; ++t) acc[m][t] = 0.f;
  constexpr int kAhead = kMats == 1 ? 2 : 1;
  for (int bb = b0; bb < b1; bb += kAhead) {
    uint32_t lo[kAhead][kMats][4], hi[kAhead][kMats][4];
    BlockScales sc[kAhead][kMats];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (bb + u < b1) {
#pragma unroll
        for (int m = 0; m < kMats; ++m) RowBlock<kT>::Load(rows[m], bb + u, lo[u][m], hi[u][m], &sc[u][m]);
      }
    }
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int b = bb + u;
      if (b >= b1) break;
#pragma unroll
      for (int t = 0; t < kM; ++t) {
        if (t >= n) break;
        const uint4* qt = reinterpret_cast<const uint4*>(a.q + static_cast<size_t>(t) * QStride(a.in) + b * kProductBlock);
        const uint4 ql = qt[0], qh = qt[1];
        const float da = a.d[t * a.nb + b];
        const int sa = a.s[t * a.nb + b];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          int dlo = __dp4a(static_cast<int>(lo[u][m][0]), static_cast<int>(ql.x), 0);
          dlo = __dp4a(static_cast<int>(lo[u][m][1]), static_cast<int>(ql.y), dlo);
          dlo = __dp4a(static_cast<int>(lo[u][m][2]), static_cast<int>(ql.z), dlo);
          dlo = __dp4a(static_cast<int>(lo[u][m][3]), static_cast<int>(ql.w), dlo);
          int dhi = __dp4a(static_cast<int>(hi[u][m][0]), static_cast<int>(qh.x), 0);
          dhi = __dp4a(static_cast<int>(hi[u][m][1]), static_cast<int>(qh.y), dhi);
          dhi = __dp4a(static_cast<int>(hi[u][m][2]), static_cast<int>(qh.z), dhi);
          dhi = __dp4a(static_cast<int>(hi[u][m][3]), static_cast<int>(qh.w), dhi);
          acc[m][t] = __fadd_rn(acc[m][t], Contribution<kT>(sc[u][m], dlo, dhi, da, sa));
        }
      }
    }
  }
}

// The definition's pairwise tree of the half-warp's sixteen partials (lane s holds p_s): after the
// shuffles by 1, 2, 4 and 8 every lane of the half holds y.
__device__ __forceinline__ float HalfWarpTree(float p) {
#pragma unroll
  for (int o = 1; o < kSliceWarps; o <<= 1) p = __fadd_rn(p, __shfl_xor_sync(0xffffffffu, p, o));
  return p;
}

// The products of the half-warp's row: out[m][t] (every lane of the half) for kMats matrices' rows
// (each nb blocks of the activations in `a`), tokens t < n.
template <ElemType kT, int kMats, int kM>
__device__ __forceinline__ void RowProducts(const uint8_t* const (&rows)[kMats], const SmemActs& a, int n,
                                            float (&out)[kMats][kM]) {
  const int s = threadIdx.x & (kSliceWarps - 1);
  RowSlice<kT, kMats, kM>(rows, SliceBegin(a.nb, s), SliceBegin(a.nb, s + 1), a, n, out);
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int t = 0; t < kM; ++t) out[m][t] = HalfWarpTree(out[m][t]);
}

}  // namespace specgen::kernels::detail
