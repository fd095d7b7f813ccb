#include "kernels/arch_elementwise.cuh"
#include "kernels/arch_math.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

__global__ void AddBiasKernel(float* y, const void* __restrict__ bias, ElemType bias_type, int64_t n, int cols) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __fadd_rn(y[i], detail::LoadAsF32(bias, bias_type, i % cols));
  }
}

__global__ void SwiGluClampedKernel(const float* gate, const float* up, float* out, int64_t n, float alpha,
                                    float limit) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = detail::SwiGluClampedRn(gate[i], up[i], alpha, limit);
  }
}

__global__ void ScaleRowsBySigmoidKernel(const float* __restrict__ g, float* y, int64_t n, int cols) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __fmul_rn(y[i], detail::SigmoidRn(g[i / cols]));
  }
}

}  // namespace

cudaError_t LaunchAddBias(float* y, const void* bias, ElemType bias_type, int64_t rows, int cols,
                          cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && cols > 0 && !IsPacked(bias_type));
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(y != nullptr && bias != nullptr);
  const int64_t n = rows * cols;
  AddBiasKernel<<<GridFor(n), kThreads, 0, stream>>>(y, bias, bias_type, n, cols);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluClamped(const float* gate, const float* up, float* out, int64_t n, float alpha,
                                float limit, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(gate != nullptr && up != nullptr && out != nullptr);
  SwiGluClampedKernel<<<GridFor(n), kThreads, 0, stream>>>(gate, up, out, n, alpha, limit);
  return cudaGetLastError();
}

cudaError_t LaunchScaleRowsBySigmoid(const float* g, float* y, int64_t rows, int cols, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && cols > 0);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(g != nullptr && y != nullptr);
  const int64_t n = rows * cols;
  ScaleRowsBySigmoidKernel<<<GridFor(n), kThreads, 0, stream>>>(g, y, n, cols);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
