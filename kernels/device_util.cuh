// Device-side helpers shared by the kernel families (loads of bf16/f16/f32 as fp32, warp and block
// reductions in a fixed order). Internal to kernels/: included from .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/portable_silu.h"  // SwiGLU's silu, the host's bits (every SwiGLU site)
#include "kernels/kernel_types.h"

namespace specgen::kernels::detail {

__device__ __forceinline__ float Bf16BitsToF32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ float F16BitsToF32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// Element i of an array of the given type, as fp32 (exact for all three types).
__device__ __forceinline__ float LoadAsF32(const void* base, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF32:
      return static_cast<const float*>(base)[i];
    case ElemType::kF16:
      return F16BitsToF32(static_cast<const uint16_t*>(base)[i]);
    default:
      return Bf16BitsToF32(static_cast<const uint16_t*>(base)[i]);
  }
}

// Butterfly sum over the 32 lanes: every lane ends with the same value, computed in the same order
// whatever the data, so results are reproducible.
template <typename T>  // float or double
__device__ __forceinline__ T WarpSum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max (blockDim.x a multiple of 32, at most 1024); every thread gets the result, the
// same bits whatever the data (warp butterflies, then the butterfly of the warp sums). `scratch` is 32
// elements of shared memory; the call ends with a barrier so scratch can be reused, or, with
// kClosingBarrier false (one barrier fewer on a kernel's path), scratch must not be written again
// before another barrier.
template <bool kClosingBarrier = true, typename T>  // T: float or double
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = lane < nwarps ? scratch[lane] : T(0);
  t = WarpSum(t);
  if (kClosingBarrier) __syncthreads();
  return t;
}
// 1 / sqrt(mean of squares + eps) of an RMSNorm over `in` elements, from each thread's partial sum of
// squares: BlockSum's reduction (so every kernel that normalizes a row gets RmsNormKernel's bits;
// threads holding no element pass 0, which adds nothing) and the rsqrt, without the closing barrier.
__device__ __forceinline__ float RmsInverse(float ss, int in, float eps, float* scratch) {
  return rsqrtf(BlockSum<false>(ss, scratch) / static_cast<float>(in) + eps);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpMax(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : -INFINITY;
  t = WarpMax(t);
  __syncthreads();
  return t;
}

// Launch-argument check helper: launchers return cudaErrorInvalidValue for bad shapes.
#define SPECGEN_KERNEL_REQUIRE(cond) \
  do {                               \
    if (!(cond)) return cudaErrorInvalidValue; \
  } while (0)

// Streaming 16-byte weight load (8 bf16/f16 weights): read once, so kept out of L1 where the
// activations live. Used by every GEMV family (gemv.cu, decode_fused.cu).
__device__ __forceinline__ uint4 LoadWeights16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A 16-byte asynchronous copy from global into shared memory (cp.async, sm_80+): nothing waits for it
// until cp.async.wait_all.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// Asks L2 to fetch [p, p + bytes) from HBM (p and bytes multiples of 16), in bulk prefetches of up to
// 32 KB (cp.async.bulk.prefetch.L2, sm_90+; nothing on older devices). A hint: nothing waits for it, and
// results never depend on it. One thread issues it.
__device__ __forceinline__ void PrefetchL2(const void* p, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 32 * 1024;
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += kPiece) {
    const unsigned n = static_cast<unsigned>(bytes - off < kPiece ? bytes - off : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c + off), "r"(n) : "memory");
  }
#else
  (void)p;
  (void)bytes;
#endif
}

// The 8 weights of a 16-byte load as fp32 (bf16: a shift; f16: the hardware conversion).
template <ElemType kW>
__device__ __forceinline__ void Unpack8(const uint4& v, float (&w)[8]) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kW == ElemType::kBF16) {
      w[2 * i] = __uint_as_float(u[i] << 16);
      w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  }
}

// One 8-weight step of a batched GEMV row: acc[r][t] += wf[r][j] * x_t[j] for j = 0..7 in order
// (__fmaf_rn), rows r < kRows, tokens t < tokens (at most kMaxT), x_t's 8 floats put in xv by
// load_x(t, xv). GemvKernel (gemv.cu) and the routed experts (routed_experts.cu) both sum in these
// steps, which is what keeps an expert's product bit-identical to the Backend's MatMul.
template <int kRows, int kMaxT, typename LoadX>
__device__ __forceinline__ void FmaChunk8Loaded(const float (&wf)[kRows][8], int tokens, LoadX load_x,
                                                float (&acc)[kRows][kMaxT]) {
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t >= tokens) break;
    float xv[8];
    load_x(t, xv);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[r][t] = __fmaf_rn(wf[r][j], xv[j], acc[r][t]);
  }
}

// The same with x_t = x_at(t) in global memory (8 floats, 16-byte aligned, read through the read-only
// path).
template <int kRows, int kMaxT, typename XAt>
__device__ __forceinline__ void FmaChunk8(const float (&wf)[kRows][8], int tokens, XAt x_at,
                                          float (&acc)[kRows][kMaxT]) {
  FmaChunk8Loaded<kRows, kMaxT>(
      wf, tokens,
      [&](int t, float(&xv)[8]) {
        const float4* xp = reinterpret_cast<const float4*>(x_at(t));
        const float4 a = __ldg(xp), b = __ldg(xp + 1);
        xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
      },
      acc);
}

// The decode kernels (decode_fused.cu's and attention.cu's, whose staged kernels
// need 68-143 KB of shared memory) all ask for the largest shared-memory carveout, so consecutive kernels
// never need a different L1 / shared split (a switch waits for the multiprocessor to drain, and blocks of
// kernels with different splits cannot share one under PDL). The GEMVs' weights bypass L1, so the
// smaller L1 costs them nothing.
template <typename Kernel>
void PreferSharedCarveout(Kernel kernel) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess) {
    (void)cudaGetLastError();  // a hint only: our own failure, nothing to report
  }
}

}  // namespace specgen::kernels::detail
