// LaunchFusedGemv (kernels/decode_fused.cuh) for weights kept packed in a GGUF block type: the input
// staged (and RMS-normed) as the 16-bit kernel stages it, then quantized and multiplied as the packed
// product's one definition (kernels/packed_mma.cuh), the product of LaunchPackedGemvSegments, with the
// same epilogues: so a packed draft's graph gives the bits of the backend's RmsNorm + packed GEMV.
#include <algorithm>

#include "kernels/decode_fused.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/packed_blocks.cuh"
#include "kernels/packed_mma.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = detail::kSliceWarps;  // warps a block: the packed product's slices of one tile

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

// The fused kernel's shared memory: the staged (normed) input, then the slices' partial sums of the
// block's two tiles, then the input quantized for the packed product (one tile of 8 tokens, token 0 real).
constexpr int kGroups = kWarps / detail::kSliceWarps;
template <int kRows>
size_t FusedSmemBytes(int in) {
  return static_cast<size_t>(detail::StagedFloats(in)) * sizeof(float) + kGroups * detail::kPartialBytes<kRows, 1> +
         detail::ActsBytes(8, in);
}

template <ElemType kT, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32)
    PackedFusedGemvKernel(const float* __restrict__ x, const void* __restrict__ norm_w, ElemType norm_type,
                          float eps, detail::Segments segs, int in, int64_t row_bytes) {
  constexpr int kRows = PackedRowOf<kEpi>::kRows;
  extern __shared__ float4 packed_xs4[];
  float* xs = reinterpret_cast<float*>(packed_xs4);
  uint8_t* after = reinterpret_cast<uint8_t*>(xs + detail::StagedFloats(in));
  float* partial = reinterpret_cast<float*>(after) + (threadIdx.x >> 5) / detail::kSliceWarps *
                                                         (detail::kPartialBytes<kRows, 1> / sizeof(float));
  const detail::SmemActs a = detail::SmemActs::Carve(after + kGroups * detail::kPartialBytes<kRows, 1>, 8, in);
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, group = (threadIdx.x >> 5) / detail::kSliceWarps;
  LetDependentsLaunch();
  WaitForPrecedingGrid();  // x (and kAddTo's residual) come from the previous kernel
  detail::StageInput(x, norm_w, norm_type, eps, in, xs, scratch);
  // The normed input quantized as LaunchPackedGemvSegments quantizes its x (four consecutive inputs
  // from a multiple of 4 are four consecutive staged floats).
  detail::QuantizeToSmemWith(a, 1, 8, [xs](int, int k) { return *reinterpret_cast<const float4*>(xs + detail::StagedIndex(k)); });
  __syncthreads();
  const int g = lane >> 2, c = lane & 3;
  const int tiles = (segs.total_rows + detail::kTileRows - 1) / detail::kTileRows;
  // Each group takes a tile of every pair; both groups run the same number of rounds (the barriers).
  for (int base = blockIdx.x * kGroups; base < tiles; base += gridDim.x * kGroups) {
    const int tile = base + group;
    const int row[2] = {tile * detail::kTileRows + g, tile * detail::kTileRows + g + 8};
    const uint8_t* rows[kRows][2];
    float* y[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const PackedRowOf<kEpi> ro(segs, row[r] < segs.total_rows ? row[r] : 0, row_bytes);
#pragma unroll
      for (int m = 0; m < kRows; ++m) rows[m][r] = ro.w[m];
      y[r] = ro.y;
    }
    float acc[kRows];
    detail::TileElement el;
    // Token 0: elements 0 (row g) and 2 (row g + 8) of lane c = 0.
    if (detail::TileProducts<kT, kRows, 1>(rows, a, 1, partial, acc, &el) && (el.e & 1) == 0 && c == 0) {
      const int r = el.e >> 1;
      if (row[r] < segs.total_rows) {
        const float d0 = acc[0];
        if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
          *y[r] = portable::SiluMul(d0, acc[kRows - 1]);  // LaunchSwiGlu's
        } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
          *y[r] = *y[r] + d0;  // LaunchAdd's
        } else {
          *y[r] = d0;
        }
      }
    }
    __syncthreads();
  }
}

template <ElemType kT, GemvEpilogue kEpi>
cudaError_t Launch(const float* x, const void* norm_w, ElemType norm_type, float eps, const detail::Segments& segs,
                   int in, unsigned blocks, cudaStream_t stream, bool programmatic) {
  const auto kernel = PackedFusedGemvKernel<kT, kEpi>;
  const size_t smem = FusedSmemBytes<PackedRowOf<kEpi>::kRows>(in);
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
  (void)rows_per_warp;  // the packed product takes 16-row tiles, two a block at a time
  const int tiles = (segs.total_rows + detail::kTileRows - 1) / detail::kTileRows;
  const unsigned blocks = static_cast<unsigned>(std::max(1, std::min(max_blocks, (tiles + kGroups - 1) / kGroups)));
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
