#include "engine/core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/half.h"
#include "engine/core/quant_rows.h"
#include "engine/core/str_cat.h"

namespace specgen {
namespace {

using quant_rows::kQ4_0Bytes;
using quant_rows::kQ4_KBytes;
using quant_rows::kQ5_KBytes;
using quant_rows::kQ6_KBytes;
using quant_rows::kQ8_0Bytes;
using quant_rows::kQk;
using quant_rows::kQkK;

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
float LoadHalf(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (get_scale_min_k4).
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQk; ++j) y[j] = qs[j] * d;
}

void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQk / 2; ++j) {
    y[j] = ((qs[j] & 0x0F) - 8) * d;
    y[j + kQk / 2] = ((qs[j] >> 4) - 8) * d;
  }
}

void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int c = 0, is = 0; c < 4; ++c, q += 32, is += 2) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
  }
}

void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int c = 0, is = 0; c < 4; ++c, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, m;
    ScaleMinK4(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

void DequantQ6_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
  }
}

// ---- Quantizers ---------------------------------------------------------------------------------
// Q8_0 and Q4_0 as ggml's reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref), so
// files match llama-quantize's; the K-quants are in quant_k_ref.cc, Q5_0/Q5_1 in quant_legacy.cc.

// Q8_0: d = max|x| / 127 (stored as f16), q = round(x / d) with the exact d, ties away from zero.
// |x / d| <= 127, so q never clamps; the error against the stored d is at most d/2 plus 127 times
// the f16 rounding of d (2^-11 relative), i.e. d·(1/2 + 127·2^-11).
void QuantQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  StoreU16(b, F32ToF16(d));
  auto* qs = reinterpret_cast<int8_t*>(b + 2);
  for (int j = 0; j < kQk; ++j) {
    const float q = std::roundf(x[j] * id);
    qs[j] = static_cast<int8_t>(q == q ? std::clamp(q, -128.0f, 127.0f) : 0.0f);
  }
}

// Q4_0: d = v / −8 where v is the element of largest magnitude, so v maps to q = 0 exactly;
// q = min(15, trunc(x / d + 8.5)) (round half up). Elements of the other sign than v may reach
// x/d = 8 and clamp to 7: their error is at most |d| (others |d| / 2, plus the f16 rounding of d).
void QuantQ4_0(const float* x, uint8_t* b) {
  float amax = 0, vmax = 0;
  for (int j = 0; j < kQk; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  const float d = vmax / -8;
  const float id = d ? 1.0f / d : 0.0f;
  StoreU16(b, F32ToF16(d));
  uint8_t* qs = b + 2;
  auto level = [](float v) {  // v >= 0.5 for finite input; NaN becomes 0
    return static_cast<uint8_t>(std::min(15, static_cast<int>(v == v ? std::clamp(v, 0.0f, 16.0f) : 0.0f)));
  };
  for (int j = 0; j < kQk / 2; ++j) {
    const uint8_t q0 = level(x[j] * id + 8.5f);
    const uint8_t q1 = level(x[j + kQk / 2] * id + 8.5f);
    qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

absl::Status CheckRow(DType t, int64_t n) {
  const DTypeInfo& info = Info(t);
  if (info.block_bytes == 0) return absl::InvalidArgumentError(Cat("unsupported dtype id ", static_cast<uint32_t>(t)));
  if (n < 0 || n % info.block_elems != 0) {
    return absl::InvalidArgumentError(Cat("row of ", n, " elements is not a whole number of ", info.name,
                                          " blocks of ", info.block_elems));
  }
  return absl::OkStatus();
}

// A row of whole blocks, block by block.
template <int kElems, size_t kBytes, void (*kBlock)(const uint8_t*, float*)>
void DequantBlocks(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n / kElems; ++i) kBlock(src + i * kBytes, dst + i * kElems);
}
template <int kElems, size_t kBytes, void (*kBlock)(const float*, uint8_t*)>
void QuantBlocks(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kElems; ++i) kBlock(src + i * kElems, dst + i * kBytes);
}

std::string QuantizableNames() {
  std::string names;
  for (DType t : AllDTypes()) {
    if (Info(t).from_f32 != nullptr) names += Cat(names.empty() ? "" : ", ", Name(t));
  }
  return names;
}

}  // namespace

namespace quant_rows {

void DequantizeF32(const uint8_t* src, int64_t n, float* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void DequantizeF16(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(src + 2 * i));
}
void DequantizeBf16(const uint8_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadU16(src + 2 * i));
}
void DequantizeQ8_0(const uint8_t* src, int64_t n, float* dst) {
  DequantBlocks<kQk, kQ8_0Bytes, DequantQ8_0>(src, n, dst);
}
void DequantizeQ4_0(const uint8_t* src, int64_t n, float* dst) {
  DequantBlocks<kQk, kQ4_0Bytes, DequantQ4_0>(src, n, dst);
}
void DequantizeQ4_K(const uint8_t* src, int64_t n, float* dst) {
  DequantBlocks<kQkK, kQ4_KBytes, DequantQ4_K>(src, n, dst);
}
void DequantizeQ5_K(const uint8_t* src, int64_t n, float* dst) {
  DequantBlocks<kQkK, kQ5_KBytes, DequantQ5_K>(src, n, dst);
}
void DequantizeQ6_K(const uint8_t* src, int64_t n, float* dst) {
  DequantBlocks<kQkK, kQ6_KBytes, DequantQ6_K>(src, n, dst);
}

void QuantizeF32(const float* src, int64_t n, uint8_t* dst) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void QuantizeF16(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n; ++i) StoreU16(dst + 2 * i, F32ToF16(src[i]));
}
void QuantizeBf16(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n; ++i) StoreU16(dst + 2 * i, F32ToBf16(src[i]));
}
void QuantizeQ8_0(const float* src, int64_t n, uint8_t* dst) { QuantBlocks<kQk, kQ8_0Bytes, QuantQ8_0>(src, n, dst); }
void QuantizeQ4_0(const float* src, int64_t n, uint8_t* dst) { QuantBlocks<kQk, kQ4_0Bytes, QuantQ4_0>(src, n, dst); }

}  // namespace quant_rows

absl::Status DequantizeRow(DType t, const void* src, int64_t n, float* dst) {
  if (absl::Status s = CheckRow(t, n); !s.ok()) return s;
  Info(t).to_f32(static_cast<const uint8_t*>(src), n, dst);
  return absl::OkStatus();
}

absl::Status DequantizeRows(DType t, const void* src, int64_t rows, int64_t row_elems, float* dst) {
  if (rows < 0) return absl::InvalidArgumentError(Cat("negative row count ", rows));
  absl::StatusOr<size_t> row_bytes = RowBytes(t, row_elems);
  if (!row_bytes.ok()) return row_bytes.status();
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t r = 0; r < rows; ++r) {
    if (absl::Status s = DequantizeRow(t, b + r * *row_bytes, row_elems, dst + r * row_elems); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

bool CanQuantize(DType t) { return Info(t).from_f32 != nullptr; }

absl::Status QuantizeRow(DType t, const float* src, int64_t n, void* dst) {
  if (absl::Status s = CheckRow(t, n); !s.ok()) return s;
  if (!CanQuantize(t)) {
    return absl::UnimplementedError(
        Cat("quantizing to ", Name(t), " is not supported (supported: ", QuantizableNames(), ")"));
  }
  Info(t).from_f32(src, n, static_cast<uint8_t*>(dst));
  return absl::OkStatus();
}

}  // namespace specgen
