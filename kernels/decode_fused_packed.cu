// LaunchFusedGemv (kernels/decode_fused.cuh) for weights kept packed in a GGUF block type: the input
// staged (and RMS-normed) as the 16-bit kernel stages it, then quantized and multiplied as the packed
// product's one definition (kernels/packed_mma.cuh), the product of LaunchPackedGemvSegments, with the
// same epilogues: so a packed draft's graph gives the bits of the backend's RmsNorm + packed GEMV. One
// token: a half-warp a row (kernels/packed_rows.cuh), as LaunchPackedGemvSegments at n = 1.
#include <algorithm>

#include "kernels/decode_fused.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/packed_blocks.cuh"
#include "kernels/packed_mma.cuh"
#include "kernels/packed_rows.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = 16;                   // warps a block
constexpr int kGroupRows = 2 * kWarps;  // rows a block takes at once: a half-warp each

// Output row `row` of a segment set: its packed weight rows (kSwiGlu: gate and up) and where its
// result goes, walking the segments with constant indices (as detail::RowOf).
template <GemvEpilogue kEpi>
struct PackedRowOf {
  static constexpr int kRows = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
  const uint8_t* w[kRows];
  float* y;
  __device__ __forceinline__ PackedRowOf(const detail::Segments& segs, int row, int64_t row_bytes) {
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      w[0] = static_cast<const uint8_t*>(segs.s[0].w) + row * row_bytes;
      w[1] = static_cast<const uint8_t*>(segs.s[1].w) + row * row_bytes;
      y = segs.s[0].y + row;
    } else {
      int r = row;
      const void* ws = segs.s[0].w;
      float* ys = segs.s[0].y;
      bool walking = true;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        walking = walking && s + 1 < segs.n && r >= segs.s[s].rows;
        if (walking) {
          r -= segs.s[s].rows;
          ws = segs.s[s + 1].w;
          ys = segs.s[s + 1].y;
        }
      }
      w[0] = static_cast<const uint8_t*>(ws) + r * row_bytes;
      y = ys + r;
    }
  }
};

// The fused kernel's shared memory: the staged (normed) input, then the input quantized for the packed
// product (one token).
size_t FusedSmemBytes(int in) {
  return static_cast<size_t>(detail::StagedFloats(in)) * sizeof(float) + detail::ActsBytes(1, in);
}

template <ElemType kT, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32)
    PackedFusedGemvKernel(const float* __restrict__ x, const void* __restrict__ norm_w, ElemType norm_type,
                          float eps, detail::Segments segs, int in, int64_t row_bytes) {
  constexpr int kRows = PackedRowOf<kEpi>::kRows;
  extern __shared__ float4 packed_xs4[];
  float* xs = reinterpret_cast<float*>(packed_xs4);
  const detail::SmemActs a = detail::SmemActs::Carve(xs + detail::StagedFloats(in), 1, in);
  __shared__ float scratch[32];
  LetDependentsLaunch();
  WaitForPrecedingGrid();  // x (and kAddTo's residual) come from the previous kernel
  detail::StageInput(x, norm_w, norm_type, eps, in, xs, scratch);
  // The normed input quantized as LaunchPackedGemvSegments quantizes its x (four consecutive inputs
  // from a multiple of 4 are four consecutive staged floats).
  detail::QuantizeToSmemWith(a, 1, 1, [xs](int, int k) { return *reinterpret_cast<const float4*>(xs + detail::StagedIndex(k)); });
  __syncthreads();
  const int half = threadIdx.x >> 4, lane16 = threadIdx.x & 15;
  const int groups = (segs.total_rows + kGroupRows - 1) / kGroupRows;
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int row = grp * kGroupRows + half;
    const PackedRowOf<kEpi> ro(segs, row < segs.total_rows ? row : 0, row_bytes);
    float acc[kRows][1];
    detail::RowProducts<kT, kRows, 1>(ro.w, a, 1, acc);
    if (lane16 != 0 || row >= segs.total_rows) continue;
    const float d0 = acc[0][0];
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      *ro.y = portable::SiluMul(d0, acc[kRows - 1][0]);  // LaunchSwiGlu's
    } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
      *ro.y = *ro.y + d0;  // LaunchAdd's
    } else {
      *ro.y = d0;
    }
  }
}

template <ElemType kT, GemvEpilogue kEpi>
cudaError_t Launch(const float* x, const void* norm_w, ElemType norm_type, float eps, const detail::Segments& segs,
                   int in, unsigned blocks, cudaStream_t stream, bool programmatic) {
  const auto kernel = PackedFusedGemvKernel<kT, kEpi>;
  const size_t smem = FusedSmemBytes(in);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  return LaunchDecodeKernel(kernel, dim3(blocks), dim3(kWarps * 32), smem, stream, programmatic, x, norm_w, norm_type,
                            eps, segs, in, PackedRowBytes(kT, in));
}

}  // namespace

cudaError_t LaunchPackedFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                                  const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                                  GemvEpilogue epilogue, int max_blocks, cudaStream_t stream, bool programmatic,
                                  int rows_per_warp) {
  SPECGEN_KERNEL_REQUIRE(IsPacked(w_type) && in % BlockElems(w_type) == 0);
  SPECGEN_KERNEL_REQUIRE(in * sizeof(float) <= 48 * 1024);  // the staged input in static shared memory
  detail::Segments segs;
  const cudaError_t checked = detail::MakeSegments(x, segments, n_segments, in, epilogue, max_blocks, &segs);
  if (checked != cudaSuccess) return checked;
  (void)rows_per_warp;  // the packed product takes a half-warp a row
  const int groups = (segs.total_rows + kGroupRows - 1) / kGroupRows;
  const unsigned blocks = static_cast<unsigned>(std::max(1, std::min(max_blocks, groups)));
  return detail::WithPackedType(w_type, [&](auto t) {
    constexpr ElemType kT = decltype(t)::value;
    switch (epilogue) {
      case GemvEpilogue::kStore:
        return Launch<kT, GemvEpilogue::kStore>(x, norm_w, norm_type, eps, segs, in, blocks, stream, programmatic);
      case GemvEpilogue::kAddTo:
        return Launch<kT, GemvEpilogue::kAddTo>(x, norm_w, norm_type, eps, segs, in, blocks, stream, programmatic);
      case GemvEpilogue::kSwiGlu:
        return Launch<kT, GemvEpilogue::kSwiGlu>(x, norm_w, norm_type, eps, segs, in, blocks, stream, programmatic);
    }
    return cudaErrorInvalidValue;
  });
}

}  // namespace specgen::kernels
