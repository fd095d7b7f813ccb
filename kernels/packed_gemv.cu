#include <type_traits>

#include "kernels/device_util.cuh"
#include "kernels/packed.cuh"
#include "kernels/packed_blocks.cuh"
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

constexpr int kWarps = 4;  // warps a block, one output row a warp

// The matrices of one launch, rows concatenated (kSwiGlu: w[0] gate and w[1] up of the same rows).
struct PackedSegs {
  const uint8_t* w[3];
  float* y[3];
  int rows[3];
  int n;
  int total_rows;  // output rows (kSwiGlu: the gate's)
  int64_t row_bytes;
};

// Warp = one output row (kSwiGlu: its gate and up rows), every token up to n <= N; the products in
// PackedRowDots' order, the epilogues as gemv.cu's GemvKernel writes them.
template <ElemType kT, int N, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32) PackedGemvKernel(PackedSegs s, const float* __restrict__ x, int in,
                                                                int n) {
  constexpr int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  LetDependentsLaunch();
  if (row >= s.total_rows) {
    WaitForPrecedingGrid();
    return;
  }
  // The segment of `row`, walked with selects (a run-time index into s would copy it to local memory).
  const bool past0 = s.n > 1 && row >= s.rows[0] && kEpi != GemvEpilogue::kSwiGlu;
  const int r1 = row - (past0 ? s.rows[0] : 0);
  const bool past1 = past0 && s.n > 2 && r1 >= s.rows[1];
  const int r = r1 - (past1 ? s.rows[1] : 0);
  const uint8_t* w0 = past1 ? s.w[2] : past0 ? s.w[1] : s.w[0];
  float* y = (past1 ? s.y[2] : past0 ? s.y[1] : s.y[0]) + r;
  const int ld = past1 ? s.rows[2] : past0 ? s.rows[1] : s.rows[0];
  const uint8_t* rows[kPer];
  rows[0] = w0 + r * s.row_bytes;
  if constexpr (kPer == 2) rows[1] = s.w[1] + r * s.row_bytes;
  float acc[kPer][N];
  detail::PackedRowDots<kT, kPer, N>(rows, in, n, detail::GlobalX4{x, in}, [] { WaitForPrecedingGrid(); }, acc);
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (t >= n) break;
    float* yt = y + static_cast<int64_t>(t) * ld;
    const float d0 = acc[0][t];
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      *yt = d0 / (1.f + expf(-d0)) * acc[kPer - 1][t];  // LaunchSwiGlu's
    } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
      *yt = *yt + d0;  // LaunchAdd's
    } else {
      *yt = d0;
    }
  }
}

template <ElemType kT, GemvEpilogue kEpi>
cudaError_t LaunchEpi(const PackedSegs& s, const float* x, int in, int n, cudaStream_t stream) {
  const dim3 grid((s.total_rows + kWarps - 1) / kWarps), block(kWarps * 32);
  const bool pdl = ProgrammaticLaunchOnCurrentDevice();
  // Registers sized to the batch: one kernel for 1 token (decode), 4 and 16 (verification).
  if (n <= 1) return LaunchDecodeKernel(PackedGemvKernel<kT, 1, kEpi>, grid, block, 0, stream, pdl, s, x, in, n);
  if (n <= 4) return LaunchDecodeKernel(PackedGemvKernel<kT, 4, kEpi>, grid, block, 0, stream, pdl, s, x, in, n);
  return LaunchDecodeKernel(PackedGemvKernel<kT, kGemvMaxTokens, kEpi>, grid, block, 0, stream, pdl, s, x, in, n);
}

}  // namespace

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
                                     int n, int in, GemvEpilogue epilogue, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(IsPacked(type) && n >= 1 && n <= kGemvMaxTokens && in > 0 && in % BlockElems(type) == 0);
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
  return detail::WithPackedType(type, [&](auto t) {
    constexpr ElemType kT = decltype(t)::value;
    switch (epilogue) {
      case GemvEpilogue::kStore: return LaunchEpi<kT, GemvEpilogue::kStore>(s, x, in, n, stream);
      case GemvEpilogue::kAddTo: return LaunchEpi<kT, GemvEpilogue::kAddTo>(s, x, in, n, stream);
      case GemvEpilogue::kSwiGlu: return LaunchEpi<kT, GemvEpilogue::kSwiGlu>(s, x, in, n, stream);
    }
    return cudaErrorInvalidValue;
  });
}

}  // namespace specgen::kernels
