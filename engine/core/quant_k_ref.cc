// Q4_K, Q5_K and Q6_K from f32, as ggml's reference quantizers choose them.
//
// Q4_K / Q5_K (32-element sub-blocks, y = d·sc_j·q − dmin·m_j): each sub-block gets a scale and a
// min from a weighted least-squares search over candidate grids (MakeQkx2Quants), the 8 scales and
// 8 mins are then stored as 6-bit multiples of the block's largest, and the elements re-rounded
// against those stored values. Q6_K (16-element sub-blocks, y = d·sc_j·(q − 32), signed 8-bit sc_j):
// each sub-block's scale from MakeQxQuants, then the scales as multiples of d = max / −128.
// The operations and their order follow ggml-quants.c so that results agree bit for bit.
#include "engine/core/quant_k_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/half.h"
#include "engine/core/quant_rows.h"

namespace specgen::quant_rows {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // a group whose largest |x| is below this is all zero

void StoreHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}
float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Scale of a symmetric grid of levels −nmax..nmax−1 for n values (make_qx_quants, rmse_type 1:
// weights x², no importance matrix). L receives level + nmax. Tries the grid through the value of
// largest magnitude, then 18 slightly wider and narrower ones, keeping the least-squares best.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = NearestInt(iscale * x[i]);
    l = std::max(-nmax, std::min(nmax - 1, l));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * x[i]);
      l = std::max(-nmax, std::min(nmax - 1, l));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = NearestInt(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + std::max(-nmax, std::min(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Scale and min of an asymmetric grid 0..nmax for n values (make_qkx2_quants, squared error):
// starts from the grid spanning [min(0, min x), max x], then tries nstep + 1 grids of
// (rmin + rdelta·is + nmax) levels over the same span, fitting scale and min by weighted least
// squares for each and keeping the one of least weighted error. *the_min receives −min (≥ 0).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                     uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = NearestInt(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = NearestInt(iscale * (x[i] - min));
      l = std::max(0, std::min(nmax, l));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += weights[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The shared part of Q4_K and Q5_K: per-sub-block fits, 6-bit scales and mins packed into
// scales[12], d and dmin, and the final levels L (0..nmax) against the stored values.
// nstep/rmin/rdelta are the search settings ggml uses for the type.
void QuantizeKWithMin(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* d_out,
                      uint8_t* dmin_out, uint8_t* scales, uint8_t* L) {
  float mins[8], sub_scales[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    sub_scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta,
                                   nstep);
    if (sub_scales[j] > max_scale) max_scale = sub_scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(NearestInt(inv_scale * sub_scales[j]));
    uint8_t lm = static_cast<uint8_t>(NearestInt(inv_min * mins[j]));
    ls = std::min<uint8_t>(63, ls);
    lm = std::min<uint8_t>(63, lm);
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  StoreHalf(d_out, max_scale / 63.f);
  StoreHalf(dmin_out, max_min / 63.f);
  const float d_all = LoadHalf(d_out), dmin_all = LoadHalf(dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, scales, &sc, &m);
    const float d = d_all * sc;
    if (!d) continue;  // levels stay as the fit left them (they multiply a zero step)
    const float dm = dmin_all * m;
    for (int ii = 0; ii < 32; ++ii) {
      const int l = NearestInt((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
    }
  }
}

void QuantQ4_KBlock(const float* x, uint8_t* b) {
  uint8_t L[256];
  QuantizeKWithMin(x, 15, -1.f, 0.1f, 20, b, b + 2, b + 4, L);
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void QuantQ5_KBlock(const float* x, uint8_t* b) {
  uint8_t L[256];
  QuantizeKWithMin(x, 31, -0.5f, 0.1f, 15, b, b + 2, b + 4, L);
  uint8_t* qh = b + 16;
  uint8_t* ql = b + 48;
  std::memset(qh, 0, 32);
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] |= m1;
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] |= m2;
      }
      ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
    m1 <<= 2;
    m2 <<= 2;
  }
}

void QuantQ6_KBlock(const float* x, uint8_t* b) {
  int8_t L[256];
  float sub_scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
    sub_scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(b, 0, kQ6_KBytes);
    return;
  }
  const float iscale = -128.f / max_scale;
  StoreHalf(b + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    sc[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * sub_scales[ib])));
  }
  const float d_all = LoadHalf(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * sc[j];
    if (!d) continue;
    for (int ii = 0; ii < 16; ++ii) {
      int l = NearestInt(x[16 * j + ii] / d);
      l = std::max(-32, std::min(31, l));
      L[16 * j + ii] = static_cast<int8_t>(l + 32);
    }
  }
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
      const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

int NearestInt(float x) {
  // Adding 1.5·2^23 leaves the integer part in the low mantissa bits, rounded by the FPU's
  // round-to-nearest-even; inputs beyond ±2^22 (NaN, inf included) are clamped first so that the
  // result stays defined (ggml asserts instead).
  const float v = std::fmin(std::fmax(x, -4194303.f), 4194303.f);
  const float val = (v == v ? v : 0.0f) + 12582912.f;
  int32_t i;
  std::memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

void QuantizeQ4_K(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kQkK; ++i) QuantQ4_KBlock(src + i * kQkK, dst + i * kQ4_KBytes);
}
void QuantizeQ5_K(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kQkK; ++i) QuantQ5_KBlock(src + i * kQkK, dst + i * kQ5_KBytes);
}
void QuantizeQ6_K(const float* src, int64_t n, uint8_t* dst) {
  for (int64_t i = 0; i < n / kQkK; ++i) QuantQ6_KBlock(src + i * kQkK, dst + i * kQ6_KBytes);
}

}  // namespace specgen::quant_rows
