// Q4_1, Q5_0 and Q5_1: 32 elements a block, one f16 scale d (and for the _1 types an f16 offset m);
// element j of a block pairs with element j + 16 in one byte of nibbles, and the Q5 types keep each
// element's fifth bit in a 32-bit mask (bit j for element j).
#include <cstring>

#include "engine/core/half.h"
#include "engine/core/quant_extra_rows.h"

namespace specgen::quant_rows {
namespace {

constexpr int kBlock = 32;

float LoadHalf(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return F16ToF32(v);
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // little-endian hosts only, as every GGUF reader here
  return v;
}

// The fifth bits of elements j and j + 16 from the block's mask, already at bit 4.
int HighBitLow(uint32_t qh, int j) { return static_cast<int>(((qh >> j) << 4) & 0x10); }
int HighBitHigh(uint32_t qh, int j) { return static_cast<int>((qh >> (j + 12)) & 0x10); }

}  // namespace

void DequantizeQ4_1(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kQ4_1Bytes, dst += kBlock) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < kBlock / 2; ++j) {
      dst[j] = (qs[j] & 0x0F) * d + m;
      dst[j + kBlock / 2] = (qs[j] >> 4) * d + m;
    }
  }
}

void DequantizeQ5_0(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kQ5_0Bytes, dst += kBlock) {
    const float d = LoadHalf(src);
    const uint32_t qh = LoadU32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < kBlock / 2; ++j) {
      const int x0 = ((qs[j] & 0x0F) | HighBitLow(qh, j)) - 16;
      const int x1 = ((qs[j] >> 4) | HighBitHigh(qh, j)) - 16;
      dst[j] = x0 * d;
      dst[j + kBlock / 2] = x1 * d;
    }
  }
}

void DequantizeQ5_1(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kQ5_1Bytes, dst += kBlock) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const uint32_t qh = LoadU32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < kBlock / 2; ++j) {
      const int x0 = (qs[j] & 0x0F) | HighBitLow(qh, j);
      const int x1 = (qs[j] >> 4) | HighBitHigh(qh, j);
      dst[j] = x0 * d + m;
      dst[j + kBlock / 2] = x1 * d + m;
    }
  }
}

}  // namespace specgen::quant_rows
