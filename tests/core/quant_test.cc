// Dequantization against hand-built blocks (bytes laid out by hand per docs/formats.md §2,
// expected floats from the layout written out element by element here, not from quant.cc), and
// quantize -> dequantize round trips with error bounds derived from each block's own scale.
#include "engine/core/quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

std::vector<float> Dequant(DType t, const std::vector<uint8_t>& block, int64_t n) {
  std::vector<float> y(n, std::nanf(""));
  absl::Status s = DequantizeRow(t, block.data(), n, y.data());
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

TEST(Dequantize, F32F16Bf16Rows) {
  const float f[3] = {1.5f, -0.0f, 3e38f};
  std::vector<uint8_t> b(12);
  std::memcpy(b.data(), f, 12);
  EXPECT_THAT(Dequant(DType::kF32, b, 3), ::testing::ElementsAre(1.5f, -0.0f, 3e38f));

  // f16: 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal), +inf.
  std::vector<uint8_t> h(10);
  const uint16_t hv[5] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00};
  std::memcpy(h.data(), hv, 10);
  EXPECT_THAT(Dequant(DType::kF16, h, 5),
              ::testing::ElementsAre(1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), INFINITY));

  // bf16: 1.0, -3.0, 2^-133 (subnormal), 1.0078125 (1 + 2^-7).
  std::vector<uint8_t> bf(8);
  const uint16_t bv[4] = {0x3F80, 0xC040, 0x0001, 0x3F81};
  std::memcpy(bf.data(), bv, 8);
  EXPECT_THAT(Dequant(DType::kBF16, bf, 4),
              ::testing::ElementsAre(1.0f, -3.0f, std::ldexp(1.0f, -133), 1.0078125f));
}

TEST(Dequantize, Q8_0HandBuilt) {
  std::vector<uint8_t> b(34);
  PutU16(&b[0], 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  b[2 + 31] = 0x80;  // int8 -128
  const std::vector<float> y = Dequant(DType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[30], 7.0f);
  EXPECT_EQ(y[31], -64.0f);
  for (int j = 0; j < 31; ++j) EXPECT_EQ(y[j], 0.5f * (j - 16)) << j;
}

TEST(Dequantize, Q4_0HandBuilt) {
  std::vector<uint8_t> b(18 * 2);
  PutU16(&b[0], 0x4000);   // block 0: d = 2
  PutU16(&b[18], 0xB400);  // block 1: d = -0.25
  for (int j = 0; j < 16; ++j) {
    b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    b[20 + j] = 0xF0;  // low nibble 0 -> -8, high nibble 15 -> 7
  }
  const std::vector<float> y = Dequant(DType::kQ4_0, b, 64);
  // Low nibbles are elements 0..15, high nibbles 16..31 (not interleaved).
  EXPECT_EQ(y[0], -16.0f);   // (0 - 8) * 2
  EXPECT_EQ(y[15], 14.0f);   // (15 - 8) * 2
  EXPECT_EQ(y[16], 14.0f);   // high nibble of byte 0 = 15
  EXPECT_EQ(y[31], -16.0f);  // high nibble of byte 15 = 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));
    EXPECT_EQ(y[j + 16], 2.0f * (7 - j));
    EXPECT_EQ(y[32 + j], 2.0f);         // -8 * -0.25
    EXPECT_EQ(y[48 + j], -1.75f);       // 7 * -0.25
  }
}

// Sub-block scales and mins of the K-quant test blocks, with their 12-byte packing worked out by hand:
// bytes 0-3 = sc0..3 | (sc4..7 >> 4) << 6, bytes 4-7 = m0..3 | (m4..7 >> 4) << 6,
// bytes 8-11 = (sc4..7 & 15) | (m4..7 & 15) << 4.
constexpr int kSc[8] = {1, 2, 3, 63, 17, 33, 48, 63};
constexpr int kM[8] = {0, 5, 10, 63, 20, 40, 60, 1};
constexpr uint8_t kPackedScales[12] = {65, 130, 195, 255, 64, 133, 202, 63, 65, 129, 192, 31};

std::vector<uint8_t> KBlockHeader(size_t bytes) {
  std::vector<uint8_t> b(bytes);
  PutU16(&b[0], 0x3C00);  // d = 1
  PutU16(&b[2], 0x3800);  // dmin = 0.5
  std::memcpy(&b[4], kPackedScales, 12);
  return b;
}

TEST(Dequantize, Q4_KHandBuilt) {
  std::vector<uint8_t> b = KBlockHeader(144);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i & 15) | (((3 * i) & 15) << 4));
  const std::vector<float> y = Dequant(DType::kQ4_K, b, 256);
  // Element i: chunk c = i / 64 uses bytes qs[32c .. 32c+31]; its first 32 elements are the low
  // nibbles (sub-block 2c), the next 32 the high nibbles (sub-block 2c+1).
  for (int i = 0; i < 256; ++i) {
    const int c = i / 64, high = (i % 64) / 32, l = i % 32;
    const uint8_t byte = b[16 + 32 * c + l];
    const int q = high ? byte >> 4 : byte & 15;
    const int j = 2 * c + high;
    EXPECT_EQ(y[i], 1.0f * kSc[j] * q - 0.5f * kM[j]) << i;
  }
  EXPECT_EQ(y[1], 1.0f);               // sc0 = 1, q = 1, m0 = 0
  EXPECT_EQ(y[32 + 1], 2.0f * 3 - 2.5f);  // sc1 = 2, q = 3, m1 = 5
  EXPECT_EQ(y[224 + 5], 63.0f * 15 - 0.5f);  // sc7 = 63, q = (3*(96+5)) & 15 = 15, m7 = 1
}

TEST(Dequantize, Q5_KHandBuilt) {
  std::vector<uint8_t> b = KBlockHeader(176);
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<uint8_t>(l * 37);               // qh
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>((i * 5) ^ (i >> 2));  // qs
  const std::vector<float> y = Dequant(DType::kQ5_K, b, 256);
  // As Q4_K, plus a fifth bit: element i of sub-block j takes bit j of qh[i % 32] as +16.
  for (int i = 0; i < 256; ++i) {
    const int c = i / 64, high = (i % 64) / 32, l = i % 32;
    const uint8_t byte = b[48 + 32 * c + l];
    const int j = 2 * c + high;
    const int q = (high ? byte >> 4 : byte & 15) + (((b[16 + l] >> j) & 1) ? 16 : 0);
    EXPECT_EQ(y[i], 1.0f * kSc[j] * q - 0.5f * kM[j]) << i;
  }
  // Element 255: sub-block 7, l = 31, qs byte 127 = (635 ^ 31) & 255 = 0x64 -> high nibble 6,
  // qh[31] = 31*37 & 255 = 0x7B -> bit 7 = 0: q = 6, y = 63*6 - 0.5*1.
  EXPECT_EQ(y[255], 377.5f);
}

TEST(Dequantize, Q6_KHandBuilt) {
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[i] = static_cast<uint8_t>(i * 13);        // ql
  for (int i = 0; i < 64; ++i) b[128 + i] = static_cast<uint8_t>(i * 29);   // qh
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>((i % 2 ? -1 : 1) * (i + 1));
  scales[15] = -128;
  std::memcpy(&b[192], scales, 16);
  PutU16(&b[208], 0x3400);  // d = 0.25, stored last
  const std::vector<float> y = Dequant(DType::kQ6_K, b, 256);
  // Element i: half h = i / 128; within it quarter k = (i % 128) / 32 and l = i % 32. Low 4 bits come
  // from ql[64h + l + (k odd ? 32 : 0)] (low nibble for k < 2, high nibble for k >= 2); the top 2 bits
  // are bits 2k..2k+1 of qh[32h + l]; the scale is scales[8h + l / 16 + 2k]; value q - 32.
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const uint8_t lo_byte = b[64 * h + l + (k % 2 ? 32 : 0)];
    const int lo = k < 2 ? lo_byte & 15 : lo_byte >> 4;
    const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
    const int s = scales[8 * h + l / 16 + 2 * k];
    EXPECT_EQ(y[i], 0.25f * s * ((lo | (hi << 4)) - 32)) << i;
  }
  EXPECT_EQ(y[0], 0.25f * 1 * -32);  // ql[0] = 0, qh[0] = 0
  // Element 255: h 1, k 3, l 31: ql[127] = 127*13 & 255 = 0x73 -> high 7; qh[63] = 63*29 & 255 =
  // 0x23 -> bits 6..7 = 0; scale[8 + 1 + 6] = -128: 0.25 * -128 * (7 - 32) = 800.
  EXPECT_EQ(y[255], 800.0f);
}

TEST(Dequantize, RowsAndErrors) {
  std::vector<uint8_t> b(68);
  PutU16(&b[0], 0x3C00);
  PutU16(&b[34], 0x4000);
  b[2] = 3;
  b[36] = 5;
  std::vector<float> y(64);
  ASSERT_TRUE(DequantizeRows(DType::kQ8_0, b.data(), 2, 32, y.data()).ok());
  EXPECT_EQ(y[0], 3.0f);
  EXPECT_EQ(y[32], 10.0f);
  EXPECT_THAT(std::string(DequantizeRow(DType::kQ4_K, b.data(), 100, y.data()).message()),
              HasSubstr("q4_k"));
  EXPECT_FALSE(DequantizeRows(DType::kQ8_0, b.data(), 1, 31, y.data()).ok());
  // The (src, dst, n) overload is the same call.
  ASSERT_TRUE(DequantizeRow(DType::kQ8_0, b.data(), y.data(), int64_t{32}).ok());
  EXPECT_EQ(y[0], 3.0f);
}

// ---- Quantize -> dequantize round trips ---------------------------------------------------------

std::vector<float> TestRow(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng);
  // Blocks with special shapes: all zero, all positive, all negative, constant, one outlier.
  for (int i = 0; i < 32 && i < n; ++i) x[i] = 0.0f;
  if (n >= 512) {
    for (int i = 256; i < 288; ++i) x[i] = std::fabs(x[i]) + 3.0f;
    for (int i = 288; i < 320; ++i) x[i] = -std::fabs(x[i]) - 0.5f;
    for (int i = 320; i < 352; ++i) x[i] = 0.75f;
    x[400] = 40.0f;
  }
  return x;
}

std::vector<float> RoundTrip(DType t, const std::vector<float>& x, std::vector<uint8_t>* bytes) {
  bytes->assign(*RowBytes(t, static_cast<int64_t>(x.size())), 0);
  EXPECT_TRUE(QuantizeRow(t, x.data(), static_cast<int64_t>(x.size()), bytes->data()).ok());
  std::vector<float> y(x.size());
  EXPECT_TRUE(DequantizeRow(t, bytes->data(), static_cast<int64_t>(x.size()), y.data()).ok());
  return y;
}

float BlockAmax(const std::vector<float>& x, size_t start, size_t n) {
  float a = 0;
  for (size_t i = start; i < start + n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

TEST(QuantizeRoundTrip, PlainFloats) {
  const std::vector<float> x = TestRow(1024, 1);
  std::vector<uint8_t> bytes;
  EXPECT_EQ(RoundTrip(DType::kF32, x, &bytes), x);
  // Round to nearest: relative error at most half an ulp, 2^-11 for f16, 2^-8 for bf16 (values here
  // are far from the f16 subnormal range).
  const std::vector<float> h = RoundTrip(DType::kF16, x, &bytes);
  const std::vector<float> b = RoundTrip(DType::kBF16, x, &bytes);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(h[i] - x[i]), std::ldexp(std::fabs(x[i]), -11)) << i;
    EXPECT_LE(std::fabs(b[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
  }
}

TEST(QuantizeRoundTrip, Q8_0WithinHalfStep) {
  const std::vector<float> x = TestRow(1024, 2);
  std::vector<uint8_t> bytes;
  const std::vector<float> y = RoundTrip(DType::kQ8_0, x, &bytes);
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    const float amax = BlockAmax(x, blk * 32, 32);
    // d = amax / 127 rounded to f16 (relative error <= 2^-11); q rounds x to the nearest multiple of
    // the exact d (as ggml does), so against the stored d the error is d/2 plus up to 127 times the
    // f16 rounding of d, plus float rounding of x * (1/d) (a few ulps of amax).
    uint16_t dh;
    std::memcpy(&dh, &bytes[blk * 34], 2);
    const float d = F16ToF32(dh);
    EXPECT_LE(d, amax / 127 * (1 + std::ldexp(1.0f, -11)) + 1e-30f);
    for (size_t i = blk * 32; i < blk * 32 + 32; ++i) {
      ASSERT_FALSE(std::isnan(y[i]));
      EXPECT_LE(std::fabs(y[i] - x[i]), d * (0.5f + 127 * std::ldexp(1.0f, -11)) + 4 * FLT_EPSILON * amax) << i;
    }
  }
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);  // all-zero block stays exact
}

TEST(QuantizeRoundTrip, Q4_0WithinHalfStepExceptClampedEnd) {
  const std::vector<float> x = TestRow(1024, 3);
  std::vector<uint8_t> bytes;
  const std::vector<float> y = RoundTrip(DType::kQ4_0, x, &bytes);
  for (size_t blk = 0; blk < x.size() / 32; ++blk) {
    const float amax = BlockAmax(x, blk * 32, 32);
    uint16_t dh;
    std::memcpy(&dh, &bytes[blk * 18], 2);
    const float d = F16ToF32(dh);  // = -v/8 for the element v of largest magnitude
    EXPECT_LE(std::fabs(d), amax / 8 * (1 + std::ldexp(1.0f, -11)) + 1e-30f);
    for (size_t i = blk * 32; i < blk * 32 + 32; ++i) {
      ASSERT_FALSE(std::isnan(y[i]));
      const double steps = d != 0 ? x[i] / static_cast<double>(d) : 0.0;
      if (steps > 7.5 + 1e-4) {
        // Only the sign opposite to v reaches q = 8, which clamps to the grid's top, 7·d.
        EXPECT_EQ(y[i], 7 * d) << i;
        EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(d) * (1 + 8 * std::ldexp(1.0f, -11)) + 4 * FLT_EPSILON * amax) << i;
      } else {
        // Levels round x / d_exact; against the stored d add 8 times its f16 rounding.
        EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(d) * (0.5f + 8 * std::ldexp(1.0f, -11)) + 4 * FLT_EPSILON * amax) << i;
      }
    }
  }
}

TEST(Quantize, Errors) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_FALSE(CanQuantize(DType::kQ3_K));
  EXPECT_TRUE(CanQuantize(DType::kQ6_K));
  absl::Status s = QuantizeRow(DType::kQ3_K, x.data(), 256, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("q3_k"));
  EXPECT_THAT(std::string(QuantizeRow(DType::kQ8_0, x.data(), 40, out.data()).message()),
              HasSubstr("q8_0"));
  EXPECT_TRUE(QuantizeRow(DType::kQ8_0, x.data(), out.data(), int64_t{32}).ok());
}

// The DType table (dtype.cc) is what every conversion dispatches through: each row must name its own
// type, convert a row of one block at all, and round-trip through the GGUF id and the name.
TEST(DTypeTable, EveryTypeIsWholeAndFindable) {
  ASSERT_EQ(AllDTypes().size(), 14u);
  for (DType t : AllDTypes()) {
    const DTypeInfo& info = Info(t);
    SCOPED_TRACE(std::string(info.name));
    EXPECT_GT(info.block_bytes, 0);
    ASSERT_NE(info.to_f32, nullptr);
    EXPECT_EQ(info.quantized, info.block_elems > 1);
    EXPECT_EQ(DTypeFromGgmlId(static_cast<uint32_t>(t)), t);
    auto parsed = ParseDType(info.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
    // One block of zeros (every format stores a zero scale as zero bits) reads back as zeros.
    std::vector<uint8_t> block(static_cast<size_t>(info.block_bytes), 0);
    std::vector<float> y(static_cast<size_t>(info.block_elems), 1.0f);
    ASSERT_TRUE(DequantizeRow(t, block.data(), info.block_elems, y.data()).ok());
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
  // The types something quantizes to: the ones QuantizeRow names as supported.
  std::vector<DType> quantizable;
  for (DType t : AllDTypes()) {
    if (CanQuantize(t)) quantizable.push_back(t);
  }
  EXPECT_EQ(quantizable, (std::vector<DType>{DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                             DType::kQ4_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                             DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}));
}

}  // namespace
}  // namespace specgen
