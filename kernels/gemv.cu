#include "kernels/device_util.cuh"
#include "kernels/gemv.cuh"
#include "kernels/type_dispatch.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/mma_tile.cuh"
#include "kernels/packed.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = 4;      // warps per block
constexpr int kChunk = 8;      // weights per 16-byte load
constexpr int kWarpK = 32 * kChunk;  // k covered by one warp-wide step


// The matrices of one launch (rows concatenated; kSwiGlu: w[0] gate and w[1] up of the same rows) and
// where each one's rows go: y[seg][t * rows[seg] + r] for token t.
struct Segs {
  const uint16_t* w[3];
  float* y[3];
  int rows[3];
  int n;
  int total_rows;  // output rows (kSwiGlu: the gate's)
};

// Where output row `row` of a launch lives: its matrix (w: the first row's weights; kSwiGlu: the gate's,
// the up row being s.w[1] at the same index), the row's index in it, its output column and the
// output's row stride (that matrix's rows). The segment is walked with selects: a run-time index into
// s would copy it to local memory.
struct SegRow {
  const uint16_t* w;
  int row;
  float* y;
  int ld;
};
__device__ __forceinline__ SegRow FindSegRow(const Segs& s, int row) {
  const bool past0 = s.n > 1 && row >= s.rows[0];
  row -= past0 ? s.rows[0] : 0;
  const bool past1 = past0 && s.n > 2 && row >= s.rows[1];
  row -= past1 ? s.rows[1] : 0;
  return {past1 ? s.w[2] : past0 ? s.w[1] : s.w[0], row, (past1 ? s.y[2] : past0 ? s.y[1] : s.y[0]) + row,
          past1 ? s.rows[2] : past0 ? s.rows[1] : s.rows[0]};
}

#include "kernels/gemv_mma.cuh"

// Warp owns R consecutive output rows (kSwiGlu: R gate/up row pairs); each lane keeps U chunks per weight
// row in flight. kExact kernels take exactly n = N tokens; the others n <= N, computing all N columns,
// the ones past n on x's last row and never stored (a run-time token count in the FMA loop keeps its x
// loads from being issued ahead; docs/experiments.md). Every weight row is
// reduced in the one order described in gemv.cuh, whatever the epilogue, the segments, N or n.
// kBW warps a block. kXs: x's n rows are staged once a block into shared memory (detail::StagedIndex
// layout per row, kBW * 32 threads copying) after the wait, and read from there: the same values in
// the same order, so the same bits.
template <ElemType kW, int N, int R, int U, GemvEpilogue kEpi, bool kExact, bool kPipe, int kBW = kWarps,
          bool kXs = false>
__global__ void __launch_bounds__(kBW * 32) GemvKernel(Segs s, const float* __restrict__ x, int in, int n) {
  constexpr int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;  // weight rows an output row reads
  constexpr int kWR = R * kPer;
  const int nn = kExact ? N : n;  // tokens stored
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * kBW + (threadIdx.x >> 5)) * R;
  if (!kXs && row0 >= s.total_rows) return;  // (kXs: every warp stages x; rows past the end store nothing)
  const uint16_t* wrow[kWR];
  float* yrow[R];
  int ld[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const SegRow sr = FindSegRow(s, min(row0 + r, s.total_rows - 1));  // clamp: result discarded below
    yrow[r] = sr.y;
    ld[r] = sr.ld;
    wrow[r * kPer] = sr.w + static_cast<int64_t>(sr.row) * in;
    if constexpr (kPer == 2) wrow[r * kPer + 1] = s.w[1] + static_cast<int64_t>(sr.row) * in;
  }
  float acc[kWR][N];
#pragma unroll
  for (int r = 0; r < kWR; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) acc[r][t] = 0.f;

  // The warp's first U chunks of weights are requested before waiting for the previous kernel (PDL:
  // they overlap its tail, and the launch's own start), x is read after; the order of the sums is
  // unchanged. Launched plainly, these small GEMVs stay well below the HBM rate: the latency of their
  // first loads is a large share of their time.
  LetDependentsLaunch();
  const int kb0 = lane * kChunk;
  uint4 wv[U][kWR];
  const auto load = [&](int kb) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kb + u * kWarpK;
#pragma unroll
      for (int r = 0; r < kWR; ++r) {
        wv[u][r] = k < in ? detail::LoadWeights16(wrow[r] + k) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  load(kb0);
  WaitForPrecedingGrid();
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  const int xs_stride = detail::StagedFloats(in);
  if constexpr (kXs) {
    for (int t = 0; t < nn; ++t) {
      for (int k = threadIdx.x * 4; k < in; k += kBW * 32 * 4) {
        *reinterpret_cast<float4*>(xs + t * xs_stride + detail::StagedIndex(k)) =
            __ldg(reinterpret_cast<const float4*>(x + static_cast<int64_t>(t) * in + k));
      }
    }
    __syncthreads();
  }
  for (int kb = kb0; kb < in; kb += kWarpK * U) {
    if (!kPipe && kb != kb0) load(kb);
    uint4 cur[U][kWR];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < kWR; ++r) cur[u][r] = wv[u][r];
    // kPipe: the chunks multiplied now are those loaded an iteration ago; the next ones are requested
    // before these FMAs, so a lane keeps 2U chunks a row in flight.
    if (kPipe && kb + kWarpK * U < in) load(kb + kWarpK * U);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = kb + u * kWarpK;
      if (k >= in) break;  // zero chunks would still add +0.f; skip so order stays exactly k-ordered
      float wf[kWR][8];
#pragma unroll
      for (int r = 0; r < kWR; ++r) detail::Unpack8<kW>(cur[u][r], wf[r]);
      if constexpr (kXs) {
        detail::FmaChunk8Loaded<kWR, N>(
            wf, N, [&](int t, float(&xv)[8]) { detail::LoadStaged8(xs + min(t, nn - 1) * xs_stride, k, lane, xv); },
            acc);
      } else {
        detail::FmaChunk8<kWR, N>(wf, N, [&](int t) { return x + static_cast<int64_t>(min(t, nn - 1)) * in + k; },
                                  acc);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (t >= nn) break;
      const float d0 = detail::WarpSum(acc[r * kPer][t]);
      const float d1 = kPer == 2 ? detail::WarpSum(acc[r * kPer + kPer - 1][t]) : 0.f;
      if (lane == 0 && row0 + r < s.total_rows) {
        float* y = yrow[r] + static_cast<int64_t>(t) * ld[r];
        if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
          *y = portable::SiluMul(d0, d1);  // LaunchSwiGlu's
        } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
          *y = *y + d0;  // LaunchAdd's
        } else {
          *y = d0;
        }
      }
    }
}

// x's rows staged in shared memory (GemvKernel's kXs) by blocks of kXsWarps warps (128 blocks for 2048
// rows at 2 a warp: one a multiprocessor beside its 123 KB of x at 5 x 6144 inputs), where they fit in
// kXsMaxBytes; *taken says whether it launched.
constexpr int kXsWarps = 8;
constexpr size_t kXsMaxBytes = 200 * 1024;
template <ElemType kW, int N, int R, int U, GemvEpilogue kEpi, bool kExact, bool kPipe>
cudaError_t LaunchXs(const Segs& s, const float* x, int in, int n, cudaStream_t stream, bool* taken) {
  const size_t bytes = static_cast<size_t>(kExact ? N : n) * detail::StagedFloats(in) * sizeof(float);
  *taken = false;
  if (bytes > kXsMaxBytes) return cudaSuccess;
  constexpr auto kernel = GemvKernel<kW, N, R, U, kEpi, kExact, kPipe, kXsWarps, true>;
  static const cudaError_t configured = [] {
    detail::PreferSharedCarveout(kernel);
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kXsMaxBytes));
  }();
  if (configured != cudaSuccess) return configured;
  *taken = true;
  const int rows_per_block = kXsWarps * R;
  const unsigned blocks = static_cast<unsigned>((s.total_rows + rows_per_block - 1) / rows_per_block);
  return LaunchDecodeKernel(kernel, dim3(blocks), dim3(kXsWarps * 32), bytes, stream,
                            ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

// kPipe: loads an iteration ahead (the default where that wins: see LaunchR).
template <ElemType kW, int N, int R, int U, GemvEpilogue kEpi, bool kExact, bool kPipe = (N >= 4 && N <= 6)>
cudaError_t LaunchR(const Segs& s, const float* x, int in, int n, cudaStream_t stream) {
  const int rows_per_block = kWarps * R;
  const unsigned blocks = static_cast<unsigned>((s.total_rows + rows_per_block - 1) / rows_per_block);
  // Loads an iteration ahead by default at 4-6 tokens, where they hide the load latency; at 2 or 8
  // tokens they only cost registers for the same bytes in flight (BM_Gemv, bench/RESULTS.md).
  return LaunchDecodeKernel(GemvKernel<kW, N, R, U, kEpi, kExact, kPipe>, dim3(blocks), dim3(kWarps * 32), 0, stream,
                            ProgrammaticLaunchOnCurrentDevice(), s, x, in, n);
}

template <ElemType kW, int N, GemvEpilogue kEpi, bool kExact = true>
cudaError_t LaunchN(const Segs& s, const float* x, int in, int n, cudaStream_t stream) {
  // Rows per warp grow with the batch so x loads are shared by more rows; loads in flight per lane
  // stay near 4 x 16 bytes. Neither changes the per-element reduction order.
  // From 3 tokens, 4 rows a warp: a warp reads 2n/R bytes of x from L1 per weight byte, and at R = 2
  // that read bounds the kernel from 5 tokens. 8 rows a warp would leave one chunk in flight and spill
  // (docs/experiments.md). Matrices with fewer rows than that leaves 4 warps a multiprocessor (the
  // 2048-row residual products of a qwen3-1.7b-sized model) take 2 rows a warp, or 1, so that every
  // multiprocessor stays busy. Those few rows, when long (down: 6144 inputs), leave ~2 blocks a
  // multiprocessor whose warps stall on loads, so their lanes keep more chunks in flight: registers are
  // not what bounds them there. At 4-6 tokens their x rows are staged once a block in shared memory
  // (LaunchXs), since x read through L1 would miss to L2 at that size; from 7 tokens (8 chunks a lane)
  // the staging no longer pays and x is read from global memory (docs/experiments.md).
  // At 4-5 tokens the 4 rows a warp of many-row matrices with short rows (q/k/v, gate/up: 2048
  // inputs) take their 4 chunks at once instead of 2 loaded an iteration ahead: the same bytes in
  // flight in half the iterations. Longer rows keep the loads ahead, which hide more there.
  // 2 tokens: 2 rows a warp of 2 chunks instead of 1 of 4, so that x's L1 reads are shared by 2 rows.
  // kSwiGlu: half the output rows (each reads a gate and an up row), the same weight rows a warp.
  constexpr int kPer = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;
  constexpr int U = N <= 2 ? 4 : 2;
  if constexpr (N == 1 || (N == 2 && kPer == 2)) {  // a kSwiGlu pair already shares x over 2 rows
    return LaunchR<kW, N, 1, U, kEpi, kExact>(s, x, in, n, stream);
  } else if constexpr (N == 2) {
    return LaunchR<kW, N, 2, 2, kEpi, kExact>(s, x, in, n, stream);
  } else {
    const int min_warps = 4 * MultiprocessorsOnCurrentDevice();
    // Where the row-length rules below switch: the short rows of a qwen3-sized q/k/v and gate/up (2048
    // inputs) against the long ones of 4096 (first) and 6144 (second) inputs.
    constexpr int kAtOnceUpToInputs = 2048;    // many rows: 8 chunks a lane, 2 iterations of 4
    constexpr int kMoreChunksFromInputs = 2048;  // few rows
    if (s.total_rows >= (4 / kPer) * min_warps) {
      if constexpr (N >= 4 && N <= 5) {  // at 6 tokens gate/up's pairs would spill (ptxas: 24 bytes)
        if (in <= kAtOnceUpToInputs) return LaunchR<kW, N, 4 / kPer, 4, kEpi, kExact, false>(s, x, in, n, stream);
      }
      return LaunchR<kW, N, 4 / kPer, U, kEpi, kExact>(s, x, in, n, stream);
    }
    if constexpr (kPer == 1) {  // (kSwiGlu pairs never take 2 rows a warp: no kernels for them here)
      if (s.total_rows >= 2 * min_warps) {
        if constexpr (N >= 4 && N <= 6) {
          if (in >= kMoreChunksFromInputs) {
            bool taken = false;
            const cudaError_t e = LaunchXs<kW, N, 2, 4, kEpi, kExact, true>(s, x, in, n, stream, &taken);
            if (taken || e != cudaSuccess) return e;
            return LaunchR<kW, N, 2, 4, kEpi, kExact, true>(s, x, in, n, stream);
          }
        } else if constexpr (N >= 7) {
          if (in >= kMoreChunksFromInputs) return LaunchR<kW, N, 2, 8, kEpi, kExact, false>(s, x, in, n, stream);
        }
        return LaunchR<kW, N, 2, U, kEpi, kExact>(s, x, in, n, stream);
      }
    }
    return LaunchR<kW, N, 1, U, kEpi, kExact>(s, x, in, n, stream);
  }
}

// A kernel for each n in 1..N of Ns (its registers sized to the batch).
template <ElemType kW, GemvEpilogue kEpi, int... Ns>
cudaError_t DispatchExact(int n, const Segs& s, const float* x, int in, cudaStream_t stream,
                          std::integer_sequence<int, Ns...>) {
  cudaError_t err = cudaErrorInvalidValue;
  ((n == Ns + 1 ? (err = LaunchN<kW, Ns + 1, kEpi>(s, x, in, n, stream), 0) : 0), ...);
  return err;
}

// The epilogues: exact kernels for bf16 up to a k = 8 verification (padding a batch to the next power
// of two costs the padded columns' registers and FMAs; docs/experiments.md), else one for each power of
// two at or above n. Every executable carries each instantiation, so exact ones for every n, type and
// epilogue would make the GPU binaries too large to ship comfortably.
constexpr int kExactEpilogueTokens = 9;
template <ElemType kW, GemvEpilogue kEpi>
cudaError_t DispatchEpilogue(int n, const Segs& s, const float* x, int in, cudaStream_t stream) {
  if (kW == ElemType::kBF16 && n <= kExactEpilogueTokens) {
    return DispatchExact<kW, kEpi>(n, s, x, in, stream, std::make_integer_sequence<int, kExactEpilogueTokens>{});
  }
  if (n <= 1) return LaunchN<kW, 1, kEpi, false>(s, x, in, n, stream);
  if (n <= 2) return LaunchN<kW, 2, kEpi, false>(s, x, in, n, stream);
  if (n <= 4) return LaunchN<kW, 4, kEpi, false>(s, x, in, n, stream);
  if (n <= 8) return LaunchN<kW, 8, kEpi, false>(s, x, in, n, stream);
  return LaunchN<kW, kGemvMaxTokens, kEpi, false>(s, x, in, n, stream);
}

template <ElemType kW>
cudaError_t DispatchEpi(int n, const Segs& s, const float* x, int in, GemvEpilogue epi, cudaStream_t stream,
                        GemvOrder order) {
  if (detail::MmaOrder(order, kW, in)) {
    switch (epi) {
      case GemvEpilogue::kStore: return LaunchMma<GemvEpilogue::kStore>(s, x, in, n, stream);
      case GemvEpilogue::kAddTo: return LaunchMma<GemvEpilogue::kAddTo>(s, x, in, n, stream);
      case GemvEpilogue::kSwiGlu: return LaunchMma<GemvEpilogue::kSwiGlu>(s, x, in, n, stream);
    }
  }
  switch (epi) {
    case GemvEpilogue::kStore:
      return DispatchExact<kW, GemvEpilogue::kStore>(n, s, x, in, stream,
                                                     std::make_integer_sequence<int, kGemvMaxTokens>{});
    case GemvEpilogue::kAddTo: return DispatchEpilogue<kW, GemvEpilogue::kAddTo>(n, s, x, in, stream);
    case GemvEpilogue::kSwiGlu: return DispatchEpilogue<kW, GemvEpilogue::kSwiGlu>(n, s, x, in, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchGemvSegments(const GemvSegment* segments, int n_segments, ElemType w_type, const float* x,
                               int n, int in, GemvEpilogue epilogue, cudaStream_t stream, GemvOrder order) {
  if (IsPacked(w_type)) return LaunchPackedGemvSegments(segments, n_segments, w_type, x, n, in, epilogue, stream);
  SPECGEN_KERNEL_REQUIRE(n >= 1 && n <= kGemvMaxTokens && in > 0 && in % kChunk == 0);
  SPECGEN_KERNEL_REQUIRE(segments != nullptr && n_segments >= 1 && n_segments <= 3 && x != nullptr);
  SPECGEN_KERNEL_REQUIRE(epilogue != GemvEpilogue::kSwiGlu || (n_segments == 2 && segments[0].rows == segments[1].rows));
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(x) % 16 == 0);
  Segs s{};
  s.n = n_segments;
  for (int i = 0; i < n_segments; ++i) {
    const GemvSegment& g = segments[i];
    SPECGEN_KERNEL_REQUIRE(g.w != nullptr && g.y != nullptr && g.rows > 0);
    SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(g.w) % 16 == 0);
    s.w[i] = static_cast<const uint16_t*>(g.w);
    s.y[i] = g.y;
    s.rows[i] = g.rows;
    if (epilogue != GemvEpilogue::kSwiGlu || i == 0) s.total_rows += g.rows;
  }
  return detail::WithHalfType(w_type, [&](auto t) {
    return DispatchEpi<decltype(t)::value>(n, s, x, in, epilogue, stream, order);
  });
}

bool GemvTensorOrder(GemvOrder order, ElemType w_type, int in) { return detail::MmaOrder(order, w_type, in); }
int GemvOrderParts(GemvOrder order, ElemType w_type, int rows, int in) {
  return detail::MmaOrder(order, w_type, in) ? detail::MmaParts(rows, in) : 1;
}

cudaError_t LaunchGemv(const void* w, ElemType w_type, const float* x, float* y, int n, int out,
                       int in, cudaStream_t stream, GemvOrder order) {
  SPECGEN_KERNEL_REQUIRE(out > 0 && w != nullptr && y != nullptr);
  const GemvSegment seg{w, y, out};
  return LaunchGemvSegments(&seg, 1, w_type, x, n, in, GemvEpilogue::kStore, stream, order);
}

}  // namespace specgen::kernels
