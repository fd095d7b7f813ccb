#include "kernels/decode_fused.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = 4;      // warps per block
constexpr int kChunk = 8;      // weights per 16-byte load
constexpr int kWarpK = 32 * kChunk;  // k covered by one warp-wide step


// Warp owns R consecutive output rows; each lane keeps U chunks per row in flight.
template <ElemType kW, int N, int R, int U>
__global__ void __launch_bounds__(kWarps * 32) GemvKernel(const uint16_t* __restrict__ w,
                                                          const float* __restrict__ x,
                                                          float* __restrict__ y, int out, int in) {
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * R;
  if (row0 >= out) return;
  float acc[R][N];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.f;

  // The warp's first U chunks of weights are requested before waiting for the previous kernel (PDL:
  // they overlap its tail, and the launch's own start), x is read after; the order of the sums is
  // unchanged. H200, synth:qwen3-1.7b, ncu: these GEMVs averaged 1.5-2.7 TB/s launched plainly.
  LetDependentsLaunch();
  const int kb0 = lane * kChunk;
  uint4 wv[U][R];
  const auto load = [&](int kb) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kb + u * kWarpK;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = row0 + r < out ? row0 + r : out - 1;  // clamp: result discarded below
        wv[u][r] = k < in ? detail::LoadWeights16(w + static_cast<int64_t>(row) * in + k)
                          : make_uint4(0, 0, 0, 0);
      }
    }
  };
  load(kb0);
  WaitForPrecedingGrid();
  for (int kb = kb0; kb < in; kb += kWarpK * U) {
    if (kb != kb0) load(kb);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kb + u * kWarpK;
      if (k >= in) break;  // zero chunks would still add +0.f; skip so order stays exactly k-ordered
      float wf[R][8];
#pragma unroll
      for (int r = 0; r < R; ++r) detail::Unpack8<kW>(wv[u][r], wf[r]);
      detail::FmaChunk8<R, N>(wf, N, [&](int t) { return x + static_cast<int64_t>(t) * in + k; }, acc);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float s = detail::WarpSum(acc[r][t]);
      if (lane == 0 && row0 + r < out) y[static_cast<int64_t>(t) * out + row0 + r] = s;
    }
}

template <ElemType kW, int N>
cudaError_t LaunchN(const void* w, const float* x, float* y, int out, int in, cudaStream_t stream) {
  // Rows per warp grow with the batch so x loads are shared by more rows; loads in flight per lane
  // stay near 4 x 16 bytes. Neither changes the per-element reduction order.
  // From 3 tokens, 4 rows a warp: a warp reads 2n/R bytes of x from L1 per weight byte, and at R = 2
  // that read bound the kernel from 5 tokens. H200 A/B (BM_Gemv, GB/s, R = 2 -> 4), 4096 x 4096 at
  // 4/5/8 tokens: 2255/1610/1183 -> 2207/1756/1762; 14336 x 4096: 2899/2168/1527 -> 3188/2472/2092.
  // R = 8 from 9 tokens (one chunk in flight, ~255 registers) fell to 558 GB/s at 16: not taken.
  constexpr int R = N <= 2 ? 1 : 4;
  constexpr int U = N <= 2 ? 4 : 2;
  const int rows_per_block = kWarps * R;
  const unsigned blocks = static_cast<unsigned>((out + rows_per_block - 1) / rows_per_block);
  return LaunchDecodeKernel(GemvKernel<kW, N, R, U>, dim3(blocks), dim3(kWarps * 32), 0, stream,
                            ProgrammaticLaunchOnCurrentDevice(), static_cast<const uint16_t*>(w), x, y, out, in);
}

template <ElemType kW, int... Ns>
cudaError_t Dispatch(int n, const void* w, const float* x, float* y, int out, int in,
                     cudaStream_t stream, std::integer_sequence<int, Ns...>) {
  cudaError_t err = cudaErrorInvalidValue;
  ((n == Ns + 1 ? (err = LaunchN<kW, Ns + 1>(w, x, y, out, in, stream), 0) : 0), ...);
  return err;
}

}  // namespace

cudaError_t LaunchGemv(const void* w, ElemType w_type, const float* x, float* y, int n, int out,
                       int in, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 1 && n <= kGemvMaxTokens && out > 0 && in > 0 && in % kChunk == 0);
  SPECGEN_KERNEL_REQUIRE(w != nullptr && x != nullptr && y != nullptr);
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(x) % 16 == 0);
  const auto seq = std::make_integer_sequence<int, kGemvMaxTokens>{};
  switch (w_type) {
    case ElemType::kBF16:
      return Dispatch<ElemType::kBF16>(n, w, x, y, out, in, stream, seq);
    case ElemType::kF16:
      return Dispatch<ElemType::kF16>(n, w, x, y, out, in, stream, seq);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace specgen::kernels
