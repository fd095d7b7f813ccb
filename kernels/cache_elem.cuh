// The KV cache's element types on the device (fp32, f16, bf16): a value is rounded to the cache's type
// to nearest even when stored, as the CPU's F32ToF16 / F32ToBf16 (engine/core/half.h) round it, and
// read back as fp32, so both backends attend over the same values. Internal to kernels/: included from
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels::detail {

// The 16 bits a value is stored as in a kF16 / kBF16 cache.
template <ElemType kT>
__device__ __forceinline__ uint16_t CacheBits(float v) {
  static_assert(kT != ElemType::kF32);
  if constexpr (kT == ElemType::kF16) {
    return __half_as_ushort(__float2half_rn(v));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

// v as a cache of type kT holds it, in fp32 (what the attention reads back).
template <ElemType kT>
__device__ __forceinline__ float CacheRound(float v) {
  if constexpr (kT == ElemType::kF32) {
    return v;
  } else if constexpr (kT == ElemType::kF16) {
    return __half2float(__ushort_as_half(CacheBits<kT>(v)));
  } else {
    return __uint_as_float(static_cast<uint32_t>(CacheBits<kT>(v)) << 16);
  }
}

// Element i of a cache of type kT = v (rounded).
template <ElemType kT>
__device__ __forceinline__ void CacheStore(void* base, int64_t i, float v) {
  if constexpr (kT == ElemType::kF32) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<uint16_t*>(base)[i] = CacheBits<kT>(v);
  }
}

// The same with the type known at run time (one uniform branch).
__device__ __forceinline__ void CacheStoreAs(void* base, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::kF32: CacheStore<ElemType::kF32>(base, i, v); break;
    case ElemType::kF16: CacheStore<ElemType::kF16>(base, i, v); break;
    default: CacheStore<ElemType::kBF16>(base, i, v); break;
  }
}

// Element i of a cache of type kT, as fp32 (exact).
template <ElemType kT>
__device__ __forceinline__ float CacheLoad(const void* base, int64_t i) {
  if constexpr (kT == ElemType::kF32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (kT == ElemType::kF16) {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(base)[i]));
  } else {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(base)[i]) << 16);
  }
}

// Whether kernels take `t` as a cache type.
__host__ __device__ constexpr bool IsCacheElemType(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kF16 || t == ElemType::kBF16;
}

}  // namespace specgen::kernels::detail
