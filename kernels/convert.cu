#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cache_elem.cuh"
#include "kernels/convert.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

__global__ void F32ToBf16Kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

__global__ void F32ToCacheKernel(const float* __restrict__ src, void* __restrict__ dst, ElemType type,
                                 int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    detail::CacheStoreAs(dst, type, i, src[i]);
  }
}

}  // namespace

cudaError_t LaunchF32ToCache(const float* src, void* dst, ElemType type, int64_t n, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0 && detail::IsCacheElemType(type));
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && dst);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  F32ToCacheKernel<<<blocks, 256, 0, stream>>>(src, dst, type, n);
  return cudaGetLastError();
}

cudaError_t LaunchF32ToBf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && dst);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  F32ToBf16Kernel<<<blocks, 256, 0, stream>>>(src, dst, n);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
