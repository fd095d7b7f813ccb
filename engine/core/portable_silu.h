// exp, silu and SwiGLU's silu(g)·u in plain fp32 operations in one written order, so that the host CPU
// and the GPU compute them to the same bits (docs/design.md §6.9): CUDA's expf and glibc's expf are
// different functions, and an expert computed on the host (moe/host) must give the GPU's bits.
//
// Exp is Cephes' expf: k = rint(x·log2e) (the 1.5·2^23 shifter, exact for |x·log2e| < 2^22), r = x − k·ln2
// in two steps (Cody-Waite: k·C1 is exact), a degree-5 polynomial in r by Horner, and the scale 2^k
// applied as two exact-power multiplies (one rounding, where the result is subnormal). Every operation
// is one IEEE rounding to nearest: on the device the _rn intrinsics (nvcc would otherwise contract a
// multiply and add into an FMA); on the host plain operators, with a compiler barrier after each
// product wherever the compiler could fuse (it defines __FP_FAST_FMAF then). Accuracy against the
// correctly rounded exp (tests/core/portable_silu_test.cc): within 2 ulp wherever the
// result is a normal float; silu within 3 ulp (the measured figures: the test's output).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPECGEN_PORTABLE_FN __host__ __device__ __forceinline__
#else
#define SPECGEN_PORTABLE_FN inline
#endif

namespace specgen::portable {

SPECGEN_PORTABLE_FN float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
#if defined(__FP_FAST_FMAF) && (defined(__GNUC__) || defined(__clang__))
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(p));  // the product is rounded before any add reads it
#elif defined(__aarch64__)
  __asm__("" : "+w"(p));
#else
  volatile float v = p;
  p = v;
#endif
#endif
  return p;
#endif
}

SPECGEN_PORTABLE_FN float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

SPECGEN_PORTABLE_FN float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

SPECGEN_PORTABLE_FN float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

SPECGEN_PORTABLE_FN float FromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

SPECGEN_PORTABLE_FN uint32_t ToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

// 2^e for e in [-126, 127], exactly.
SPECGEN_PORTABLE_FN float Pow2(int32_t e) { return FromBits(static_cast<uint32_t>(e + 127) << 23); }

SPECGEN_PORTABLE_FN float Exp(float x) {
  if (x != x) return Add(x, x);                              // NaN (quieted)
  if (x > 88.72283935546875f) return FromBits(0x7f800000u);  // above ln(FLT_MAX): +inf
  if (x < -103.972084f) return 0.f;                          // below ln of half the least subnormal
  const float shifter = 12582912.f;                          // 1.5 · 2^23
  const float kf = Sub(Add(Mul(x, 1.44269504088896341f), shifter), shifter);
  float r = Sub(x, Mul(kf, 0.693359375f));                   // C1: 9 bits, so k·C1 is exact
  r = Sub(r, Mul(kf, -2.12194440e-4f));                      // C2 = ln2 − C1
  const float z = Mul(r, r);
  float p = 1.9875691500e-4f;
  p = Add(Mul(p, r), 1.3981999507e-3f);
  p = Add(Mul(p, r), 8.3334519073e-3f);
  p = Add(Mul(p, r), 4.1665795894e-2f);
  p = Add(Mul(p, r), 1.6666665459e-1f);
  p = Add(Mul(p, r), 5.0000001201e-1f);
  float y = Add(Add(Mul(p, z), r), 1.f);
  const int32_t k = static_cast<int32_t>(kf);                // in [-150, 128]
  const int32_t k1 = k / 2, k2 = k - k1;                     // each in [-75, 64]: normal powers
  y = Mul(y, Pow2(k1));                                      // exact (the result stays normal)
  return Mul(y, Pow2(k2));                                   // the one rounding, if subnormal
}

// silu(g) = g / (1 + exp(−g)).
SPECGEN_PORTABLE_FN float Silu(float g) { return Div(g, Add(1.f, Exp(-g))); }

// SwiGLU's product silu(g) · u.
SPECGEN_PORTABLE_FN float SiluMul(float g, float u) { return Mul(Silu(g), u); }

}  // namespace specgen::portable
