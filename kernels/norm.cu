#include "kernels/device_util.cuh"
#include "kernels/norm.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kNormThreads = 256;
// Rows up to this many elements a thread take RmsNormRegsKernel (4096 at 256 threads).
constexpr int kNormMaxPer = 16;

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

// RmsNormKernel's arithmetic (each thread's fmaf chain over i = tid, tid + blockDim, ..., the same
// block sum, x * inv * w) with a thread's kPer elements and weights loaded at once instead of one
// dependent L2 round trip each: a chain of round trips made the one-block norm of a hidden row one of
// the longest of a layer's small kernels. Launched with programmatic
// dependent launch where the device has it: the weights are read before the previous kernel ends, x
// after. In place is safe: each element is read and written by one thread, reads first.
template <int kPer>
__global__ void RmsNormRegsKernel(const float* x, const void* __restrict__ weight, ElemType weight_type,
                                  float* out, int dim, float eps) {
  __shared__ float scratch[32];
  LetDependentsLaunch();
  float w[kPer], v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    w[j] = i < dim ? detail::LoadAsF32(weight, weight_type, i) : 0.f;
  }
  WaitForPrecedingGrid();
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* yr = out + static_cast<int64_t>(blockIdx.x) * dim;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    v[j] = i < dim ? xr[i] : 0.f;
  }
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (threadIdx.x + j * blockDim.x < dim) ss = fmaf(v[j], v[j], ss);
  }
  const float inv = detail::RmsInverse(ss, dim, eps, scratch);
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = threadIdx.x + j * blockDim.x;
    if (i < dim) yr[i] = v[j] * inv * w[j];
  }
}

template <int kPer>
cudaError_t LaunchRegs(const float* x, const void* weight, ElemType weight_type, float* out, int64_t rows,
                       int dim, float eps, int threads, cudaStream_t stream) {
  return LaunchDecodeKernel(RmsNormRegsKernel<kPer>, dim3(static_cast<unsigned>(rows)), dim3(threads), 0,
                            stream, ProgrammaticLaunchOnCurrentDevice(), x, weight, weight_type, out, dim, eps);
}

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const void* weight, ElemType weight_type, float* out,
                          int64_t rows, int dim, float eps, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && rows <= 0x7fffffff && dim > 0);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(x != nullptr && weight != nullptr && out != nullptr);
  const int threads = dim >= kNormThreads ? kNormThreads : ((dim + 31) / 32) * 32;
  const int per = (dim + threads - 1) / threads;
  if (per <= 1) return LaunchRegs<1>(x, weight, weight_type, out, rows, dim, eps, threads, stream);
  if (per <= 2) return LaunchRegs<2>(x, weight, weight_type, out, rows, dim, eps, threads, stream);
  if (per <= 4) return LaunchRegs<4>(x, weight, weight_type, out, rows, dim, eps, threads, stream);
  if (per <= 8) return LaunchRegs<8>(x, weight, weight_type, out, rows, dim, eps, threads, stream);
  if (per <= kNormMaxPer) {
    return LaunchRegs<kNormMaxPer>(x, weight, weight_type, out, rows, dim, eps, threads, stream);
  }
  RmsNormKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(x, weight, weight_type, out,
                                                                     dim, eps);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
