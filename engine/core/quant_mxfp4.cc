// MXFP4 (GGUF type 39, the OCP microscaling FP4 format llama.cpp stores gpt-oss's experts in): blocks
// of 32 elements in 17 bytes, an E8M0 scale byte e then 16 bytes of 4-bit E2M1 codes. Element j < 16
// is the low nibble of byte j, element j + 16 its high nibble (ggml-common.h block_mxfp4). A code c
// (sign bit 3, then 2 exponent bits, 1 mantissa bit) is one of ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}; ggml keeps
// them doubled as integers (kvalues_mxfp4: 0 1 2 3 4 6 8 12, then the negatives) and halves the scale:
// value = kDoubled[c] · 2^(e − 128). Layout in docs/formats.md §2.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/core/quant_extra_rows.h"

namespace specgen::quant_rows {
namespace {

constexpr int kBlock = 32;
constexpr int8_t kDoubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e − 128) for every e (E8M0 is a pure power of two; 0 gives 2^-128, a subnormal).
float HalfScale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

// The code whose value is nearest to v (in units of the half scale), ties to the lower magnitude.
uint8_t NearestCode(float v) {
  int best = 0;
  float best_err = std::fabs(v);
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(v - static_cast<float>(kDoubled[c]));
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

}  // namespace

void DequantizeMxfp4(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kMxfp4Bytes, dst += kBlock) {
    const float d = HalfScale(src[0]);
    const uint8_t* qs = src + 1;
    for (int j = 0; j < kBlock / 2; ++j) {
      dst[j] = static_cast<float>(kDoubled[qs[j] & 0x0F]) * d;
      dst[j + kBlock / 2] = static_cast<float>(kDoubled[qs[j] >> 4]) * d;
    }
  }
}

// As llama.cpp's reference quantizer chooses the scale: e = floor(log2 max|x|) − 2 + 127, so the
// largest element lands in [8, 16) half-scale units; each element takes the nearest code (the codes
// stop at 12: elements above 12 units saturate there, an error of at most 4 units = max|x| / 4).
void QuantizeMxfp4(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kBlock; ++i, src += kBlock, dst += kMxfp4Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(src[j]));
    int e = 0;
    if (amax > 0.0f && std::isfinite(amax)) {
      e = std::clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 0, 254);
    }
    dst[0] = static_cast<uint8_t>(e);
    const float inv = 1.0f / HalfScale(static_cast<uint8_t>(e));
    for (int j = 0; j < kBlock / 2; ++j) {
      const uint8_t lo = NearestCode(src[j] * inv), hi = NearestCode(src[j + kBlock / 2] * inv);
      dst[1 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace specgen::quant_rows
