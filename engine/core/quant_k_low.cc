// Q2_K and Q3_K: 256 elements a block in 16 sub-blocks of 16, each with its own scale. The 2-bit
// quants of four consecutive sub-block pairs share bytes: within each half of the block (128 elements),
// byte l of the 32 holds element l's bits at shift 0, element l + 32's at shift 2, and so on, with
// the second 16 bytes serving the odd sub-blocks.
#include <cstring>

#include "engine/core/half.h"
#include "engine/core/quant_extra_rows.h"

namespace specgen::quant_rows {
namespace {

constexpr int kBlock = 256;

float LoadHalf(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return F16ToF32(v);
}

// Q3_K's 16 signed 6-bit scales (stored + 32) from its 12 bytes: bytes 0-7 hold the low nibbles (of
// scales 0-7 in their low halves, 8-15 in their high halves), bytes 8-11 the top two bits, scale
// 4k + i's at bits 2k..2k+1 of byte 8 + i.
void UnpackQ3Scales(const uint8_t* packed, int* scales) {
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? packed[s] & 0x0F : packed[s - 8] >> 4;
    const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
    scales[s] = (low | (high << 4)) - 32;
  }
}

}  // namespace

// Layout: scales[16] @0 (low nibble: scale, high nibble: min, of sub-block s), qs[64] @16, d @80,
// dmin @82. y = d·scale·q − dmin·min.
void DequantizeQ2_K(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kQ2_KBytes) {
    const uint8_t* scales = src;
    const float d = LoadHalf(src + 80);
    const float dmin = LoadHalf(src + 82);
    const uint8_t* q = src + 16;
    int s = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part, ++s) {
          const float dl = d * (scales[s] & 0x0F);
          const float ml = dmin * (scales[s] >> 4);
          const uint8_t* qp = q + 16 * part;
          for (int l = 0; l < 16; ++l) *dst++ = dl * ((qp[l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Layout: hmask[32] @0 (bit k of byte l: the high bit of element 32k + l), qs[64] @32, scales[12] @96,
// d @108. q3 = low two bits − (high bit set ? 0 : 4), in −4..3; y = d·(scale − 32)·q3.
void DequantizeQ3_K(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kQ3_KBytes) {
    const uint8_t* hmask = src;
    const float d = LoadHalf(src + 108);
    int scales[16];
    UnpackQ3Scales(src + 96, scales);
    const uint8_t* q = src + 32;
    int s = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int part = 0; part < 2; ++part, ++s) {
          const float dl = d * scales[s];
          const uint8_t* qp = q + 16 * part;
          const uint8_t* hp = hmask + 16 * part;
          for (int l = 0; l < 16; ++l) {
            *dst++ = dl * (((qp[l] >> shift) & 3) - ((hp[l] & m) ? 0 : 4));
          }
        }
      }
    }
  }
}

}  // namespace specgen::quant_rows
