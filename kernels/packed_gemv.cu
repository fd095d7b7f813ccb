#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/device_util.cuh"
#include "kernels/packed.cuh"
#include "kernels/packed_blocks.cuh"
#include "kernels/packed_mma.cuh"
#include "kernels/packed_rows.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

using detail::kPackedChunk;

// ---- dequantization and the embedding gather: one thread a 32-element chunk ----------------------

constexpr int kDequantThreads = 256;

__device__ __forceinline__ void StoreChunk(const float (&y)[32], float* f32, uint16_t* bf16) {
  if (f32 != nullptr) {
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      reinterpret_cast<float4*>(f32)[q] = make_float4(y[4 * q], y[4 * q + 1], y[4 * q + 2], y[4 * q + 3]);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t u[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t lo = __bfloat16_as_ushort(__float2bfloat16_rn(y[8 * q + 2 * i]));
        const uint32_t hi = __bfloat16_as_ushort(__float2bfloat16_rn(y[8 * q + 2 * i + 1]));
        u[i] = lo | (hi << 16);
      }
      reinterpret_cast<uint4*>(bf16)[q] = make_uint4(u[0], u[1], u[2], u[3]);
    }
  }
}

template <ElemType kT>
__global__ void __launch_bounds__(kDequantThreads) DequantizeKernel(const uint8_t* __restrict__ w, int64_t row0,
                                                                    int64_t rows, int in, float* f32, uint16_t* bf16) {
  const int chunks = in / kPackedChunk;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * chunks) return;
  const int64_t r = i / chunks;
  const int g = static_cast<int>(i % chunks);
  float y[32];
  detail::DequantChunk<kT>(w + (row0 + r) * PackedRowBytes(kT, in), g, y);
  const int64_t at = r * in + static_cast<int64_t>(g) * kPackedChunk;
  StoreChunk(y, f32 != nullptr ? f32 + at : nullptr, bf16 != nullptr ? bf16 + at : nullptr);
}

template <ElemType kT>
__global__ void __launch_bounds__(kDequantThreads) EmbeddingKernel(const uint8_t* __restrict__ table, int64_t vocab,
                                                                   int dim, const int32_t* __restrict__ ids,
                                                                   int tokens, float* __restrict__ out) {
  const int chunks = dim / kPackedChunk;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(tokens) * chunks) return;
  const int t = static_cast<int>(i / chunks), g = static_cast<int>(i % chunks);
  const int32_t id = ids[t];
  float y[32];
  if (id >= 0 && id < vocab) {
    detail::DequantChunk<kT>(table + id * PackedRowBytes(kT, dim), g, y);
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = NAN;
  }
  StoreChunk(y, out + static_cast<int64_t>(t) * dim + static_cast<int64_t>(g) * kPackedChunk, nullptr);
}

// ---- the small-batch product ------------------------------------------------------------------------

// The matrices of one launch, rows concatenated (kSwiGlu: w[0] gate and w[1] up of the same rows).
struct PackedSegs {
  const uint8_t* w[3];
  float* y[3];
  int rows[3];
  int n;
  int total_rows;  // output rows (kSwiGlu: the gate's)
  int64_t row_bytes;
};

// Where output row `row` of the launch reads its weights (kSwiGlu: the gate's) and writes its outputs.
struct RowTarget {
  const uint8_t* w;
  float* y;
  int ld;
};
template <GemvEpilogue kEpi>
__device__ __forceinline__ RowTarget TargetOf(const PackedSegs& s, int row) {
  // The segment of `row`, walked with selects (a run-time index into s would copy it to local memory).
  const bool past0 = s.n > 1 && row >= s.rows[0] && kEpi != GemvEpilogue::kSwiGlu;
  const int r1 = row - (past0 ? s.rows[0] : 0);
  const bool past1 = past0 && s.n > 2 && r1 >= s.rows[1];
  const int r = r1 - (past1 ? s.rows[1] : 0);
  const uint8_t* w0 = past1 ? s.w[2] : past0 ? s.w[1] : s.w[0];
  return RowTarget{w0 + r * s.row_bytes, (past1 ? s.y[2] : past0 ? s.y[1] : s.y[0]) + r,
                   past1 ? s.rows[2] : past0 ? s.rows[1] : s.rows[0]};
}

// The packed product (kernels/packed_mma.cuh) of up to 16 tokens: persistent blocks of kSliceWarps
// warps, each quantizing x into shared memory once and then taking 16-row tiles of the launch's rows
// round-robin; the epilogues as gemv.cu's GemvKernel writes them.
constexpr int kProductThreads = detail::kSliceWarps * 32;
constexpr int kLaunchTokens = 8 * detail::kMaxTokenTiles;  // tokens of one launch; more go in chunks

template <GemvEpilogue kEpi>
constexpr int MatsOf() {
  return kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
}

template <ElemType kT, int kNT, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kProductThreads) PackedProductKernel(PackedSegs s, const float* __restrict__ x,
                                                                       int in, int n) {
  extern __shared__ __align__(16) uint8_t packed_smem[];
  constexpr int kMats = MatsOf<kEpi>();
  LetDependentsLaunch();
  WaitForPrecedingGrid();  // x
  const int ntiles = (n + 7) / 8;
  float* partial = reinterpret_cast<float*>(packed_smem);
  const detail::SmemActs a = detail::SmemActs::Carve(packed_smem + detail::kPartialBytes<kMats, kNT>, 8 * ntiles, in);
  detail::QuantizeToSmem(a, n, 8 * ntiles, [x, in](int t) { return x + static_cast<int64_t>(t) * in; });
  __syncthreads();
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tiles = (s.total_rows + detail::kTileRows - 1) / detail::kTileRows;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int row[2] = {tile * detail::kTileRows + g, tile * detail::kTileRows + g + 8};
    RowTarget tg[2];
    const uint8_t* rows[kMats][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tg[r] = TargetOf<kEpi>(s, row[r] < s.total_rows ? row[r] : 0);
      rows[0][r] = tg[r].w;
      if constexpr (kMats == 2) rows[1][r] = s.w[1] + (tg[r].w - s.w[0]);
    }
    float out[kMats];
    detail::TileElement el;
    if (detail::TileProducts<kT, kMats, kNT>(rows, a, ntiles, partial, out, &el)) {
      const int r = el.e >> 1, tok = 8 * el.t + 2 * c + (el.e & 1);
      if (row[r] < s.total_rows && tok < n) {
        float* yt = tg[r].y + static_cast<int64_t>(tok) * tg[r].ld;
        const float d0 = out[0];
        if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
          *yt = portable::SiluMul(d0, out[kMats - 1]);  // LaunchSwiGlu's
        } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
          *yt = *yt + d0;  // LaunchAdd's
        } else {
          *yt = d0;
        }
      }
    }
    __syncthreads();  // partial is written again by the next tile
  }
}

template <ElemType kT, int kNT, GemvEpilogue kEpi>
cudaError_t LaunchProduct(const PackedSegs& s, const float* x, int in, int n, cudaStream_t stream) {
  const auto kernel = PackedProductKernel<kT, kNT, kEpi>;
  const size_t smem = detail::kPartialBytes<MatsOf<kEpi>(), kNT> + detail::ActsBytes(8 * kNT, in);
  int resident = 0;
  const cudaError_t e = detail::ResidentProductBlocks(kernel, smem, &resident);
  if (e != cudaSuccess) return e;
  const int tiles = (s.total_rows + detail::kTileRows - 1) / detail::kTileRows;
  const dim3 grid(static_cast<unsigned>(std::min(tiles, resident))), block(kProductThreads);
  return LaunchDecodeKernel(kernel, grid, block, smem, stream, ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

// The packed product of up to kRowMaxTokens tokens a half-warp a row (kernels/packed_rows.cuh):
// persistent blocks of kRowWarps warps quantize x into shared memory once, then take groups of
// kRowGroup rows round-robin; lane t of a row's half-warp writes token t's result with the epilogues
// of PackedProductKernel.
constexpr int kRowThreads = detail::kRowWarps * 32;
constexpr int kRowGroup = 2 * detail::kRowWarps;

template <ElemType kT, int kM, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kRowThreads) PackedRowsKernel(PackedSegs s, const float* __restrict__ x, int in,
                                                                int n) {
  extern __shared__ __align__(16) uint8_t rows_smem[];
  constexpr int kMats = MatsOf<kEpi>();
  LetDependentsLaunch();
  WaitForPrecedingGrid();  // x
  const detail::SmemActs a = detail::SmemActs::Carve(rows_smem, n, in);
  const int half = threadIdx.x >> 4, lane16 = threadIdx.x & 15;
  const int groups = (s.total_rows + kRowGroup - 1) / kRowGroup;
  if (blockIdx.x * kRowGroup + half < s.total_rows) {
    const RowTarget first = TargetOf<kEpi>(s, blockIdx.x * kRowGroup + half);
    const int nb = in / detail::kProductBlock;
    detail::PrefetchSlice(first.w, nb, s.row_bytes);
    if constexpr (kMats == 2) detail::PrefetchSlice(s.w[1] + (first.w - s.w[0]), nb, s.row_bytes);
  }
  detail::QuantizeToSmem(a, n, n, [x, in](int t) { return x + static_cast<int64_t>(t) * in; });
  __syncthreads();
  for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int row = grp * kRowGroup + half;
    const RowTarget tg = TargetOf<kEpi>(s, row < s.total_rows ? row : 0);
    const uint8_t* rows[kMats];
    rows[0] = tg.w;
    if constexpr (kMats == 2) rows[1] = s.w[1] + (tg.w - s.w[0]);
    float out[kMats][kM];
    detail::RowProducts<kT, kMats, kM>(rows, a, n, out);
#pragma unroll
    for (int t = 0; t < kM; ++t) {
      if (t != lane16 || t >= n || row >= s.total_rows) continue;
      float* yt = tg.y + static_cast<int64_t>(t) * tg.ld;
      if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
        *yt = portable::SiluMul(out[0][t], out[kMats - 1][t]);  // LaunchSwiGlu's
      } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
        *yt = *yt + out[0][t];  // LaunchAdd's
      } else {
        *yt = out[0][t];
      }
    }
  }
}

template <ElemType kT, int kM, GemvEpilogue kEpi>
cudaError_t LaunchRows(const PackedSegs& s, const float* x, int in, int n, cudaStream_t stream) {
  const auto kernel = PackedRowsKernel<kT, kM, kEpi>;
  const size_t smem = detail::ActsBytes(n, in);
  int resident = 0;
  const cudaError_t e = detail::ResidentBlocks(kernel, kRowThreads, smem, &resident);
  if (e != cudaSuccess) return e;
  const int groups = (s.total_rows + kRowGroup - 1) / kRowGroup;
  const dim3 grid(static_cast<unsigned>(std::min(groups, resident))), block(kRowThreads);
  return LaunchDecodeKernel(kernel, grid, block, smem, stream, ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

template <ElemType kT, GemvEpilogue kEpi>
cudaError_t LaunchEpi(const PackedSegs& s, const float* x, int in, int n, bool rows, cudaStream_t stream) {
  if (rows) {
    return detail::WithRowTokens(n, [&](auto m) { return LaunchRows<kT, decltype(m)::value, kEpi>(s, x, in, n, stream); });
  }
  return n <= 8 ? LaunchProduct<kT, 1, kEpi>(s, x, in, n, stream) : LaunchProduct<kT, 2, kEpi>(s, x, in, n, stream);
}

std::atomic<PackedLayout> default_layout{PackedLayout::kAuto};

}  // namespace

void SetPackedLayout(PackedLayout layout) { default_layout.store(layout, std::memory_order_relaxed); }
PackedLayout DefaultPackedLayout() { return default_layout.load(std::memory_order_relaxed); }

cudaError_t LaunchDequantizePacked(const void* w, ElemType type, int64_t row0, int64_t rows, int in,
                                   float* dst_f32, uint16_t* dst_bf16, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(IsPacked(type) && w != nullptr && row0 >= 0 && rows >= 0 && in > 0);
  SPECGEN_KERNEL_REQUIRE(in % BlockElems(type) == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0);
  SPECGEN_KERNEL_REQUIRE((dst_f32 == nullptr) != (dst_bf16 == nullptr));
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(dst_f32 != nullptr ? static_cast<void*>(dst_f32)
                                                                         : static_cast<void*>(dst_bf16)) %
                             16 ==
                         0);
  if (rows == 0) return cudaSuccess;
  const int64_t threads = rows * (in / kPackedChunk);
  const dim3 grid(static_cast<unsigned>((threads + kDequantThreads - 1) / kDequantThreads));
  return detail::WithPackedType(type, [&](auto t) {
    DequantizeKernel<decltype(t)::value><<<grid, kDequantThreads, 0, stream>>>(static_cast<const uint8_t*>(w), row0,
                                                                               rows, in, dst_f32, dst_bf16);
    return cudaGetLastError();
  });
}

cudaError_t LaunchPackedEmbedding(const void* table, ElemType type, int64_t vocab, int dim, const int32_t* ids,
                                  int tokens, float* out, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(IsPacked(type) && vocab > 0 && dim > 0 && dim % BlockElems(type) == 0 && tokens >= 0);
  if (tokens == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(table != nullptr && ids != nullptr && out != nullptr);
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(table) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0);
  const int64_t threads = static_cast<int64_t>(tokens) * (dim / kPackedChunk);
  const dim3 grid(static_cast<unsigned>((threads + kDequantThreads - 1) / kDequantThreads));
  return detail::WithPackedType(type, [&](auto t) {
    EmbeddingKernel<decltype(t)::value><<<grid, kDequantThreads, 0, stream>>>(static_cast<const uint8_t*>(table),
                                                                              vocab, dim, ids, tokens, out);
    return cudaGetLastError();
  });
}

cudaError_t LaunchPackedGemvSegments(const GemvSegment* segments, int n_segments, ElemType type, const float* x,
                                     int n, int in, GemvEpilogue epilogue, cudaStream_t stream, PackedLayout layout) {
  SPECGEN_KERNEL_REQUIRE(IsPacked(type) && n >= 1 && n <= kPackedProductMaxTokens && in > 0 &&
                         in % BlockElems(type) == 0);
  SPECGEN_KERNEL_REQUIRE(segments != nullptr && n_segments >= 1 && n_segments <= 3 && x != nullptr);
  SPECGEN_KERNEL_REQUIRE(epilogue != GemvEpilogue::kSwiGlu || (n_segments == 2 && segments[0].rows == segments[1].rows));
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0);
  PackedSegs s{};
  s.n = n_segments;
  s.row_bytes = PackedRowBytes(type, in);
  for (int i = 0; i < n_segments; ++i) {
    const GemvSegment& g = segments[i];
    SPECGEN_KERNEL_REQUIRE(g.w != nullptr && g.y != nullptr && g.rows > 0);
    SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(g.w) % 16 == 0);
    s.w[i] = static_cast<const uint8_t*>(g.w);
    s.y[i] = g.y;
    s.rows[i] = g.rows;
    if (epilogue != GemvEpilogue::kSwiGlu || i == 0) s.total_rows += g.rows;
  }
  // Up to kLaunchTokens tokens a launch; more in chunks (each token's bits are its own). Both layouts
  // compute the definition: rows where tiles would be latency-bound, tiles where tensor cores pay.
  static_assert(kPackedRowsMaxTokens <= kLaunchTokens && kLaunchTokens <= detail::kRowMaxTokens);
  const PackedLayout l = layout == PackedLayout::kAuto ? DefaultPackedLayout() : layout;
  for (int t0 = 0; t0 < n; t0 += kLaunchTokens) {
    const int m = std::min(kLaunchTokens, n - t0);
    const bool rows = l == PackedLayout::kRows || (l == PackedLayout::kAuto && m <= kPackedRowsMaxTokens);
    PackedSegs c = s;
    for (int i = 0; i < n_segments; ++i) c.y[i] = s.y[i] + static_cast<int64_t>(t0) * s.rows[i];
    const float* xc = x + static_cast<int64_t>(t0) * in;
    const cudaError_t e = detail::WithPackedType(type, [&](auto t) {
      constexpr ElemType kT = decltype(t)::value;
      switch (epilogue) {
        case GemvEpilogue::kStore: return LaunchEpi<kT, GemvEpilogue::kStore>(c, xc, in, m, rows, stream);
        case GemvEpilogue::kAddTo: return LaunchEpi<kT, GemvEpilogue::kAddTo>(c, xc, in, m, rows, stream);
        case GemvEpilogue::kSwiGlu: return LaunchEpi<kT, GemvEpilogue::kSwiGlu>(c, xc, in, m, rows, stream);
      }
      return cudaErrorInvalidValue;
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace specgen::kernels
