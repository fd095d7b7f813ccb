#include "kernels/matmul_rows.cuh"
#include "kernels/type_dispatch.cuh"
#include "kernels/device_util.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

template <ElemType kW>
__device__ __forceinline__ float LoadW(const void* w, int64_t i) {
  if constexpr (kW == ElemType::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (kW == ElemType::kF16) {
    return detail::F16BitsToF32(static_cast<const uint16_t*>(w)[i]);
  } else {
    return detail::Bf16BitsToF32(static_cast<const uint16_t*>(w)[i]);
  }
}

template <ElemType kW>
__global__ void MatMulRowsKernel(const void* __restrict__ w, const float* __restrict__ x,
                                 float* __restrict__ y, int n, int out, int in) {
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t wrow = static_cast<int64_t>(o) * in;
  for (int t = 0; t < n; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * in;
    float acc = 0.f;
    for (int k = lane; k < in; k += 32) acc = __fmaf_rn(LoadW<kW>(w, wrow + k), xr[k], acc);
    acc = detail::WarpSum(acc);
    if (lane == 0) y[static_cast<int64_t>(t) * out + o] = acc;
  }
}

}  // namespace

cudaError_t LaunchMatMulRows(const void* w, ElemType w_type, const float* x, float* y, int n,
                             int out, int in, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(w && x && y && n >= 1 && out >= 1 && in >= 1);
  const unsigned blocks = static_cast<unsigned>((out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  return detail::WithPlainType(w_type, [&](auto t) {
    MatMulRowsKernel<decltype(t)::value><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, x, y, n, out, in);
    return cudaGetLastError();
  });
}

}  // namespace specgen::kernels
