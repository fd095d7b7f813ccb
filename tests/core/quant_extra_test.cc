// Dequantization of Q4_1, Q5_0, Q5_1, Q2_K and Q3_K against blocks built here. Each block is packed
// element by element from the layout in docs/formats.md §2 (where element e's bits live),
// not with quant_*.cc's loops, and the expected floats are computed from the unpacked integers in the
// operation order of ggml's dequantize_row_* (scale products first), so every comparison is exact.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

void PutU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
float Half(uint16_t h) { return F16ToF32(h); }

std::vector<float> Dequant(DType t, const std::vector<uint8_t>& blocks, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
  absl::Status s = DequantizeRow(t, blocks.data(), n, y.data());
  EXPECT_TRUE(s.ok()) << s;
  return y;
}

// ---- Legacy 32-element types ---------------------------------------------------------------------
// Element e < 16 is the low nibble of qs[e], e ≥ 16 the high nibble of qs[e − 16]; the Q5 types keep
// e's fifth bit at bit e of a little-endian u32.

struct LegacyBlock {
  uint16_t d = 0, m = 0;   // f16 bits (m unused by Q5_0)
  int q[32] = {};          // 4-bit (Q4_1) or 5-bit (Q5_0 / Q5_1) unsigned codes
};

std::vector<uint8_t> PackLegacy(DType t, const LegacyBlock& b) {
  const bool has_m = t != DType::kQ5_0, five = t != DType::kQ4_1;
  std::vector<uint8_t> out(static_cast<size_t>(Info(t).block_bytes), 0);
  size_t at = 0;
  PutU16(&out[at], b.d);
  at += 2;
  if (has_m) {
    PutU16(&out[at], b.m);
    at += 2;
  }
  if (five) {
    uint32_t qh = 0;
    for (int e = 0; e < 32; ++e) qh |= static_cast<uint32_t>((b.q[e] >> 4) & 1) << e;
    std::memcpy(&out[at], &qh, 4);
    at += 4;
  }
  for (int e = 0; e < 32; ++e) {
    const int nibble = b.q[e] & 0xF;
    out[at + e % 16] |= static_cast<uint8_t>(e < 16 ? nibble : nibble << 4);
  }
  return out;
}

float ExpectedLegacy(DType t, const LegacyBlock& b, int e) {
  const float d = Half(b.d), m = Half(b.m);
  switch (t) {
    case DType::kQ4_1: return b.q[e] * d + m;
    case DType::kQ5_0: return (b.q[e] - 16) * d;
    default: return b.q[e] * d + m;  // Q5_1
  }
}

TEST(DequantizeLegacy, Q4_1HandBuilt) {
  LegacyBlock b;
  b.d = 0x3800;  // 0.5
  b.m = 0xBD00;  // -1.25
  for (int j = 0; j < 16; ++j) {
    b.q[j] = j;
    b.q[j + 16] = 15 - j;
  }
  const std::vector<float> y = Dequant(DType::kQ4_1, PackLegacy(DType::kQ4_1, b), 32);
  EXPECT_EQ(y[0], -1.25f);
  EXPECT_EQ(y[15], 6.25f);   // 15 * 0.5 - 1.25
  EXPECT_EQ(y[16], 6.25f);   // the high nibble of byte 0
  EXPECT_EQ(y[31], -1.25f);
  EXPECT_EQ(y[3], 0.25f);
}

TEST(DequantizeLegacy, Q5_0HighBitsHandBuilt) {
  LegacyBlock b;
  b.d = 0x4000;  // 2
  for (int e = 0; e < 32; ++e) b.q[e] = e % 16;  // fifth bits clear: codes 0..15 → −16..−1
  b.q[0] = 16;   // fifth bit of element 0 only: code 16 → 0
  b.q[16] = 16;  // element 16's fifth bit is qh bit 16 (the high-nibble half)
  b.q[31] = 31;  // all five bits: 31 − 16 = 15
  std::vector<uint8_t> packed = PackLegacy(DType::kQ5_0, b);
  uint32_t qh;
  std::memcpy(&qh, &packed[2], 4);
  ASSERT_EQ(qh, 0x80010001u);  // the packer put the three fifth bits where formats.md says
  const std::vector<float> y = Dequant(DType::kQ5_0, packed, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], -30.0f);  // (1 − 16) · 2
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[17], -30.0f);
  EXPECT_EQ(y[31], 30.0f);
  EXPECT_EQ(y[15], -2.0f);  // code 15 without its fifth bit
}

TEST(DequantizeLegacy, Q5_1HighBitsAndOffsetHandBuilt) {
  LegacyBlock b;
  b.d = 0x3400;  // 0.25
  b.m = 0x3C00;  // 1
  for (int e = 0; e < 32; ++e) b.q[e] = e;  // element e holds code e: fifth bit set from e = 16
  const std::vector<float> y = Dequant(DType::kQ5_1, PackLegacy(DType::kQ5_1, b), 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], e * 0.25f + 1.0f) << e;
}

// Any bytes: random codes and random finite scales, several blocks a row, for each legacy type.
TEST(DequantizeLegacy, RandomBlocksMatchTheLayout) {
  std::mt19937 rng(33);
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
    SCOPED_TRACE(std::string(Name(t)));
    const int max_code = t == DType::kQ4_1 ? 15 : 31;
    constexpr int kBlocks = 5;
    std::vector<LegacyBlock> blocks(kBlocks);
    std::vector<uint8_t> row;
    for (LegacyBlock& b : blocks) {
      b.d = static_cast<uint16_t>(rng() % 0x7C00);  // finite f16, either sign below
      if (rng() & 1) b.d |= 0x8000;
      b.m = static_cast<uint16_t>((rng() % 0x7C00) | ((rng() & 1) << 15));
      for (int& q : b.q) q = static_cast<int>(rng() % (max_code + 1));
      const std::vector<uint8_t> packed = PackLegacy(t, b);
      row.insert(row.end(), packed.begin(), packed.end());
    }
    const std::vector<float> y = Dequant(t, row, 32 * kBlocks);
    for (int i = 0; i < kBlocks; ++i) {
      for (int e = 0; e < 32; ++e) {
        ASSERT_EQ(y[32 * i + e], ExpectedLegacy(t, blocks[i], e)) << "block " << i << " element " << e;
      }
    }
  }
}

// ---- Q2_K and Q3_K -------------------------------------------------------------------------------
// Element e = 128h + 32j + 16p + l (h < 2, j < 4, p < 2, l < 16) is in sub-block e / 16 and keeps its
// two low bits at bits 2j of quant byte 32h + 16p + l.

int QuantByte(int e) { return 32 * (e / 128) + 16 * ((e / 16) % 2) + e % 16; }
int QuantShift(int e) { return 2 * ((e / 32) % 4); }

struct Q2Block {
  uint16_t d = 0, dmin = 0;
  int scale[16] = {}, min[16] = {};  // 4 bits each
  int q[256] = {};                   // 2 bits
};

std::vector<uint8_t> PackQ2(const Q2Block& b) {
  std::vector<uint8_t> out(84, 0);
  for (int s = 0; s < 16; ++s) out[s] = static_cast<uint8_t>(b.scale[s] | (b.min[s] << 4));
  for (int e = 0; e < 256; ++e) out[16 + QuantByte(e)] |= static_cast<uint8_t>(b.q[e] << QuantShift(e));
  PutU16(&out[80], b.d);
  PutU16(&out[82], b.dmin);
  return out;
}

float ExpectedQ2(const Q2Block& b, int e) {
  const int s = e / 16;
  const float dl = Half(b.d) * b.scale[s], ml = Half(b.dmin) * b.min[s];
  return dl * b.q[e] - ml;
}

// Q3_K: 6-bit scales stored as value + 32 in 12 bytes. Written here in the four cases of ggml's CUDA
// dequantizer (an independent spelling of the same layout from the CPU one's 32-bit masks).
struct Q3Block {
  uint16_t d = 0;
  int scale6[16] = {};  // stored 6-bit values 0..63 (the scale is scale6 − 32)
  int q[256] = {};      // 3-bit codes 0..7: bit 2 goes to hmask, the value is (q & 3) − (bit 2 ? 0 : 4)
};

std::vector<uint8_t> PackQ3(const Q3Block& b) {
  std::vector<uint8_t> out(110, 0);
  uint8_t* sc = &out[96];
  for (int s = 0; s < 16; ++s) {
    const int lo = b.scale6[s] & 0xF, hi = b.scale6[s] >> 4;
    if (s < 4) {
      sc[s] |= lo;
      sc[s + 8] |= hi << 0;
    } else if (s < 8) {
      sc[s] |= lo;
      sc[s + 4] |= hi << 2;
    } else if (s < 12) {
      sc[s - 8] |= lo << 4;
      sc[s] |= hi << 4;
    } else {
      sc[s - 8] |= lo << 4;
      sc[s - 4] |= hi << 6;
    }
  }
  for (int e = 0; e < 256; ++e) {
    out[32 + QuantByte(e)] |= static_cast<uint8_t>((b.q[e] & 3) << QuantShift(e));
    if (b.q[e] & 4) out[e % 32] |= static_cast<uint8_t>(1 << (e / 32));  // hmask: bit e/32 of byte e%32
  }
  PutU16(&out[108], b.d);
  return out;
}

float ExpectedQ3(const Q3Block& b, int e) {
  const float dl = Half(b.d) * (b.scale6[e / 16] - 32);
  return dl * ((b.q[e] & 3) - ((b.q[e] & 4) ? 0 : 4));
}

TEST(DequantizeKLow, Q2_KScaleMinPairsHandBuilt) {
  Q2Block b;
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  for (int s = 0; s < 16; ++s) {
    b.scale[s] = s;       // low nibble
    b.min[s] = 15 - s;    // high nibble
  }
  for (int e = 0; e < 256; ++e) b.q[e] = (e / 16) % 4;
  const std::vector<uint8_t> packed = PackQ2(b);
  EXPECT_EQ(packed[3], 0xC3);  // sub-block 3: scale 3, min 12
  const std::vector<float> y = Dequant(DType::kQ2_K, packed, 256);
  EXPECT_EQ(y[0], -3.75f);            // sub-block 0: 0.5·0·0 − 0.25·15
  EXPECT_EQ(y[16], 0.5f * 1 * 1 - 0.25f * 14);  // sub-block 1, code 1
  EXPECT_EQ(y[63], 0.5f * 3 * 3 - 0.25f * 12);  // sub-block 3, code 3
  EXPECT_EQ(y[255], 0.5f * 15 * 3 - 0.0f);      // sub-block 15: scale 15, min 0, code 3
  for (int e = 0; e < 256; ++e) ASSERT_EQ(y[e], ExpectedQ2(b, e)) << e;
}

TEST(DequantizeKLow, Q3_KScalesAndHighBitsHandBuilt) {
  Q3Block b;
  b.d = 0x3C00;  // 1
  // Stored values whose top two bits differ across the four packing cases: 1 → −31, 20 → −12,
  // 34 → 2, 63 → 31.
  for (int s = 0; s < 16; ++s) b.scale6[s] = (s % 4 == 0) ? (s < 4 ? 1 : s < 8 ? 20 : s < 12 ? 34 : 63) : 32 + s;
  for (int e = 0; e < 256; ++e) b.q[e] = e % 8;
  const std::vector<uint8_t> packed = PackQ3(b);
  EXPECT_EQ(packed[96 + 8], 0xE4);  // top bits of sub-blocks 0, 4, 8, 12: 0, 1, 2, 3
  const std::vector<float> y = Dequant(DType::kQ3_K, packed, 256);
  EXPECT_EQ(y[0], -31.0f * -4);  // code 0: high bit clear, value 0 − 4
  EXPECT_EQ(y[4], -31.0f * 0);   // code 4: high bit set, value 0
  EXPECT_EQ(y[7], -31.0f * 3);
  EXPECT_EQ(y[64], -12.0f * -4);  // sub-block 4
  EXPECT_EQ(y[131], 2.0f * -1);   // sub-block 8, code 3: high bit clear, 3 − 4
  EXPECT_EQ(y[199], 31.0f * 3);   // sub-block 12, code 7
  for (int e = 0; e < 256; ++e) ASSERT_EQ(y[e], ExpectedQ3(b, e)) << e;
}

TEST(DequantizeKLow, RandomBlocksMatchTheLayout) {
  std::mt19937 rng(3);
  constexpr int kBlocks = 3;
  auto f16 = [&] { return static_cast<uint16_t>((rng() % 0x7C00) | ((rng() & 1) << 15)); };
  std::vector<Q2Block> q2(kBlocks);
  std::vector<Q3Block> q3(kBlocks);
  std::vector<uint8_t> row2, row3;
  for (int i = 0; i < kBlocks; ++i) {
    q2[i].d = f16();
    q2[i].dmin = f16();
    q3[i].d = f16();
    for (int s = 0; s < 16; ++s) {
      q2[i].scale[s] = static_cast<int>(rng() % 16);
      q2[i].min[s] = static_cast<int>(rng() % 16);
      q3[i].scale6[s] = static_cast<int>(rng() % 64);
    }
    for (int e = 0; e < 256; ++e) {
      q2[i].q[e] = static_cast<int>(rng() % 4);
      q3[i].q[e] = static_cast<int>(rng() % 8);
    }
    const std::vector<uint8_t> p2 = PackQ2(q2[i]), p3 = PackQ3(q3[i]);
    row2.insert(row2.end(), p2.begin(), p2.end());
    row3.insert(row3.end(), p3.begin(), p3.end());
  }
  const std::vector<float> y2 = Dequant(DType::kQ2_K, row2, 256 * kBlocks);
  const std::vector<float> y3 = Dequant(DType::kQ3_K, row3, 256 * kBlocks);
  for (int i = 0; i < kBlocks; ++i) {
    for (int e = 0; e < 256; ++e) {
      ASSERT_EQ(y2[256 * i + e], ExpectedQ2(q2[i], e)) << "Q2_K block " << i << " element " << e;
      ASSERT_EQ(y3[256 * i + e], ExpectedQ3(q3[i], e)) << "Q3_K block " << i << " element " << e;
    }
  }
}

// ---- Geometry, names and errors ------------------------------------------------------------------

TEST(ExtraTypes, GeometryIdsAndNames) {
  struct Want {
    DType t;
    uint32_t id;
    std::string_view name, ggml;
    int64_t elems, bytes;
  };
  for (const Want& w : {Want{DType::kQ4_1, 3, "q4_1", "Q4_1", 32, 20}, Want{DType::kQ5_0, 6, "q5_0", "Q5_0", 32, 22},
                        Want{DType::kQ5_1, 7, "q5_1", "Q5_1", 32, 24}, Want{DType::kQ2_K, 10, "q2_k", "Q2_K", 256, 84},
                        Want{DType::kQ3_K, 11, "q3_k", "Q3_K", 256, 110}}) {
    SCOPED_TRACE(std::string(w.name));
    EXPECT_EQ(DTypeFromGgmlId(w.id), w.t);
    EXPECT_EQ(Name(w.t), w.name);
    EXPECT_EQ(GgmlTypeName(w.id), w.ggml);
    EXPECT_EQ(Info(w.t).block_elems, w.elems);
    EXPECT_EQ(Info(w.t).block_bytes, w.bytes);
    EXPECT_TRUE(Info(w.t).quantized);
    absl::StatusOr<DType> parsed = ParseDType(w.ggml);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, w.t);
    // Q5_0 and Q5_1 are written as llama-quantize's fallbacks (rows not a multiple of 256); the
    // others are read only.
    EXPECT_EQ(CanQuantize(w.t), w.t == DType::kQ5_0 || w.t == DType::kQ5_1);
  }
  EXPECT_EQ(GgmlTypeName(23), "IQ4_XS");
  EXPECT_EQ(GgmlTypeName(35), "TQ2_0");
  EXPECT_EQ(GgmlTypeName(39), "MXFP4");
  EXPECT_EQ(GgmlTypeName(1000), "");
  EXPECT_FALSE(DTypeFromGgmlId(23).has_value());
  EXPECT_THAT(SupportedGgmlTypeNames(), HasSubstr("Q5_0"));
  EXPECT_THAT(SupportedGgmlTypeNames(), HasSubstr("Q3_K"));
}

TEST(ExtraTypes, RowsOfPartialBlocksAreErrors) {
  std::vector<uint8_t> bytes(256, 0);
  std::vector<float> y(256);
  for (DType t : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K}) {
    const int64_t bad = Info(t).block_elems + 16;
    absl::Status s = DequantizeRow(t, bytes.data(), bad, y.data());
    EXPECT_FALSE(s.ok()) << Name(t);
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::string(Name(t)))) << s;
    EXPECT_FALSE(RowBytes(t, bad).ok());
  }
}

}  // namespace
}  // namespace specgen
