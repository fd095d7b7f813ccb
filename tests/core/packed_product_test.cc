// The packed product's one definition (engine/core/packed_product.h), checked against independent
// arithmetic: the activation quantization against its stated rounding, and the product against the
// f64 sum of the CPU dequantizer's weights times the dequantized activations.
#include "engine/core/packed_product.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "gtest/gtest.h"
#include "tests/common/random_blocks.h"

namespace specgen {
namespace {

using packed_product::kBlock;

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

Quantized Quantize(const std::vector<float>& x) {
  const int64_t k = static_cast<int64_t>(x.size());
  Quantized a{std::vector<int8_t>(x.size()), std::vector<float>(x.size() / kBlock),
              std::vector<int32_t>(x.size() / kBlock)};
  packed_product::QuantizeActivations(x.data(), k, a.q.data(), a.d.data(), a.sum.data());
  return a;
}

std::vector<float> RandomX(std::mt19937_64& rng, int64_t k, float scale) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> x(static_cast<size_t>(k));
  for (auto& v : x) v = normal(rng);
  return x;
}

TEST(PackedProduct, ActivationsRoundToTheBlockStep) {
  std::mt19937_64 rng(7);
  auto x = RandomX(rng, 256, 3.f);
  for (int i = 64; i < 96; ++i) x[i] = 0.f;  // block 2: all zero
  x[100] = 1e-40f;                            // a subnormal in block 3
  const Quantized a = Quantize(x);
  for (int64_t b = 0; b < 8; ++b) {
    float amax = 0;
    for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[b * kBlock + i]));
    EXPECT_EQ(a.d[b], amax / 127.f) << "block " << b;
    int32_t sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      const int q = a.q[b * kBlock + i];
      sum += q;
      EXPECT_LE(std::abs(q), 127);
      // rint(x · (127 / amax)): the factor and the product each rounded once, and d = amax / 127
      // rounded: |x - d q| <= d (1/2 + 3 · 127 · 2^-24), written as 2^-15 of slack.
      EXPECT_LE(std::fabs(x[b * kBlock + i] - double(a.d[b]) * q), a.d[b] * (0.5 + 0x1p-15)) << b << " " << i;
    }
    EXPECT_EQ(sum, a.sum[b]) << "block " << b;
  }
  EXPECT_EQ(a.d[2], 0.f);
}

TEST(PackedProduct, NonFiniteActivationsGiveNaN) {
  std::mt19937_64 rng(8);
  for (DType t : kTypes) {
    const int64_t k = 256;
    const auto w = testing::RandomBlocks(rng, t, 1, k);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      auto x = RandomX(rng, k, 1.f);
      x[77] = bad;
      const Quantized a = Quantize(x);
      EXPECT_TRUE(std::isnan(a.d[77 / kBlock]));
      EXPECT_TRUE(std::isnan(packed_product::RowProduct(t, w.data(), k, a.q.data(), a.d.data(), a.sum.data())))
          << Name(t) << " with " << bad;
    }
  }
}

// The largest |value| any element of block b (32 elements) of a row can take before rounding, from
// the block's f16 (MXFP4: E8M0) fields and the format's largest code and integer scales: bounds the
// fp32 roundings.
double BlockMagnitude(DType t, const uint8_t* row, int64_t b) {
  const auto half = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return std::fabs(double(F16ToF32(h)));
  };
  switch (t) {
    case DType::kQ8_0: return half(row + b * 34) * 128;
    case DType::kQ4_0: return half(row + b * 18) * 8;
    case DType::kQ4_K: return half(row + b / 8 * 144) * 63 * 15 + half(row + b / 8 * 144 + 2) * 63;
    case DType::kQ5_K: return half(row + b / 8 * 176) * 63 * 31 + half(row + b / 8 * 176 + 2) * 63;
    case DType::kQ6_K: return half(row + b / 8 * 210 + 208) * 128 * 32;
    case DType::kMXFP4: return std::ldexp(12.0, row[b * 17] - 128);
    default: return 0;
  }
}

// Against Σ w_i d_b q_i in f64 with w the CPU dequantizer's values: the definition forms the same
// sum from exact integer dots, so only fp32 roundings separate them: each c_b takes at most 4
// roundings of terms bounded by d_b · mag_b · Σ|q| (mag_b: BlockMagnitude), the dequantizer's w_i one
// (relative 2^-24), and the slice sums nb/16 + 4 more of partial sums bounded by Σ_b of the same; so
// |error| <= (nb + 8) 2^-24 Σ_b d_b mag_b Σ_{i in b} |q_i|. One wrong code errs by about
// d_b |w_i| |q_i|, thousands of times that bound for these sizes.
void CheckRow(std::mt19937_64& rng, DType t, int64_t k) {
  const auto w = testing::RandomBlocks(rng, t, 1, k);
  std::vector<float> wf(static_cast<size_t>(k));
  ASSERT_TRUE(DequantizeRow(t, w.data(), k, wf.data()).ok());
  for (float scale : {1.f, 1e-3f, 40.f}) {
    const auto x = RandomX(rng, k, scale);
    const Quantized a = Quantize(x);
    double ref = 0, bound = 0;
    const int64_t nb = k / kBlock;
    for (int64_t b = 0; b < nb; ++b) {
      double abs_q = 0;
      for (int i = 0; i < kBlock; ++i) {
        const int64_t e = b * kBlock + i;
        ref += double(wf[e]) * (double(a.d[b]) * a.q[e]);
        abs_q += std::abs(a.q[e]);
      }
      bound += double(a.d[b]) * BlockMagnitude(t, w.data(), b) * abs_q;
    }
    bound *= double(nb + 8) * 0x1p-24;
    const float got = packed_product::RowProduct(t, w.data(), k, a.q.data(), a.d.data(), a.sum.data());
    EXPECT_LE(std::fabs(got - ref), bound) << Name(t) << " k=" << k << " scale " << scale << ": " << got << " vs " << ref;
  }
}

TEST(PackedProduct, EqualsTheIntegerSumWithinFp32Rounding) {
  std::mt19937_64 rng(9);
  for (DType t : kTypes) {
    SCOPED_TRACE(Name(t));
    for (int rep = 0; rep < 20; ++rep) {
      CheckRow(rng, t, 2048);  // 64 blocks: slices of 4
      CheckRow(rng, t, 768);   // 24 blocks: slices of 1 and 2
      CheckRow(rng, t, 256);   // 8 blocks: empty slices
      if (Info(t).block_elems == 32) CheckRow(rng, t, 96);  // 3 blocks
    }
  }
}

// The stated order, spelled out once more: the slices' partial sums in ascending block order, then
// the pairwise tree. Any other grouping of the same c_b would, for some rows, round differently.
TEST(PackedProduct, SumsSlicesInTheStatedOrder) {
  std::mt19937_64 rng(10);
  const DType t = DType::kQ8_0;
  constexpr int kNb = 40;  // slices of 2 and 3 blocks: [0,2) [2,5) [5,7) [7,10) ..
  const int64_t k = 32 * kNb;
  EXPECT_EQ(packed_product::SliceBegin(kNb, 1), 2);
  EXPECT_EQ(packed_product::SliceBegin(kNb, 2), 5);
  EXPECT_EQ(packed_product::SliceBegin(kNb, 16), kNb);
  int differs = 0;
  for (int rep = 0; rep < 200; ++rep) {
    const auto w = testing::RandomBlocks(rng, t, 1, k);
    const auto x = RandomX(rng, k, 1.f);
    const Quantized a = Quantize(x);
    // c_b for Q8_0: d_b · (d_w · Σ q_w q), each product rounded.
    float c[kNb];
    for (int b = 0; b < kNb; ++b) {
      uint16_t h;
      std::memcpy(&h, &w[b * 34], 2);
      int32_t dot = 0;
      for (int i = 0; i < 32; ++i) dot += int32_t(int8_t(w[b * 34 + 2 + i])) * a.q[b * 32 + i];
      const volatile float dw_dot = F16ToF32(h) * float(dot);
      c[b] = a.d[b] * dw_dot;
    }
    volatile float p[16];
    for (int s = 0; s < 16; ++s) {
      p[s] = 0.f;
      for (int b = kNb * s / 16; b < kNb * (s + 1) / 16; ++b) p[s] = p[s] + c[b];
    }
    volatile float q8[8], q4[4], q2[2];
    for (int i = 0; i < 8; ++i) q8[i] = p[2 * i] + p[2 * i + 1];
    for (int i = 0; i < 4; ++i) q4[i] = q8[2 * i] + q8[2 * i + 1];
    for (int i = 0; i < 2; ++i) q2[i] = q4[2 * i] + q4[2 * i + 1];
    const float want = q2[0] + q2[1];
    volatile float seq = 0.f;
    for (int b = 0; b < kNb; ++b) seq = seq + c[b];
    const float got = packed_product::RowProduct(t, w.data(), k, a.q.data(), a.d.data(), a.sum.data());
    ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << rep << ": " << got << " vs " << want;
    differs += seq != want;
  }
  EXPECT_GT(differs, 0) << "the check above cannot tell the stated order from a sequential sum";
}

// MXFP4's scale is 2^(e − 128) for every E8M0 byte, formed from bits alone (the GPU mirrors the bit
// rule): the normal floats for e >= 2, the subnormals 2^-127 and 2^-128 for e = 1 and 0, and 2^127
// (finite; OCP's NaN encoding is not ggml's) for e = 255.
TEST(PackedProduct, Mxfp4ScaleIsTwoToTheEMinus128) {
  for (int e = 0; e < 256; ++e) {
    const float got = packed_product::Mxfp4Scale(static_cast<uint8_t>(e)), want = std::ldexp(1.0f, e - 128);
    EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << "e = " << e << ": " << got << " vs " << want;
  }
  const auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  EXPECT_EQ(bits(packed_product::Mxfp4Scale(0)), 0x00200000u);
  EXPECT_EQ(bits(packed_product::Mxfp4Scale(1)), 0x00400000u);
  EXPECT_EQ(bits(packed_product::Mxfp4Scale(2)), 0x00800000u);
  EXPECT_EQ(bits(packed_product::Mxfp4Scale(255)), 0x7f000000u);
}

// An MXFP4 block's term as written (packed_product.h, step 2), spelled out from the format: the
// doubled E2M1 value of each nibble (element j < 16 the low nibble of byte j, j + 16 its high one),
// the exact dots, then d_b · (2^(e − 128) · float(lo + hi)), each product rounded. Sixteen blocks, one
// a slice, with the extreme scales among them: e = 0, 1, 2 (2^-128 .. 2^-126: subnormal and underflowing
// terms at the smaller activations) and, in every other row, e = 255 (2^127: a term overflowing to ±Inf,
// the row's result with it; one such block a row, so that the finite blocks still decide the rest).
TEST(PackedProduct, Mxfp4BlockTermsAsWritten) {
  constexpr int8_t kValue[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  constexpr int kNb = 16;
  std::mt19937_64 rng(11);
  int finite = 0, infinite = 0;
  for (float scale : {1.f, 1e-6f, 1e-30f}) {
    for (int rep = 0; rep < 40; ++rep) {
      auto w = testing::RandomBlocks(rng, DType::kMXFP4, 1, 32 * kNb);
      std::vector<uint8_t> e = {0, 1, 2, 3, 60, 100, 120, 127, 128, 129, 135, 140, 160, 190, 220, 110};
      if (rep % 2) e.back() = 255;
      std::shuffle(e.begin(), e.end(), rng);
      for (int b = 0; b < kNb; ++b) w[b * 17] = e[b];
      const auto x = RandomX(rng, 32 * kNb, scale);
      const Quantized a = Quantize(x);
      volatile float p[kNb];
      for (int b = 0; b < kNb; ++b) {
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) {
          lo += kValue[w[b * 17 + 1 + j] & 0xF] * a.q[b * 32 + j];
          hi += kValue[w[b * 17 + 1 + j] >> 4] * a.q[b * 32 + 16 + j];
        }
        const volatile float dw = std::ldexp(1.0f, w[b * 17] - 128) * float(lo + hi);
        const volatile float c = a.d[b] * dw;
        p[b] = 0.f + c;  // slice b holds block b alone
      }
      volatile float q8[8], q4[4], q2[2];
      for (int i = 0; i < 8; ++i) q8[i] = p[2 * i] + p[2 * i + 1];
      for (int i = 0; i < 4; ++i) q4[i] = q8[2 * i] + q8[2 * i + 1];
      for (int i = 0; i < 2; ++i) q2[i] = q4[2 * i] + q4[2 * i + 1];
      const float want = q2[0] + q2[1];
      const float got =
          packed_product::RowProduct(DType::kMXFP4, w.data(), 32 * kNb, a.q.data(), a.d.data(), a.sum.data());
      ASSERT_FALSE(std::isnan(want));
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "scale " << scale << " rep " << rep << ": " << got << " vs " << want;
      (std::isfinite(want) ? finite : infinite) += 1;
    }
  }
  EXPECT_GE(finite, 60);  // the finite rows decide the finite blocks' terms
  EXPECT_GE(infinite, 20);
}

// MXFP4 against the float product Σ w_i x_i (f64, w the dequantizer's exact values): the activation
// rounding errs by at most d_b (1/2 + 2^-15) an element (ActivationsRoundToTheBlockStep), so by
// Σ_b d_b (1/2 + 2^-15) Σ_{i in b} |w_i| in all, and the fp32 roundings add CheckRow's bound. Rows of
// gpt-oss's hidden size (90 blocks) and of 8 blocks.
TEST(PackedProduct, Mxfp4IsTheFloatProductWithinTheActivationRounding) {
  std::mt19937_64 rng(12);
  for (int64_t k : {2880, 256}) {
    for (int rep = 0; rep < 20; ++rep) {
      const auto w = testing::RandomBlocks(rng, DType::kMXFP4, 1, k);
      std::vector<float> wf(static_cast<size_t>(k));
      ASSERT_TRUE(DequantizeRow(DType::kMXFP4, w.data(), k, wf.data()).ok());
      const auto x = RandomX(rng, k, 1.f);
      const Quantized a = Quantize(x);
      double ref = 0, act = 0, fp32 = 0;
      const int64_t nb = k / kBlock;
      for (int64_t b = 0; b < nb; ++b) {
        double abs_w = 0, abs_q = 0;
        for (int i = 0; i < kBlock; ++i) {
          const int64_t j = b * kBlock + i;
          ref += double(wf[j]) * x[j];
          abs_w += std::fabs(wf[j]);
          abs_q += std::abs(a.q[j]);
        }
        act += double(a.d[b]) * (0.5 + 0x1p-15) * abs_w;
        fp32 += double(a.d[b]) * BlockMagnitude(DType::kMXFP4, w.data(), b) * abs_q;
      }
      const double bound = act + fp32 * double(nb + 8) * 0x1p-24;
      const float got = packed_product::RowProduct(DType::kMXFP4, w.data(), k, a.q.data(), a.d.data(), a.sum.data());
      EXPECT_LE(std::fabs(got - ref), bound) << "k=" << k << " rep " << rep << ": " << got << " vs " << ref;
    }
  }
}

}  // namespace
}  // namespace specgen
