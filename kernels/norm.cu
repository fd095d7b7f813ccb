#include "kernels/device_util.cuh"
#include "kernels/norm.cuh"

namespace specgen::kernels {
namespace {

constexpr int kNormThreads = 256;

__global__ void RmsNormKernel(const float* __restrict__ x, const void* __restrict__ weight,
                              ElemType weight_type, float* out, int dim, float eps) {
  __shared__ float scratch[32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = out + static_cast<int64_t>(blockIdx.x) * dim;
  float ss = 0.f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
  const float inv = detail::RmsInverse(ss, dim, eps, scratch);
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    yr[i] = xr[i] * inv * detail::LoadAsF32(weight, weight_type, i);
  }
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const void* weight, ElemType weight_type, float* out,
                          int64_t rows, int dim, float eps, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && rows <= 0x7fffffff && dim > 0);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(x != nullptr && weight != nullptr && out != nullptr);
  const int threads = dim >= kNormThreads ? kNormThreads : ((dim + 31) / 32) * 32;
  RmsNormKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(x, weight, weight_type, out,
                                                                     dim, eps);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
