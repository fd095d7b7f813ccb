// Device reads of the GGUF block types kept packed in VRAM (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K in their file
// layout, docs/formats.md §2): a lane's chunk of 32 consecutive elements loaded from a row and
// dequantized in registers to the same bits as engine/core/quant.cc's CPU dequantizers (the
// dequantization kernels and the embedding gather use it; the products take the packed product's
// definition, kernels/packed_mma.cuh), and the loads and scale helpers both share.
// Internal to kernels/: included from .cu files only.
//
// Exactness: every product and sum is written with __fmul_rn / __fsub_rn (nvcc would otherwise
// contract a*b - c into one FMA, which the CPU's separately rounded expression does not do), integers
// become floats exactly, and the f16 scales convert exactly; so a dequantized element equals the CPU's
// bit for bit.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/device_util.cuh"
#include "kernels/kernel_types.h"
#include "kernels/type_dispatch.cuh"

namespace specgen::kernels::detail {

inline constexpr int kPackedChunk = 32;  // elements a lane dequantizes at once

// ---- loads -------------------------------------------------------------------------------------

// Weights are read once: the read-only path, kept out of L1 (as LoadWeights16).
__device__ __forceinline__ uint32_t LoadNc32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t LoadNc16(const void* p) {
  unsigned short v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// kWords little-endian 32-bit words of the bytes at p (p 2-byte aligned): aligned words read from
// p & ~3, shifted into place when p is 2 mod 4, in which case the 2 bytes past the aligned words are
// read as such (never a byte past p + 4 kWords). load32 / load16 read one aligned word / half-word.
template <int kWords, typename Load32, typename Load16>
__device__ __forceinline__ void LoadWords2With(const uint8_t* p, uint32_t (&w)[kWords], Load32 load32, Load16 load16) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(a & ~uintptr_t{3});
  const bool odd = (a & 2) != 0;
  uint32_t raw[kWords + 1];
#pragma unroll
  for (int i = 0; i < kWords; ++i) raw[i] = load32(base + 4 * i);
  raw[kWords] = odd ? load16(base + 4 * kWords) : 0u;
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __funnelshift_r(raw[i], raw[i + 1], odd ? 16 : 0);
}
// LoadWords2With through the read-only path, kept out of L1.
template <int kWords>
__device__ __forceinline__ void LoadWords2(const uint8_t* p, uint32_t (&w)[kWords]) {
  LoadWords2With(p, w, [](const uint8_t* q) { return LoadNc32(q); }, [](const uint8_t* q) { return LoadNc16(q); });
}

// kWords little-endian 32-bit words of the bytes at p, any alignment (MXFP4's 17-byte blocks): the
// aligned words from p & ~3, funnel-shifted into place. The word past them is read only when p is not
// aligned, and then holds bytes of the last needed one's aligned word (never past an allocation).
template <int kWords, typename Load32>
__device__ __forceinline__ void LoadWordsAnyWith(const uint8_t* p, uint32_t (&w)[kWords], Load32 load32) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint8_t* base = reinterpret_cast<const uint8_t*>(a & ~uintptr_t{3});
  const uint32_t shift = 8 * static_cast<uint32_t>(a & 3);
  uint32_t raw[kWords + 1];
#pragma unroll
  for (int i = 0; i < kWords; ++i) raw[i] = load32(base + 4 * i);
  raw[kWords] = shift != 0 ? load32(base + 4 * kWords) : 0u;
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __funnelshift_r(raw[i], raw[i + 1], shift);
}
template <int kWords>
__device__ __forceinline__ void LoadWordsAny(const uint8_t* p, uint32_t (&w)[kWords]) {
  LoadWordsAnyWith(p, w, [](const uint8_t* q) { return LoadNc32(q); });
}

// MXFP4: the scale 2^(e - 128) of an E8M0 byte (ggml's halved scale, engine/core/packed_product.cc),
// built from its bits: e >= 2 a normal float, e = 1 and 0 the subnormals 2^-127 and 2^-128.
__device__ __forceinline__ float Mxfp4Scale(uint32_t e) {
  return __uint_as_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e);
}
// Four MXFP4 codes (one a byte, 0..15) as their doubled E2M1 values, int8 bytes: 0 1 2 3 4 6 8 12 and
// their negatives for codes 8..15 (kDoubled in engine/core/quant_mxfp4.cc).
__device__ __forceinline__ uint32_t Mxfp4Values(uint32_t codes) {
  constexpr uint32_t kPos0 = 0x03020100u, kPos1 = 0x0C080604u;  // codes 0..3, 4..7
  constexpr uint32_t kNeg0 = 0xFDFEFF00u, kNeg1 = 0xF4F8FAFCu;  // codes 8..11, 12..15
  // __byte_perm's selector: one nibble a result byte, the code's low three bits.
  const uint32_t sel = (codes & 0x7u) | ((codes >> 4) & 0x70u) | ((codes >> 8) & 0x700u) | ((codes >> 12) & 0x7000u);
  const uint32_t pos = __byte_perm(kPos0, kPos1, sel), neg = __byte_perm(kNeg0, kNeg1, sel);
  const uint32_t negative = ((codes >> 3) & 0x01010101u) * 0xFFu;  // 0xFF where bit 3 is set
  return (pos & ~negative) | (neg & negative);
}

// 2^23 + byte i of v, as a float (exact): the integer's value is then one exact subtraction away.
__device__ __forceinline__ float BiasedByte(uint32_t v, int i) {
  return __int_as_float(static_cast<int>(__byte_perm(v, 0x4B000000u, 0x7440u | static_cast<unsigned>(i))));
}
inline constexpr float kTwo23 = 8388608.0f;

__device__ __forceinline__ float HalfBits(uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h))); }
__device__ __forceinline__ uint32_t ByteOf(uint32_t w, int i) { return (w >> (8 * i)) & 0xFFu; }

// ---- one lane's chunk: raw bytes, then 32 floats ---------------------------------------------------

// What a lane loads for chunk g (elements 32 g .. 32 g + 31 of a row) of each type; Load issues the
// loads, Dequant turns them into the elements in order.
template <ElemType kT>
struct PackedChunk;

// Q8_0: the chunk is block g. y[j] = d · qs[j] (quant.cc DequantQ8_0).
template <>
struct PackedChunk<ElemType::kQ8_0> {
  uint32_t d;
  uint32_t qs[8];
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 34;
    d = LoadNc16(b);
    LoadWords2<8>(b + 2, qs);
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    const float df = HalfBits(d);
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const uint32_t biased = qs[w] ^ 0x80808080u;  // int8 q + 128 as a byte
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fmul_rn(__fsub_rn(BiasedByte(biased, i), kTwo23 + 128.0f), df);
      }
    }
  }
};

// Q4_0: the chunk is block g. y[j] = ((qs[j] & 0xF) − 8)·d, y[j+16] = ((qs[j] >> 4) − 8)·d.
template <>
struct PackedChunk<ElemType::kQ4_0> {
  uint32_t d;
  uint32_t qs[4];
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 18;
    d = LoadNc16(b);
    LoadWords2<4>(b + 2, qs);
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    const float df = HalfBits(d);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t lo = qs[w] & 0x0F0F0F0Fu, hi = (qs[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fmul_rn(__fsub_rn(BiasedByte(lo, i), kTwo23 + 8.0f), df);
        y[16 + 4 * w + i] = __fmul_rn(__fsub_rn(BiasedByte(hi, i), kTwo23 + 8.0f), df);
      }
    }
  }
};

// MXFP4: the chunk is block g. y[j] = v(qs[j] & 0xF)·d, y[j+16] = v(qs[j] >> 4)·d with v the doubled
// E2M1 value and d = 2^(e - 128) (quant_mxfp4.cc DequantizeMxfp4; every product exact).
template <>
struct PackedChunk<ElemType::kMXFP4> {
  uint32_t e;
  uint32_t qs[4];
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g) * 17;
    e = *b;
    LoadWordsAny<4>(b + 1, qs);
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    const float df = Mxfp4Scale(e);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint32_t lo = Mxfp4Values(qs[w] & 0x0F0F0F0Fu), hi = Mxfp4Values((qs[w] >> 4) & 0x0F0F0F0Fu);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(ByteOf(lo, i))), df);
        y[16 + 4 * w + i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(ByteOf(hi, i))), df);
      }
    }
  }
};

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (quant.cc ScaleMinK4), from the 12 scale
// bytes as words s0 (bytes 0..3), s1 (4..7), s2 (8..11).
__device__ __forceinline__ void ScaleMinK4(int j, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t* sc,
                                           uint32_t* m) {
  const int i = j & 3;
  if (j < 4) {
    *sc = ByteOf(s0, i) & 63;
    *m = ByteOf(s1, i) & 63;
  } else {
    *sc = (ByteOf(s2, i) & 0xF) | ((ByteOf(s0, i) >> 6) << 4);
    *m = (ByteOf(s2, i) >> 4) | ((ByteOf(s1, i) >> 6) << 4);
  }
}

// Q4_K: chunk g is sub-block j = g % 8 of block g / 8: elements 64c + 32h + l (c = j / 2, h = j % 2) are
// d·sc[j]·nibble − dmin·m[j], the nibble (low for h = 0) of qs[32c + l] (quant.cc DequantQ4_K).
template <>
struct PackedChunk<ElemType::kQ4_K> {
  uint4 head;  // d, dmin, scales[12]
  uint4 q[2];  // qs[32c .. 32c + 31]
  int j;
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g >> 3) * 144;
    j = g & 7;
    head = LoadWeights16(b);
    q[0] = LoadWeights16(b + 16 + 32 * (j >> 1));
    q[1] = LoadWeights16(b + 32 + 32 * (j >> 1));
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    uint32_t sc, m;
    ScaleMinK4(j, head.y, head.z, head.w, &sc, &m);
    const float d1 = __fmul_rn(HalfBits(head.x & 0xFFFFu), static_cast<float>(sc));
    const float m1 = __fmul_rn(HalfBits(head.x >> 16), static_cast<float>(m));
    const uint32_t words[8] = {q[0].x, q[0].y, q[0].z, q[0].w, q[1].x, q[1].y, q[1].z, q[1].w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const uint32_t nib = (words[w] >> shift) & 0x0F0F0F0Fu;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fsub_rn(__fmul_rn(d1, __fsub_rn(BiasedByte(nib, i), kTwo23)), m1);
      }
    }
  }
};

// Q5_K: as Q4_K plus a fifth bit, bit j of qh[l] (quant.cc DequantQ5_K: u1 = 1 << 2c, u2 = 2 << 2c).
template <>
struct PackedChunk<ElemType::kQ5_K> {
  uint4 head;   // d, dmin, scales[12]
  uint4 qh[2];  // qh[0 .. 31]
  uint4 ql[2];  // qs[32c .. 32c + 31]
  int j;
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g >> 3) * 176;
    j = g & 7;
    head = LoadWeights16(b);
    qh[0] = LoadWeights16(b + 16);
    qh[1] = LoadWeights16(b + 32);
    ql[0] = LoadWeights16(b + 48 + 32 * (j >> 1));
    ql[1] = LoadWeights16(b + 64 + 32 * (j >> 1));
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    uint32_t sc, m;
    ScaleMinK4(j, head.y, head.z, head.w, &sc, &m);
    const float d1 = __fmul_rn(HalfBits(head.x & 0xFFFFu), static_cast<float>(sc));
    const float m1 = __fmul_rn(HalfBits(head.x >> 16), static_cast<float>(m));
    const uint32_t lw[8] = {ql[0].x, ql[0].y, ql[0].z, ql[0].w, ql[1].x, ql[1].y, ql[1].z, ql[1].w};
    const uint32_t hw[8] = {qh[0].x, qh[0].y, qh[0].z, qh[0].w, qh[1].x, qh[1].y, qh[1].z, qh[1].w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      // nibble + 16·bit: bytes of at most 31, no carries between them.
      const uint32_t q = ((lw[w] >> shift) & 0x0F0F0F0Fu) | (((hw[w] >> j) & 0x01010101u) << 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fsub_rn(__fmul_rn(d1, __fsub_rn(BiasedByte(q, i), kTwo23)), m1);
      }
    }
  }
};

// Q6_K: chunk g is quarter r = j % 4 of half h = j / 4 of block g / 8 (j = g % 8): elements
// 128h + 32r + l are d·s[8h + l/16 + 2r]·(q − 32), q = nibble of ql[64h + 32(r % 2) + l] (high for
// r >= 2) | ((qh[32h + l] >> 2r) & 3) << 4 (quant.cc DequantQ6_K, whose (d·s)·q this rounds alike).
template <>
struct PackedChunk<ElemType::kQ6_K> {
  uint32_t ql[8];
  uint32_t qh[8];
  uint32_t sc;  // s[8h + 2r], s[8h + 2r + 1]
  uint32_t d;
  int j;
  __device__ __forceinline__ void Load(const uint8_t* row, int g) {
    const uint8_t* b = row + static_cast<int64_t>(g >> 3) * 210;
    j = g & 7;
    const int h = j >> 2, r = j & 3;
    LoadWords2<8>(b + 64 * h + 32 * (r & 1), ql);
    LoadWords2<8>(b + 128 + 32 * h, qh);
    sc = LoadNc16(b + 192 + 8 * h + 2 * r);
    d = LoadNc16(b + 208);
  }
  __device__ __forceinline__ void Dequant(float (&y)[32]) const {
    const int r = j & 3;
    const float df = HalfBits(d);
    const float ds0 = __fmul_rn(df, static_cast<float>(static_cast<int8_t>(sc & 0xFFu)));
    const float ds1 = __fmul_rn(df, static_cast<float>(static_cast<int8_t>(sc >> 8)));
    const int shift = (r >> 1) * 4;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const uint32_t q = ((ql[w] >> shift) & 0x0F0F0F0Fu) | (((qh[w] >> (2 * r)) & 0x03030303u) << 4);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[4 * w + i] = __fmul_rn(w < 4 ? ds0 : ds1, __fsub_rn(BiasedByte(q, i), kTwo23 + 32.0f));
      }
    }
  }
};

// Elements [32 g, 32 g + 32) of a packed row as fp32, the CPU's bits: the dequantization kernels and the
// packed embedding gather use it.
template <ElemType kT>
__device__ __forceinline__ void DequantChunk(const uint8_t* row, int g, float (&y)[32]) {
  PackedChunk<kT> c;
  c.Load(row, g);
  c.Dequant(y);
}

}  // namespace specgen::kernels::detail
