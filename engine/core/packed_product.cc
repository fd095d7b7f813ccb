#include "engine/core/packed_product.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/half.h"

// This file is compiled with -ffp-contract=off (engine/core/CMakeLists.txt): every product and sum
// below is rounded on its own, as the GPU's __fmul_rn / __fadd_rn / __fsub_rn are.

namespace specgen::packed_product {
namespace {

using Scales = UnpackedRow::Scales;

float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (as quant.cc's ScaleMinK4).
void ScaleMinK4(int j, const uint8_t* q, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// MXFP4's E2M1 codes doubled to integers (quant_mxfp4.cc's kDoubled, ggml's kvalues_mxfp4).
constexpr int8_t kMxfp4Codes[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Block b (32 elements) of a row: its 32 codes into w and its scales.
void UnpackBlock(DType t, const uint8_t* row, int64_t b, int8_t* w, Scales* s) {
  switch (t) {
    case DType::kQ8_0: {
      const uint8_t* blk = row + b * 34;
      *s = Scales{HalfAt(blk), 0.f, 1, 1, 0};
      std::memcpy(w, blk + 2, 32);
      return;
    }
    case DType::kQ4_0: {
      const uint8_t* blk = row + b * 18;
      *s = Scales{HalfAt(blk), 0.f, 1, 1, 0};
      for (int j = 0; j < 16; ++j) {
        w[j] = static_cast<int8_t>((blk[2 + j] & 0xF) - 8);
        w[j + 16] = static_cast<int8_t>((blk[2 + j] >> 4) - 8);
      }
      return;
    }
    case DType::kMXFP4: {  // as Q4_0: element j < 16 the low nibble of byte j, j + 16 its high one
      const uint8_t* blk = row + b * 17;
      *s = Scales{Mxfp4Scale(blk[0]), 0.f, 1, 1, 0};
      for (int j = 0; j < 16; ++j) {
        w[j] = kMxfp4Codes[blk[1 + j] & 0xF];
        w[j + 16] = kMxfp4Codes[blk[1 + j] >> 4];
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool five = t == DType::kQ5_K;
      const uint8_t* blk = row + (b / 8) * (five ? 176 : 144);
      const int j = static_cast<int>(b % 8), c = j / 2, shift = 4 * (j % 2);
      int32_t sc, m;
      ScaleMinK4(j, blk + 4, &sc, &m);
      *s = Scales{HalfAt(blk), HalfAt(blk + 2), sc, sc, m};
      const uint8_t* qs = blk + (five ? 48 : 16) + 32 * c;
      const uint8_t* qh = blk + 16;
      for (int l = 0; l < 32; ++l) {
        int v = (qs[l] >> shift) & 0xF;
        if (five) v |= ((qh[l] >> j) & 1) << 4;
        w[l] = static_cast<int8_t>(v);
      }
      return;
    }
    case DType::kQ6_K: {
      const uint8_t* blk = row + (b / 8) * 210;
      const int j = static_cast<int>(b % 8), h = j / 4, r = j % 4;
      const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
      *s = Scales{HalfAt(blk + 208), 0.f, sc[8 * h + 2 * r], sc[8 * h + 2 * r + 1], 0};
      const uint8_t* ql = blk + 64 * h + 32 * (r % 2);
      const uint8_t* qh = blk + 128 + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int v = ((ql[l] >> (4 * (r / 2))) & 0xF) | (((qh[l] >> (2 * r)) & 3) << 4);
        w[l] = static_cast<int8_t>(v - 32);
      }
      return;
    }
    default:
      return;
  }
}

int32_t Dot16(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += static_cast<int32_t>(a[i]) * static_cast<int32_t>(b[i]);
  return s;
}

// c_b from the block's two 16-code dots (lo: codes 0..15, hi: 16..31) with the activation block's
// scale da and code sum sa. Every integer here is below 2^24 in magnitude (|Q6_K's s·dot| sum is at
// most 2·128·16·32·127 < 2^24; MXFP4's lo + hi at most 32·12·127), so its conversion to fp32 is
// exact. Q8_0, Q4_0, Q6_K and MXFP4 take the second form (s0 = s1 = 1 but for Q6_K).
float BlockContribution(DType t, const Scales& s, int32_t lo, int32_t hi, float da, int32_t sa) {
  if (t == DType::kQ4_K || t == DType::kQ5_K) {
    const float scaled = s.d * static_cast<float>(s.s0 * (lo + hi));
    const float mins = s.dmin * static_cast<float>(s.m * sa);
    return da * (scaled - mins);
  }
  return da * (s.d * static_cast<float>(s.s0 * lo + s.s1 * hi));
}

}  // namespace

bool Covers(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ||
         t == DType::kMXFP4;
}

float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : e == 1 ? 0x00400000u : 0x00200000u;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void QuantizeActivations(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    int8_t* qb = q + b * kBlock;
    float amax = 0.f;
    bool finite = true;
    for (int i = 0; i < kBlock; ++i) {
      finite &= std::isfinite(xb[i]);
      amax = std::max(amax, std::fabs(xb[i]));
    }
    if (!finite) {
      d[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill_n(qb, kBlock, int8_t{0});
      sum[b] = 0;
      continue;
    }
    const float db = amax / 127.f;
    const float id = amax > 0.f ? 127.f / amax : 0.f;
    int32_t s = 0;
    for (int i = 0; i < kBlock; ++i) {
      const int v = std::clamp(static_cast<int>(std::nearbyint(xb[i] * id)), -127, 127);
      qb[i] = static_cast<int8_t>(v);
      s += v;
    }
    d[b] = db;
    sum[b] = s;
  }
}

void UnpackedRow::Unpack(DType t, const uint8_t* row, int64_t k) {
  type_ = t;
  const int64_t nb = k / kBlock;
  codes_.resize(static_cast<size_t>(k));
  scales_.resize(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) UnpackBlock(t, row, b, codes_.data() + b * kBlock, &scales_[b]);
}

float UnpackedRow::Product(const int8_t* q, const float* d, const int32_t* sum) const {
  const int64_t nb = static_cast<int64_t>(scales_.size());
  float p[kSlices];
  for (int s = 0; s < kSlices; ++s) {
    float acc = 0.f;
    for (int64_t b = SliceBegin(nb, s); b < SliceBegin(nb, s + 1); ++b) {
      const int8_t* w = codes_.data() + b * kBlock;
      const int8_t* a = q + b * kBlock;
      acc = acc + BlockContribution(type_, scales_[b], Dot16(w, a), Dot16(w + 16, a + 16), d[b], sum[b]);
    }
    p[s] = acc;
  }
  for (int width = kSlices / 2; width >= 1; width /= 2) {  // the pairwise tree
    for (int i = 0; i < width; ++i) p[i] = p[2 * i] + p[2 * i + 1];
  }
  return p[0];
}

float RowProduct(DType t, const uint8_t* row, int64_t k, const int8_t* q, const float* d, const int32_t* sum) {
  UnpackedRow r;
  r.Unpack(t, row, k);
  return r.Product(q, d, sum);
}

}  // namespace specgen::packed_product
