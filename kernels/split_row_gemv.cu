#include "kernels/split_row_gemv.cuh"

#include <type_traits>

#include "kernels/device_util.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kLaneK = 8;              // inputs a 16-byte load holds
constexpr int kWarpK = 32 * kLaneK;    // inputs a warp covers with one load per lane
constexpr int kRowsPerBlock = kThreads / 32 / kSplitRowWarps;

// Warp w of block b: row b * kRowsPerBlock + w / kSplitRowWarps, quarter q = w % kSplitRowWarps, inputs
// [q * in / kSplitRowWarps, ..) of which lane l sums k = l * 8 + 256 c + j (c < kChunks, j < 8) in that
// order with fmaf, then the butterfly; the row's quarters are added in q order to the prior y.
template <ElemType kW, int kChunks>
__global__ void __launch_bounds__(kThreads) SplitRowAddKernel(const float* x, const uint16_t* __restrict__ w,
                                                              float* y, int rows, int in) {
  __shared__ float quarter[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = blockIdx.x * kRowsPerBlock + warp / kSplitRowWarps, q = warp % kSplitRowWarps;
  const int k0 = q * (in / kSplitRowWarps) + lane * kLaneK;
  // The weights do not depend on the previous kernel: in flight before the wait.
  uint4 wv[kChunks];
  const uint16_t* wr = w + static_cast<size_t>(min(row, rows - 1)) * in + k0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) wv[c] = detail::LoadWeights16(wr + c * kWarpK);
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  const bool leader = q == 0 && lane == 0 && row < rows;
  const float prior = leader ? y[row] : 0.f;  // its round trip overlaps the dots
  float4 xa[kChunks], xb[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    xa[c] = *reinterpret_cast<const float4*>(x + k0 + c * kWarpK);
    xb[c] = *reinterpret_cast<const float4*>(x + k0 + c * kWarpK + 4);
  }
  float acc = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float wf[8];
    detail::Unpack8<kW>(wv[c], wf);
    const float xv[8] = {xa[c].x, xa[c].y, xa[c].z, xa[c].w, xb[c].x, xb[c].y, xb[c].z, xb[c].w};
#pragma unroll
    for (int j = 0; j < 8; ++j) acc = __fmaf_rn(wf[j], xv[j], acc);
  }
  acc = detail::WarpSum(acc);
  if (lane == 0) quarter[warp] = acc;
  __syncthreads();
  if (leader) {
    float s = quarter[warp];
#pragma unroll
    for (int i = 1; i < kSplitRowWarps; ++i) s += quarter[warp + i];
    y[row] = prior + s;
  }
}

// 4 warps a row rather than 2 (16 KB of weights a warp for down): more warps share each row's loads
// (docs/experiments.md).
template <ElemType kW>
cudaError_t LaunchTyped(const float* x, const void* w, float* y, int rows, int in, cudaStream_t stream,
                        bool programmatic) {
  const auto launch = [&](auto chunks) {
    return LaunchDecodeKernel(SplitRowAddKernel<kW, decltype(chunks)::value>,
                              dim3((rows + kRowsPerBlock - 1) / kRowsPerBlock), dim3(kThreads), 0, stream,
                              programmatic, x, static_cast<const uint16_t*>(w), y, rows, in);
  };
  switch (in / (kWarpK * kSplitRowWarps)) {  // 16-byte loads a lane (SplitRowAddGemvTakes: 1..4)
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    case 4: return launch(std::integral_constant<int, 4>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool SplitRowAddGemvTakes(int in, ElemType w_type) {
  const int per = kWarpK * kSplitRowWarps;
  return (w_type == ElemType::kBF16 || w_type == ElemType::kF16) && in > 0 && in % per == 0 && in / per <= 4;
}

cudaError_t LaunchSplitRowAddGemv(const float* x, const void* w, ElemType w_type, float* y, int rows, int in,
                                  cudaStream_t stream, bool programmatic) {
  if (!SplitRowAddGemvTakes(in, w_type) || rows <= 0 || x == nullptr || w == nullptr || y == nullptr ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  return w_type == ElemType::kBF16 ? LaunchTyped<ElemType::kBF16>(x, w, y, rows, in, stream, programmatic)
                                   : LaunchTyped<ElemType::kF16>(x, w, y, rows, in, stream, programmatic);
}

}  // namespace specgen::kernels
