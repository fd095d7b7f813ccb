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

constexpr int kWarps = 4;  // warps a block of PackedGemvKernel, one output row a warp

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

// Output rows row[0 .. kM) (kSwiGlu: kM = 1, its gate and up rows) for every token up to n <= N, on the
// calling warp: each row's products in PackedRowDots' order with x read through load_x4 (rows of one
// call share each x read; a row's arithmetic does not depend on its partners), the epilogues as gemv.cu's
// GemvKernel writes them. Only rows below s.total_rows are written; a row past it repeats row[0].
template <ElemType kT, int N, GemvEpilogue kEpi, int kM, typename LoadX4, typename AfterFirstLoads>
__device__ __forceinline__ void PackedRows(const PackedSegs& s, const int (&row)[kM], int in, int n, LoadX4 load_x4,
                                           AfterFirstLoads after_first_loads) {
  static_assert(kM == 1 || kEpi != GemvEpilogue::kSwiGlu);
  constexpr int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : kM;
  RowTarget tg[kM];
  const uint8_t* rows[kPer];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    tg[m] = TargetOf<kEpi>(s, row[m] < s.total_rows ? row[m] : row[0]);
    rows[m] = tg[m].w;
  }
  if constexpr (kEpi == GemvEpilogue::kSwiGlu) rows[1] = s.w[1] + (tg[0].w - s.w[0]);
  float acc[kPer][N];
  detail::PackedRowDots<kT, kPer, N>(rows, in, n, load_x4, after_first_loads, acc);
  if ((threadIdx.x & 31) != 0) return;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if (row[m] >= s.total_rows) continue;
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (t >= n) break;
      float* yt = tg[m].y + static_cast<int64_t>(t) * tg[m].ld;
      const float d0 = acc[m][t];
      if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
        *yt = d0 / (1.f + expf(-d0)) * acc[kPer - 1][t];  // LaunchSwiGlu's
      } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
        *yt = *yt + d0;  // LaunchAdd's
      } else {
        *yt = d0;
      }
    }
  }
}

// Warp = one output row, x read from global memory: the fallback when x does not fit in shared memory.
template <ElemType kT, int N, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kWarps * 32) PackedGemvKernel(PackedSegs s, const float* __restrict__ x, int in,
                                                                int n) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  LetDependentsLaunch();
  if (row >= s.total_rows) {
    WaitForPrecedingGrid();
    return;
  }
  const int one[1] = {row};
  PackedRows<kT, N, kEpi>(s, one, in, n, detail::GlobalX4{x, in}, [] { WaitForPrecedingGrid(); });
}

// ---- x staged once a block (detail::StageX4): the arithmetic is PackedRowDots' as in PackedGemvKernel.

using detail::kStagedWarps;
using detail::PackedStagedX4;
using detail::StagedStride4;
using detail::StageX4;
constexpr size_t kStagedMaxBytes = 128 * 1024;     // 16 tokens of 2048 inputs


template <ElemType kT, int N, GemvEpilogue kEpi>
__global__ void __launch_bounds__(kStagedWarps<N> * 32, 1)
    PackedGemvStagedKernel(PackedSegs s, const float* __restrict__ x, int in, int n) {
  extern __shared__ float4 gemv_packed_xs4[];
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  const int stride4 = StagedStride4(in);
  StageX4(gemv_packed_xs4, in, n, [x, in](int t) { return x + static_cast<int64_t>(t) * in; });
  __syncthreads();
  const PackedStagedX4 xs{gemv_packed_xs4, stride4};
  // Several tokens: two rows a warp at once, each x read feeding both (the 16-token product is bound by
  // the shared-memory reads). kSwiGlu's gate and up rows already share them.
  constexpr int kM = N > 1 && kEpi != GemvEpilogue::kSwiGlu ? 2 : 1;
  const int stride = gridDim.x * kStagedWarps<N>;
  for (int row = blockIdx.x * kStagedWarps<N> + (threadIdx.x >> 5); row < s.total_rows; row += kM * stride) {
    int rows[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) rows[m] = row + m * stride;
    PackedRows<kT, N, kEpi>(s, rows, in, n, xs, [] {});
  }
}

template <int kWarpsABlock, typename Kernel>
cudaError_t LaunchStaged(Kernel kernel, const PackedSegs& s, const float* x, int in, int n, size_t smem,
                         cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarpsABlock * 32, smem);
  if (e != cudaSuccess) return e;
  const int64_t needed = (s.total_rows + kWarpsABlock - 1) / kWarpsABlock;
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  const dim3 grid(static_cast<unsigned>(needed < resident ? needed : resident)), block(kWarpsABlock * 32);
  return LaunchDecodeKernel(kernel, grid, block, smem, stream, ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

template <ElemType kT, GemvEpilogue kEpi>
cudaError_t LaunchEpi(const PackedSegs& s, const float* x, int in, int n, cudaStream_t stream) {
  // Registers sized to the batch: one kernel for 1 token (decode), 4 and 16 (verification).
  const size_t staged = static_cast<size_t>(n) * StagedStride4(in) * sizeof(float4);
  if (staged <= kStagedMaxBytes) {
    if (n <= 1) return LaunchStaged<kStagedWarps<1>>(PackedGemvStagedKernel<kT, 1, kEpi>, s, x, in, n, staged, stream);
    if (n <= 4) return LaunchStaged<kStagedWarps<4>>(PackedGemvStagedKernel<kT, 4, kEpi>, s, x, in, n, staged, stream);
    return LaunchStaged<kStagedWarps<kGemvMaxTokens>>(PackedGemvStagedKernel<kT, kGemvMaxTokens, kEpi>, s, x, in, n,
                                                      staged, stream);
  }
  const dim3 grid((s.total_rows + kWarps - 1) / kWarps), block(kWarps * 32);
  const bool pdl = ProgrammaticLaunchOnCurrentDevice();
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
