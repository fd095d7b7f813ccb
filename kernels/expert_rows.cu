#include <algorithm>

#include "kernels/expert_rows.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

__global__ void GatherRowsKernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                 int cols, float* __restrict__ dst) {
  const int i = blockIdx.y;
  const int64_t r = rows[i];
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    dst[static_cast<int64_t>(i) * cols + c] = src[r * cols + c];
  }
}

__global__ void ScatterAddScaledKernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                       const float* __restrict__ scales, int m, int cols,
                                       float* __restrict__ dst) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int i = 0; i < m; ++i) {
    float* d = dst + static_cast<int64_t>(rows[i]) * cols + c;
    *d = __fmaf_rn(scales[i], src[static_cast<int64_t>(i) * cols + c], *d);
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const float* src, const int32_t* rows, int m, int cols, float* dst,
                             cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(m >= 0 && cols > 0 && m <= 65535);
  if (m == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && rows && dst);
  const unsigned bx = static_cast<unsigned>(std::min((cols + 255) / 256, 64));
  GatherRowsKernel<<<dim3(bx, m), 256, 0, stream>>>(src, rows, cols, dst);
  return cudaGetLastError();
}

cudaError_t LaunchScatterAddScaled(const float* src, const int32_t* rows, const float* scales, int m,
                                   int cols, float* dst, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(m >= 0 && cols > 0);
  if (m == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(src && rows && scales && dst);
  ScatterAddScaledKernel<<<(cols + 255) / 256, 256, 0, stream>>>(src, rows, scales, m, cols, dst);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
