#include <algorithm>

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

// Warp (row o, token t): acc = fma(w[o, k], x[t, k], acc) for k = lane, lane + 32, .. in that order,
// then the warp's butterfly. Each (row, token) is its own warp (blockIdx.y walks the tokens), so a pass of
// 16 tokens takes the time of one, and the loads of kAhead steps go out before their FMAs: the order of
// the sum, and so every bit, is the same as one token alone.
template <ElemType kW>
__global__ void MatMulRowsKernel(const void* __restrict__ w, const float* __restrict__ x,
                                 float* __restrict__ y, int n, int out, int in) {
  constexpr int kAhead = 16;  // a 2048-wide row in four rounds of loads
  const int lane = threadIdx.x & 31;
  const int o = blockIdx.x * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= out) return;
  const int64_t wrow = static_cast<int64_t>(o) * in;
  for (int t = blockIdx.y; t < n; t += gridDim.y) {
    const float* xr = x + static_cast<int64_t>(t) * in;
    float acc = 0.f;
    int k = lane;
    for (; k + 32 * (kAhead - 1) < in; k += 32 * kAhead) {
      float wv[kAhead], xv[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        wv[j] = LoadW<kW>(w, wrow + k + 32 * j);
        xv[j] = xr[k + 32 * j];
      }
#pragma unroll
      for (int j = 0; j < kAhead; ++j) acc = __fmaf_rn(wv[j], xv[j], acc);
    }
    for (; k < in; k += 32) acc = __fmaf_rn(LoadW<kW>(w, wrow + k), xr[k], acc);
    acc = detail::WarpSum(acc);
    if (lane == 0) y[static_cast<int64_t>(t) * out + o] = acc;
  }
}

}  // namespace

cudaError_t LaunchMatMulRows(const void* w, ElemType w_type, const float* x, float* y, int n,
                             int out, int in, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(w && x && y && n >= 1 && out >= 1 && in >= 1);
  const dim3 blocks(static_cast<unsigned>((out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    static_cast<unsigned>(std::min(n, 65535)));
  return detail::WithPlainType(w_type, [&](auto t) {
    MatMulRowsKernel<decltype(t)::value><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(w, x, y, n, out, in);
    return cudaGetLastError();
  });
}

}  // namespace specgen::kernels
