// MXFP4 (GGUF type 39) against hand-packed blocks of known values: the E2M1 codes, the nibble order
// (element j low nibble of byte j, element j + 16 its high nibble), the E8M0 scale (2^(e − 127) on the
// E2M1 values) down to the subnormal e = 0, and the quantizer synth uses (llama.cpp's scale choice).
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/quant.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

// The E2M1 values by code (OCP MX spec): sign bit 3, exponent bits 2..1, mantissa bit 0.
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

std::vector<uint8_t> Block(uint8_t e, const uint8_t (&lo)[16], const uint8_t (&hi)[16]) {
  std::vector<uint8_t> b(17);
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(lo[j] | (hi[j] << 4));
  return b;
}

TEST(Mxfp4, GeometryAndName) {
  EXPECT_EQ(Info(DType::kMXFP4).block_elems, 32);
  EXPECT_EQ(Info(DType::kMXFP4).block_bytes, 17);
  EXPECT_EQ(DTypeFromGgmlId(39), DType::kMXFP4);
  EXPECT_EQ(GgmlTypeName(39), "MXFP4");
  EXPECT_EQ(ParseDType("MXFP4").value(), DType::kMXFP4);
  EXPECT_EQ(RowBytes(DType::kMXFP4, 2880).value(), 2880u / 32 * 17);  // gpt-oss's hidden size
  EXPECT_FALSE(RowBytes(DType::kMXFP4, 48).ok());
}

TEST(Mxfp4, EveryCodeAtUnitScaleInNibbleOrder) {
  uint8_t lo[16], hi[16];
  for (int j = 0; j < 16; ++j) {
    lo[j] = static_cast<uint8_t>(j);
    hi[j] = static_cast<uint8_t>(15 - j);
  }
  const std::vector<uint8_t> b = Block(127, lo, hi);  // E8M0 127 = 2^0
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeRow(DType::kMXFP4, b.data(), 32, y.data()).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], kE2M1[j]) << "element " << j;
    EXPECT_EQ(y[j + 16], kE2M1[15 - j]) << "element " << j + 16;
  }
}

TEST(Mxfp4, ScalesArePowersOfTwoDownToTheSubnormal) {
  uint8_t lo[16] = {}, hi[16] = {};
  lo[0] = 2;    // 1.0
  lo[3] = 7;    // 6.0
  hi[5] = 9;    // −0.5
  for (const int e : {0, 1, 100, 127, 130, 200}) {
    const std::vector<uint8_t> b = Block(static_cast<uint8_t>(e), lo, hi);
    std::vector<float> y(32, 99.0f);
    ASSERT_TRUE(DequantizeRow(DType::kMXFP4, b.data(), 32, y.data()).ok());
    const float s = std::ldexp(1.0f, e - 127);  // exact in fp32 for every e here (2^-127 is subnormal)
    EXPECT_EQ(y[0], 1.0f * s) << e;
    EXPECT_EQ(y[3], 6.0f * s) << e;
    EXPECT_EQ(y[21], -0.5f * s) << e;
    EXPECT_EQ(y[1], 0.0f) << e;
  }
}

TEST(Mxfp4, TwoBlocksInARowAndRowsInATensor) {
  uint8_t lo[16] = {}, hi[16] = {};
  lo[0] = 1;  // 0.5
  std::vector<uint8_t> row = Block(127, lo, hi);
  const std::vector<uint8_t> second = Block(129, lo, hi);  // 2^2
  row.insert(row.end(), second.begin(), second.end());
  std::vector<float> y(64);
  ASSERT_TRUE(DequantizeRow(DType::kMXFP4, row.data(), 64, y.data()).ok());
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[32], 2.0f);
  std::vector<float> rows(64);
  ASSERT_TRUE(DequantizeRows(DType::kMXFP4, row.data(), 2, 32, rows.data()).ok());
  EXPECT_EQ(rows, y);
  EXPECT_FALSE(DequantizeRow(DType::kMXFP4, row.data(), 40, y.data()).ok());  // not whole blocks
}

TEST(Mxfp4, QuantizeRoundTripsRepresentableValuesAndBoundsTheRest) {
  // A block of E2M1 values times 2^-3 whose largest is 6·2^-3: exactly representable, so exact.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = kE2M1[(j * 7) % 16] * 0.125f;
  x[5] = 6.0f * 0.125f;
  std::vector<uint8_t> q(17);
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, x.data(), 32, q.data()).ok());
  EXPECT_EQ(q[0], 124) << "max 0.75: e = floor(log2 0.75) − 2 + 127 = 124, half scale 2^-4";
  std::vector<float> y(32);
  ASSERT_TRUE(DequantizeRow(DType::kMXFP4, q.data(), 32, y.data()).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << j;
  // Random blocks: the largest element sits in [8, 16) half-scale units h; the doubled codes 0 1 2 3 4
  // 6 8 12 are 1h apart up to 4h, 2h up to 8h, 4h up to 12h, so an element is within half the local
  // spacing (0.5h, 1h, 2h), and one above 12h saturates there (error < 4h).
  std::mt19937 gen(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> r(32 * 8), back(32 * 8);
  for (float& v : r) v = dist(gen);
  std::vector<uint8_t> packed(17 * 8);
  ASSERT_TRUE(QuantizeRow(DType::kMXFP4, r.data(), 256, packed.data()).ok());
  ASSERT_TRUE(DequantizeRow(DType::kMXFP4, packed.data(), 256, back.data()).ok());
  for (int b = 0; b < 8; ++b) {
    const float h = std::ldexp(1.0f, packed[17 * b] - 128);
    for (int j = 0; j < 32; ++j) {
      const float v = r[32 * b + j], got = back[32 * b + j];
      const float a = std::fabs(v);
      const float bound = a > 12.0f * h ? 4.0f * h : a > 8.0f * h ? 2.0f * h : a > 4.0f * h ? 1.0f * h : 0.5f * h;
      EXPECT_LE(std::fabs(got - v), bound * 1.0001f) << "block " << b << " element " << j;
    }
  }
}

}  // namespace
}  // namespace specgen
