// Q4_1, Q5_0 and Q5_1: 32 elements a block, one f16 scale d (and for the _1 types an f16 offset m);
// element j of a block pairs with element j + 16 in one byte of nibbles, and the Q5 types keep each
// element's fifth bit in a 32-bit mask (bit j for element j).
#include <algorithm>
#include <cfloat>
#include <cmath>
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

void StoreHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// trunc(v) for the quantizers' already-offset levels, kept in [0, top]; NaN becomes 0.
int Level(float v, int top) { return v == v ? std::min(top, static_cast<int>(std::clamp(v, 0.0f, 255.0f))) : 0; }

// Packs 32 five-bit levels: low nibbles of j and j + 16 in byte j, fifth bits in the 32-bit mask.
void PackFiveBit(const int* q, uint8_t* qh_out, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < kBlock / 2; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + kBlock / 2] & 0x0F) << 4));
    qh |= ((static_cast<uint32_t>(q[j]) & 0x10u) >> 4) << j;
    qh |= ((static_cast<uint32_t>(q[j + kBlock / 2]) & 0x10u) >> 4) << (j + kBlock / 2);
  }
  std::memcpy(qh_out, &qh, 4);
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

// Q5_0 as ggml's quantize_row_q5_0_ref: d = v / −16 for the element v of largest magnitude (which
// maps to level 0 exactly), level = min(31, trunc(x / d + 16.5)): round half up, error at most
// |d| / 2 except for elements of the other sign than v at x/d = 16, which clamp to 15·d (error |d|).
void QuantizeQ5_0(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kBlock, dst += kQ5_0Bytes) {
    float amax = 0, vmax = 0;
    for (int j = 0; j < kBlock; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        vmax = src[j];
      }
    }
    const float d = vmax / -16;
    const float id = d ? 1.0f / d : 0.0f;
    StoreHalf(dst, d);
    int q[kBlock];
    for (int j = 0; j < kBlock; ++j) q[j] = Level(src[j] * id + 16.5f, 31);
    PackFiveBit(q, dst + 2, dst + 6);
  }
}

// Q5_1 as ggml's quantize_row_q5_1_ref: m = min x, d = (max − min) / 31, level = trunc((x − m) / d
// + 0.5): every element within d / 2 of its value (before the f16 rounding of d and m).
void QuantizeQ5_1(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kBlock, dst += kQ5_1Bytes) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kBlock; ++j) {
      if (src[j] < min) min = src[j];
      if (src[j] > max) max = src[j];
    }
    const float d = (max - min) / 31;
    const float id = d ? 1.0f / d : 0.0f;
    StoreHalf(dst, d);
    StoreHalf(dst + 2, min);
    int q[kBlock];
    for (int j = 0; j < kBlock; ++j) q[j] = Level((src[j] - min) * id + 0.5f, 31);
    PackFiveBit(q, dst + 4, dst + 8);
  }
}

}  // namespace specgen::quant_rows
