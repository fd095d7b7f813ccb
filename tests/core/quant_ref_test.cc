// The quantizers that follow ggml's reference ones (Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K):
// blocks whose bytes are worked out by hand below (each expectation says how), and round trips of
// random rows with error bounds derived from each block's own step size.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/core/quant_k_ref.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

uint16_t U16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::vector<uint8_t> Quant(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> b(*RowBytes(t, static_cast<int64_t>(x.size())), 0xEE);
  absl::Status s = QuantizeRow(t, x.data(), static_cast<int64_t>(x.size()), b.data());
  EXPECT_TRUE(s.ok()) << s;
  return b;
}
std::vector<float> Dequant(DType t, const std::vector<uint8_t>& b, size_t n) {
  std::vector<float> y(n, std::nanf(""));
  EXPECT_TRUE(DequantizeRow(t, b.data(), static_cast<int64_t>(n), y.data()).ok());
  return y;
}

TEST(NearestInt, RoundsHalfToEven) {
  using quant_rows::NearestInt;
  EXPECT_EQ(NearestInt(0.5f), 0);
  EXPECT_EQ(NearestInt(1.5f), 2);
  EXPECT_EQ(NearestInt(2.5f), 2);
  EXPECT_EQ(NearestInt(-0.5f), 0);
  EXPECT_EQ(NearestInt(-1.5f), -2);
  EXPECT_EQ(NearestInt(3.7f), 4);
  EXPECT_EQ(NearestInt(-3.2f), -3);
  EXPECT_EQ(NearestInt(4194303.f), 4194303);
}

// amax = 127/128, so d = 1/128 (f16 0x2000: exponent -7) and q = x·128, rounded half away from zero.
TEST(QuantRef, Q8_0HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f / 128;
  x[1] = -127.0f / 128;
  x[2] = 2.5f / 128;   // roundf: 3 (not the even 2)
  x[3] = -2.5f / 128;  // -3
  x[4] = 0.4f / 128;   // 0
  x[5] = 5.0f / 128;
  const std::vector<uint8_t> b = Quant(DType::kQ8_0, x);
  EXPECT_EQ(U16(b.data()), 0x2000);
  const auto* q = reinterpret_cast<const int8_t*>(b.data() + 2);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 3);
  EXPECT_EQ(q[3], -3);
  EXPECT_EQ(q[4], 0);
  EXPECT_EQ(q[5], 5);
  for (int j = 6; j < 32; ++j) EXPECT_EQ(q[j], 0) << j;
}

// v = 1 is the largest magnitude, so d = 1 / -8 = -0.125 (f16 0xB000) and level = min(15, trunc(-8x +
// 8.5)): x = 1 → 0; x = 0.5 → 4; x = -1 → 16.5 → clamped 15; x = 0.0625 → 8; x = 0.1875 → 7 (the
// tie -1.5 + 8.5 = 7 rounds up in level space).
TEST(QuantRef, Q4_0HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.5f;
  x[2] = -1.0f;
  x[3] = 0.0625f;
  x[16] = 0.1875f;
  const std::vector<uint8_t> b = Quant(DType::kQ4_0, x);
  EXPECT_EQ(U16(b.data()), 0xB000);
  const uint8_t* qs = b.data() + 2;
  EXPECT_EQ(qs[0], 0 | (7 << 4));  // x[0] low nibble, x[16] high nibble
  EXPECT_EQ(qs[1], 4 | (8 << 4));  // x[1]; x[17] = 0 → 8
  EXPECT_EQ(qs[2], 15 | (8 << 4));
  EXPECT_EQ(qs[3], 8 | (8 << 4));
}

// v = 2 → d = 2 / -16 = -0.125 (0xB000); level = min(31, trunc(-8x + 16.5)): x = 2 → 0, x = -2 → 32
// → 31, x = 0 → 16, x = 0.25 → 14, x = -0.5 → 20. Low nibbles pair j with j+16; fifth bits go to bit j
// (or j+16) of qh: levels 16, 31 and 20 have it, 0 and 14 do not.
TEST(QuantRef, Q5_0HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 2.0f;
  x[1] = -2.0f;
  x[2] = 0.25f;
  x[16] = -0.5f;
  const std::vector<uint8_t> b = Quant(DType::kQ5_0, x);
  EXPECT_EQ(U16(b.data()), 0xB000);
  uint32_t want_qh = 0;
  for (int j = 0; j < 32; ++j) {
    const bool high = !(j == 0 || j == 2);  // every other level is >= 16
    want_qh |= (high ? 1u : 0u) << j;
  }
  EXPECT_EQ(U32(b.data() + 2), want_qh);
  const uint8_t* qs = b.data() + 6;
  EXPECT_EQ(qs[0], (0 & 15) | ((20 & 15) << 4));
  EXPECT_EQ(qs[1], (31 & 15) | ((16 & 15) << 4));
  EXPECT_EQ(qs[2], (14 & 15) | ((16 & 15) << 4));
  const std::vector<float> y = Dequant(DType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 2.0f);
  EXPECT_EQ(y[1], -1.875f);  // (31 - 16) · -0.125: the clamped end
  EXPECT_EQ(y[2], 0.25f);
  EXPECT_EQ(y[16], -0.5f);
}

// min = -1, max = 2.875 → d = 3.875 / 31 = 0.125 (0x3000), m = -1 (0xBC00); level = trunc(8(x + 1) +
// 0.5): -1 → 0, 2.875 → 31, 0 → 8, 0.0625 → 9 (the tie rounds up), 1 → 16.
TEST(QuantRef, Q5_1HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = -1.0f;
  x[1] = 2.875f;
  x[2] = 0.0625f;
  x[17] = 1.0f;
  const std::vector<uint8_t> b = Quant(DType::kQ5_1, x);
  EXPECT_EQ(U16(b.data()), 0x3000);
  EXPECT_EQ(U16(b.data() + 2), 0xBC00);
  EXPECT_EQ(U32(b.data() + 4), (1u << 1) | (1u << 17));  // only levels 31 and 16 have the fifth bit
  const uint8_t* qs = b.data() + 8;
  EXPECT_EQ(qs[0], 0 | (8 << 4));
  EXPECT_EQ(qs[1], 15 | (0 << 4));  // 31 & 15; x[17]: 16 & 15 = 0
  EXPECT_EQ(qs[2], 9 | (8 << 4));
}

// x = k/8 with every sub-block spanning levels 0..nmax exactly: the first grid of the search fits
// with zero error, so each sub-block's scale is 1/8 and its min 0; all scales are then the largest
// (6-bit 63) and all mins 0. d = f16(0.125 / 63) = 2^-9 · (1 + 16/1024) = 0x1810, dmin = 0, and
// the packed 6-bit scales read {0xFF ×4 (63 | top bits of the upper scales), 0 ×4 (mins), 0x0F ×4}.
// The levels are k again, since d·63 differs from 1/8 by less than 2^-11 relative.
void CheckKHandBlock(DType t, int nmax) {
  std::vector<float> x(256);
  std::vector<int> k(256);
  for (int i = 0; i < 256; ++i) {
    k[i] = (i * 7 + 3) % (nmax + 1);
    if (i % 32 == 0) k[i] = 0;
    if (i % 32 == 1) k[i] = nmax;
    x[i] = k[i] / 8.0f;
  }
  const std::vector<uint8_t> b = Quant(t, x);
  EXPECT_EQ(U16(b.data()), 0x1810);
  EXPECT_EQ(U16(b.data() + 2), 0x0000);
  const uint8_t want_scales[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F};
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 4, b.begin() + 16),
            std::vector<uint8_t>(want_scales, want_scales + 12));
  const std::vector<float> y = Dequant(t, b, 256);
  const float step = F16ToF32(0x1810) * 63;
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], step * k[i]) << i;
}

TEST(QuantRef, Q4_KHandBlock) { CheckKHandBlock(DType::kQ4_K, 15); }
TEST(QuantRef, Q5_KHandBlock) { CheckKHandBlock(DType::kQ5_K, 31); }

// x = k/16 with k in -32..31 and -32 in every 16-element sub-block: the grid through the largest
// magnitude (-32/16) fits exactly, so every sub-block's scale is 1/16; then d = 1 / (-128 · 16) =
// -2^-11 (f16 0x9000), every 8-bit scale is -128 (0x80), and the levels are k + 32 again.
TEST(QuantRef, Q6_KHandBlock) {
  std::vector<float> x(256);
  std::vector<int> k(256);
  for (int i = 0; i < 256; ++i) {
    k[i] = (i * 5 + 11) % 64 - 32;
    if (i % 16 == 0) k[i] = -32;
    x[i] = k[i] / 16.0f;
  }
  const std::vector<uint8_t> b = Quant(DType::kQ6_K, x);
  EXPECT_EQ(U16(b.data() + 208), 0x9000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[192 + j], 0x80) << j;
  // Element 0 (level 0) and element 64 (level k[64] + 32) share ql[0]; qh[0] holds the top two
  // bits of elements 0, 32, 64 and 96.
  const int l0 = k[0] + 32, l32 = k[32] + 32, l64 = k[64] + 32, l96 = k[96] + 32;
  EXPECT_EQ(b[0], (l0 & 15) | ((l64 & 15) << 4));
  EXPECT_EQ(b[32], (l32 & 15) | ((l96 & 15) << 4));
  EXPECT_EQ(b[128], (l0 >> 4) | ((l32 >> 4) << 2) | ((l64 >> 4) << 4) | ((l96 >> 4) << 6));
  const std::vector<float> y = Dequant(DType::kQ6_K, b, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], x[i]) << i;
}

TEST(QuantRef, ZeroBlocksStayZero) {
  for (DType t : {DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const std::vector<float> x(256, 0.0f);
    const std::vector<float> y = Dequant(t, Quant(t, x), 256);
    for (float v : y) EXPECT_EQ(v, 0.0f) << Name(t);
  }
}

// Random rows: Gaussian, uniform, all-positive, with an outlier, and tiny values (kind 4, whose
// block scales fall in f16's subnormal range).
constexpr int kKinds = 5;
std::vector<float> RandomRow(int kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(2048);
  for (float& v : x) {
    switch (kind) {
      case 0: v = normal(rng); break;
      case 1: v = uni(rng); break;
      case 2: v = std::fabs(normal(rng)) + 0.5f; break;
      case 3: v = normal(rng) * 0.02f; break;
      default: v = normal(rng) * 1e-4f; break;
    }
  }
  if (kind == 3) x[700] = 1.0f;
  return x;
}

// Q6_K, per 16-element sub-block j with step s_j = d·sc_j: an element inside the grid [-32 s, 31 s]
// is within s/2; the grid is the fitted one stretched by the 8-bit rounding of sc_j (at most d/2 per
// level, 32 levels from the centre), and elements of the sign opposite the sub-block's largest may
// clamp at level 31, one step short: so |err| <= |s_j| + 16|d| (plus float rounding).
TEST(QuantRefRoundTrip, Q6_KWithinOneStepPlusScaleRounding) {
  // Not kind 4: a K-quant's super-block scale d is an f16 far below the data (here ~1e-7, subnormal,
  // a few significant bits), so tiny weights lose their precision in the format itself.
  for (int kind = 0; kind < kKinds - 1; ++kind) {
    const std::vector<float> x = RandomRow(kind, 100 + kind);
    const std::vector<uint8_t> b = Quant(DType::kQ6_K, x);
    const std::vector<float> y = Dequant(DType::kQ6_K, b, x.size());
    double sq = 0, sq_step = 0;
    for (size_t blk = 0; blk < x.size() / 256; ++blk) {
      const uint8_t* p = &b[blk * 210];
      const float d = F16ToF32(U16(p + 208));
      for (int j = 0; j < 16; ++j) {
        const float s = d * static_cast<int8_t>(p[192 + j]);
        float amax = 0;
        for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[blk * 256 + 16 * j + l]));
        for (int l = 0; l < 16; ++l) {
          const size_t i = blk * 256 + 16 * j + l;
          ASSERT_FALSE(std::isnan(y[i]));
          EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(s) + 16 * std::fabs(d) + 8 * FLT_EPSILON * amax)
              << "kind " << kind << " element " << i;
          sq += (y[i] - x[i]) * (y[i] - x[i]);
          sq_step += s * s;
        }
      }
    }
    // Rounding to a grid leaves an RMS error near step/sqrt(12); the fit must not do much worse.
    EXPECT_LE(std::sqrt(sq / x.size()), 0.5 * std::sqrt(sq_step / x.size())) << "kind " << kind;
  }
}

// Q4_K / Q5_K, per 32-element sub-block j with step s_j = d·sc_j and offset o_j = dmin·m_j: inside
// the grid [-o, -o + nmax·s] an element is within s/2. The fit may place the grid so that the
// sub-block's extremes clip: by at most one covering step (range_j / nmax, range over [min(0, lo),
// hi]), moved further by the 6-bit rounding of the scale (nmax·d/2) and of the min (dmin/2).
void CheckKRoundTrip(DType t, int nmax) {
  const size_t block_bytes = static_cast<size_t>(Info(t).block_bytes);
  for (int kind = 0; kind < kKinds - 1; ++kind) {  // not kind 4: see the Q6_K test
    const std::vector<float> x = RandomRow(kind, 200 + kind);
    const std::vector<uint8_t> b = Quant(t, x);
    const std::vector<float> y = Dequant(t, b, x.size());
    double sq = 0, sq_step = 0;
    for (size_t blk = 0; blk < x.size() / 256; ++blk) {
      const uint8_t* p = &b[blk * block_bytes];
      const float d = F16ToF32(U16(p)), dmin = F16ToF32(U16(p + 2));
      const uint8_t* sc = p + 4;
      for (int j = 0; j < 8; ++j) {
        const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        const int min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        const float s = d * scale, o = dmin * min;
        float lo = 0, hi = -FLT_MAX, amax = 0;
        for (int l = 0; l < 32; ++l) {
          const float v = x[blk * 256 + 32 * j + l];
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          amax = std::max(amax, std::fabs(v));
        }
        const float cover = (hi - lo) / nmax;
        for (int l = 0; l < 32; ++l) {
          const size_t i = blk * 256 + 32 * j + l;
          ASSERT_FALSE(std::isnan(y[i]));
          const float err = std::fabs(y[i] - x[i]);
          const bool inside = x[i] >= -o - 1e-6f * amax && x[i] <= -o + nmax * s + 1e-6f * amax;
          if (inside) {
            EXPECT_LE(err, s / 2 + 8 * FLT_EPSILON * amax) << Name(t) << " kind " << kind << " element " << i;
          }
          EXPECT_LE(err, cover + nmax * d / 2 + dmin / 2 + 8 * FLT_EPSILON * amax)
              << Name(t) << " kind " << kind << " element " << i;
          sq += err * err;
          sq_step += cover * cover;
        }
      }
    }
    EXPECT_LE(std::sqrt(sq / x.size()), 0.5 * std::sqrt(sq_step / x.size())) << Name(t) << " kind " << kind;
  }
}

TEST(QuantRefRoundTrip, Q4_KWithinItsStep) { CheckKRoundTrip(DType::kQ4_K, 15); }
TEST(QuantRefRoundTrip, Q5_KWithinItsStep) { CheckKRoundTrip(DType::kQ5_K, 31); }

// How far f16 rounding may move v: half an ulp, 2^-11 relative, or 2^-25 in the subnormal range.
float F16Err(float v) { return std::max(std::fabs(v) * std::ldexp(1.0f, -11), std::ldexp(1.0f, -25)); }

// Q5_0: within |d|/2 of the exact-d grid, |d| at the clamped end (the sign opposite v), plus 16 times
// the f16 rounding of d. Q5_1: within d/2 plus the f16 rounding of d (31 levels) and of m.
TEST(QuantRefRoundTrip, Q5_0AndQ5_1WithinHalfStep) {
  for (int kind = 0; kind < kKinds; ++kind) {
    const std::vector<float> x = RandomRow(kind, 300 + kind);
    const std::vector<uint8_t> b0 = Quant(DType::kQ5_0, x), b1 = Quant(DType::kQ5_1, x);
    const std::vector<float> y0 = Dequant(DType::kQ5_0, b0, x.size()), y1 = Dequant(DType::kQ5_1, b1, x.size());
    for (size_t blk = 0; blk < x.size() / 32; ++blk) {
      const float d0 = std::fabs(F16ToF32(U16(&b0[blk * 22])));
      const float d1 = F16ToF32(U16(&b1[blk * 24]));
      const float m1 = F16ToF32(U16(&b1[blk * 24 + 2]));
      float amax = 0;
      for (int l = 0; l < 32; ++l) amax = std::max(amax, std::fabs(x[blk * 32 + l]));
      for (int l = 0; l < 32; ++l) {
        const size_t i = blk * 32 + l;
        EXPECT_LE(std::fabs(y0[i] - x[i]), d0 + 16 * F16Err(d0) + 8 * FLT_EPSILON * amax) << i;
        EXPECT_LE(std::fabs(y1[i] - x[i]), d1 / 2 + 31 * F16Err(d1) + F16Err(m1) + 8 * FLT_EPSILON * amax) << i;
      }
    }
  }
}

}  // namespace
}  // namespace specgen
