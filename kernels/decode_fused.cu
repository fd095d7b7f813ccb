#include "kernels/decode_fused.cuh"
#include "kernels/type_dispatch.cuh"

#include <algorithm>
#include <type_traits>

#include "kernels/cache_elem.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/packed_blocks.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = 8;  // warps per block of the fused GEMV
constexpr int kChunk = detail::kRowChunk;
constexpr int kWarpK = detail::kRowWarpK;
using detail::LoadBatch;
using detail::RowDots;
using detail::RowOf;
using detail::Segments;

// kStreaming: the same kernel for a matrix far larger than L2 (the output head, read once per token at
// HBM speed); a separate instantiation only so that it keeps the driver's default shared-memory
// carveout (see LaunchWithEpi). kDepth: rows per warp whose loads are issued before the wait (a warp
// walks rows grid-stride; rows past its first kDepth are loaded as it reaches them).
template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming, int kDepth>
__device__ __forceinline__ void FusedGemv(const float* __restrict__ x, const void* __restrict__ norm_w,
                                          ElemType norm_type, float eps, Segments segs, int in) {
  constexpr int kRows = RowOf<kEpi>::kRows;
  extern __shared__ float4 xs4[];
  float* xs = reinterpret_cast<float*>(xs4);
  float* norm_s = norm_w != nullptr ? xs + detail::StagedFloats(in) : nullptr;  // [in] when norm_w is set
  __shared__ float scratch[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_warps = gridDim.x * kWarps;
  int row = blockIdx.x * kWarps + warp;
  // The first kDepth rows' weights do not depend on x: their loads are in flight while x is normalized
  // and staged, so the HBM latency overlaps the prologue's reductions and barriers. They are gathered
  // as one set of kDepth x kRows rows, so that after the wait their dot products and butterflies
  // interleave instead of running row after row (each row's arithmetic is the same). A row past the
  // end (a warp's last rows in an uneven grid) loads the last row again and stores nothing.
  constexpr int kAll = kDepth * kRows;
  const uint16_t* w[kAll];
  uint4 wv[kU][kAll];
  const bool any = row < segs.total_rows;
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    const RowOf<kEpi> ro(segs, min(row + d * n_warps, segs.total_rows - 1), in);
#pragma unroll
    for (int i = 0; i < kRows; ++i) w[d * kRows + i] = ro.w[i];
  }
  if (any) LoadBatch<kAll, kU>(w, lane * kChunk, in, wv);
  // The norm weights: copied asynchronously where they can be (see CopyNormWeightsAsync). Not in the
  // residual GEMVs (O, down: no norm in the decode), whose register counts the extra path would move.
  const bool norm_async = kEpi != GemvEpilogue::kAddTo && norm_s != nullptr &&
                          detail::NormCopiesAsync(norm_w, norm_type, in);
  if (norm_async) {
    detail::CopyNormWeightsAsync(norm_w, norm_type, in, norm_s);
  } else if (norm_s != nullptr) {
    detail::StageNormWeights(norm_w, norm_type, in, norm_s);
  }
  // Under PDL these loads overlap the previous kernel too; x and y come after its end.
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  // kAddTo: the residual the rows add to, read now (it is final once the previous grid is) so that its
  // L2 round trip overlaps the staging instead of following the dot products.
  float prior[kDepth] = {};
  if constexpr (kEpi == GemvEpilogue::kAddTo) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int r = row + d * n_warps;
      if (lane == 0 && r < segs.total_rows) prior[d] = *RowOf<kEpi>(segs, r, in).y;
    }
  }
  // Two calls rather than one with the pointers selected: the selects cost QKV's kernel 4 registers
  // (60 -> 64, ptxas), and registers decide which blocks start beside the previous kernel's.
  if (norm_async) {  // norm_s holds norm_type's bytes, read as they are
    detail::StageInput(x, norm_s, norm_type, eps, in, xs, scratch, nullptr, true);
  } else {
    detail::StageInput(x, norm_w, norm_type, eps, in, xs, scratch, norm_s);
  }
  if (!any) return;

  {
    float dot[kAll];
    RowDots<kW, kAll, kU>(w, xs, in, lane, wv, dot);
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (lane == 0 && row + d * n_warps < segs.total_rows) {
        float part[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) part[i] = dot[d * kRows + i];
        RowOf<kEpi>(segs, row + d * n_warps, in).Store(part, prior[d]);
      }
    }
  }
  for (row += kDepth * n_warps; row < segs.total_rows; row += n_warps) {
    const RowOf<kEpi> ro(segs, row, in);
    uint4 wr[kU][kRows];
    LoadBatch<kRows, kU>(ro.w, lane * kChunk, in, wr);
    float dot[kRows];
    RowDots<kW, kRows, kU>(ro.w, xs, in, lane, wr, dot);
    if (lane == 0) ro.Store(dot);
  }
}

template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming, int kDepth>
__global__ void __launch_bounds__(kWarps * 32)
    FusedGemvKernel(const float* __restrict__ x, const void* __restrict__ norm_w, ElemType norm_type,
                    float eps, Segments segs, int in) {
  FusedGemv<kW, kEpi, kU, kStreaming, kDepth>(x, norm_w, norm_type, eps, segs, in);
}

// The same under a register cap (registers a thread): the down projection's (a residual add over a
// 3072-input row: 113 registers uncapped, 30.7 K a block) at 104 (it takes 94-96: 24.6 K), so that its
// block starts beside two gate/up blocks of a row pair a warp (20.5 K each) in a multiprocessor's 64 K
// instead of one, so more of the next kernel overlaps this one's tail. A cap of 255 on every kernel is
// not neutral: the compiler then gives the others 10-15 registers more.
template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming, int kDepth, int kMaxRegs>
__global__ void __launch_bounds__(kWarps * 32) __maxnreg__(kMaxRegs)
    FusedGemvKernelCapped(const float* __restrict__ x, const void* __restrict__ norm_w, ElemType norm_type,
                          float eps, Segments segs, int in) {
  FusedGemv<kW, kEpi, kU, kStreaming, kDepth>(x, norm_w, norm_type, eps, segs, in);
}

// The kernel of an instantiation: capped where FusedGemvKernelCapped says why.
template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming, int kDepth>
constexpr auto GemvKernelFor() {
  if constexpr (kEpi == GemvEpilogue::kAddTo && kU == 12 && !kStreaming) {
    return &FusedGemvKernelCapped<kW, kEpi, kU, kStreaming, kDepth, 104>;
  } else {
    return &FusedGemvKernel<kW, kEpi, kU, kStreaming, kDepth>;
  }
}

// The streaming (output head) instantiation keeps the default carveout: the max shared carveout leaves
// 28 KB of L1, which may limit the loads in flight of the longest kernel of a token (docs/experiments.md);
// one carveout switch per token before and after it is small against that kernel's own time.
template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming, int kDepth>
cudaError_t LaunchWithDepth(const float* x, const void* norm_w, ElemType norm_type, float eps,
                            const Segments& segs, int in, unsigned blocks, cudaStream_t stream,
                            bool programmatic) {
  constexpr auto kernel = GemvKernelFor<kW, kEpi, kU, kStreaming, kDepth>();
  static const cudaError_t configured = [] {
    if (!kStreaming) detail::PreferSharedCarveout(kernel);
    // The staged activation and the norm weights: at most 2 x 32 KB.
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(2 * sizeof(float) * kFusedGemvMaxIn));
  }();
  if (configured != cudaSuccess) return configured;
  const size_t smem =
      (static_cast<size_t>(detail::StagedFloats(in)) + (norm_w != nullptr ? in : 0)) * sizeof(float);
  if (!programmatic) {
    kernel<<<blocks, kWarps * 32, smem, stream>>>(x, norm_w, norm_type, eps, segs, in);
    return cudaGetLastError();
  }
  return LaunchDecodeKernel(kernel, dim3(blocks), dim3(kWarps * 32), smem, stream, true, x, norm_w, norm_type,
                            eps, segs, in);
}

// kDepth: the rows a warp has (a grid bound below a row per warp), up to 4 single rows or 3 row pairs,
// when a row takes at most 4 loads a lane (so at most 16 or 24 loads stay in registers), else 1. A
// small grid with every row loaded ahead is how a GEMV's blocks all fit beside their predecessor's
// under PDL (the register file decides which blocks start early; see GraphedDraft).
template <ElemType kW, GemvEpilogue kEpi, int kU, bool kStreaming>
cudaError_t LaunchWithEpi(const float* x, const void* norm_w, ElemType norm_type, float eps,
                          const Segments& segs, int in, unsigned blocks, cudaStream_t stream,
                          bool programmatic) {
  const int64_t warps = static_cast<int64_t>(blocks) * kWarps;
  const int64_t per_warp = (segs.total_rows + warps - 1) / warps;
  const auto launch = [&](auto depth) {
    constexpr int kDepth = decltype(depth)::value;
    return LaunchWithDepth<kW, kEpi, kU, kStreaming, kDepth>(x, norm_w, norm_type, eps, segs, in, blocks,
                                                             stream, programmatic);
  };
  if constexpr (kU == 4 && !kStreaming) {
    if (per_warp == 2) return launch(std::integral_constant<int, 2>{});
    if (per_warp == 3 || (per_warp > 3 && RowOf<kEpi>::kRows == 2)) {
      return launch(std::integral_constant<int, 3>{});
    }
    if constexpr (RowOf<kEpi>::kRows == 1) {
      if (per_warp > 3) return launch(std::integral_constant<int, 4>{});
    }
  }
  return launch(std::integral_constant<int, 1>{});
}

// Output rows from which a kStore GEMV counts as streaming (the head: vocabulary-sized).
constexpr int kStreamingRows = 32768;

template <ElemType kW, int kU>
cudaError_t LaunchWithU(const float* x, const void* norm_w, ElemType norm_type, float eps,
                        const Segments& segs, int in, GemvEpilogue epi, unsigned blocks,
                        cudaStream_t stream, bool programmatic) {
  switch (epi) {
    case GemvEpilogue::kStore:
      if (segs.total_rows >= kStreamingRows) {
        return LaunchWithEpi<kW, GemvEpilogue::kStore, kU, true>(x, norm_w, norm_type, eps, segs, in,
                                                                 blocks, stream, programmatic);
      }
      return LaunchWithEpi<kW, GemvEpilogue::kStore, kU, false>(x, norm_w, norm_type, eps, segs, in, blocks,
                                                                stream, programmatic);
    case GemvEpilogue::kAddTo:
      return LaunchWithEpi<kW, GemvEpilogue::kAddTo, kU, false>(x, norm_w, norm_type, eps, segs, in, blocks,
                                                                stream, programmatic);
    case GemvEpilogue::kSwiGlu:
      return LaunchWithEpi<kW, GemvEpilogue::kSwiGlu, kU, false>(x, norm_w, norm_type, eps, segs, in, blocks,
                                                                 stream, programmatic);
  }
  return cudaErrorInvalidValue;
}

// Loads in flight per lane and row: enough for a whole row of up to 3072 inputs (the O and down
// projections have few rows, so few warps: each must keep its whole row in flight).
template <ElemType kW>
cudaError_t LaunchTyped(const float* x, const void* norm_w, ElemType norm_type, float eps,
                        const Segments& segs, int in, GemvEpilogue epi, int max_blocks,
                        cudaStream_t stream, bool programmatic) {
  const int blocks_needed = (segs.total_rows + kWarps - 1) / kWarps;
  const unsigned blocks = static_cast<unsigned>(blocks_needed < max_blocks ? blocks_needed : max_blocks);
  const int batches = (in + kWarpK - 1) / kWarpK;  // 16-byte loads per lane for one row
  if (batches <= 4) {
    return LaunchWithU<kW, 4>(x, norm_w, norm_type, eps, segs, in, epi, blocks, stream, programmatic);
  }
  if (batches <= 8) {
    return LaunchWithU<kW, 8>(x, norm_w, norm_type, eps, segs, in, epi, blocks, stream, programmatic);
  }
  return LaunchWithU<kW, 12>(x, norm_w, norm_type, eps, segs, in, epi, blocks, stream, programmatic);
}

// RopeKernel's cos/sin (rot_dim = d) of position pos, pair i: double pow and sincos, rounded to float.
__device__ __forceinline__ void RopeCosSin(double theta, int pos, int i, int d, float* cf, float* sf) {
  const double inv_freq = pow(theta, -2.0 * i / d);
  double s, c;
  sincos(static_cast<double>(pos) * inv_freq, &s, &c);
  *cf = static_cast<float>(c);
  *sf = static_cast<float>(s);
}

// grid-stride over positions * d/2 entries.
__global__ void RopeTableKernel(float2* __restrict__ table, int positions, int d, double theta) {
  const int half = d / 2;
  const int64_t total = static_cast<int64_t>(positions) * half;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float cf, sf;
    RopeCosSin(theta, static_cast<int>(e / half), static_cast<int>(e % half), d, &cf, &sf);
    table[e] = make_float2(cf, sf);
  }
}

__global__ void SetDecodeStateKernel(DecodeState* state, const int32_t* device_token, int32_t host_token,
                                     int32_t pos) {
  state->token = device_token != nullptr ? *device_token : host_token;
  state->pos = pos;
}

// Row `token` of a packed table, a thread a 32-element chunk dequantized to the CPU's bits (as
// LaunchPackedEmbedding), or NaN for an invalid token.
template <ElemType kT>
__device__ __forceinline__ void PackedEmbeddingRow(const DecodeInput& in, int32_t token, bool valid) {
  const uint8_t* row = static_cast<const uint8_t*>(in.table) + static_cast<int64_t>(valid ? token : 0) *
                                                                    PackedRowBytes(kT, in.dim);
  for (int g = threadIdx.x; g < in.dim / detail::kPackedChunk; g += blockDim.x) {
    float y[detail::kPackedChunk];
    if (valid) {
      detail::DequantChunk<kT>(row, g, y);
    } else {
#pragma unroll
      for (int j = 0; j < detail::kPackedChunk; ++j) y[j] = NAN;
    }
#pragma unroll
    for (int j = 0; j < detail::kPackedChunk; ++j) in.out[g * detail::kPackedChunk + j] = y[j];
  }
}

// LaunchDecodeInput: one block. No early trigger for dependents: the attention reads the position
// before its PDL wait, so nothing may start before this kernel has ended.
__global__ void DecodeInputKernel(DecodeInput in) {
  const int32_t token = in.device_token != nullptr ? *in.device_token : in.host_token;
  if (threadIdx.x == 0) {
    in.state->token = token;
    in.state->pos = in.pos;
  }
  const bool valid = token >= 0 && token < in.vocab;
  switch (in.table_type) {  // device code: the packed list spelled by its macro (kernel_types.h)
#define SPECGEN_EMBED_CASE(name) \
  case ElemType::name:           \
    return PackedEmbeddingRow<ElemType::name>(in, token, valid);
    SPECGEN_PACKED_TYPES(SPECGEN_EMBED_CASE)
#undef SPECGEN_EMBED_CASE
    default: break;
  }
  for (int i = threadIdx.x; i < in.dim; i += blockDim.x) {
    in.out[i] = valid ? detail::LoadAsF32(in.table, in.table_type, static_cast<int64_t>(token) * in.dim + i) : NAN;
  }
}

// One block of T threads (RmsNormKernel's block for dim = head_dim) per q, k or v head.
__global__ void QkNormRopeAppendKernel(const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, float* q_out,
                                       const void* __restrict__ q_norm, const void* __restrict__ k_norm,
                                       ElemType norm_type, float eps, void* __restrict__ k_cache,
                                       void* __restrict__ v_cache, ElemType kv_type, const DecodeState* state,
                                       int heads,
                                       int kv_heads, int d, double theta,
                                       const float2* __restrict__ rope_table, RopeStyle style) {
  __shared__ float scratch[32];
  __shared__ float y[256];
  WaitForPrecedingGrid();
  LetDependentsLaunch();
  const int b = blockIdx.x;
  const int64_t kv_dim = static_cast<int64_t>(kv_heads) * d;
  const int pos = state->pos;
  if (b >= heads + kv_heads) {  // V: stored as computed (rounded to the cache's type)
    const int h = b - heads - kv_heads;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      detail::CacheStoreAs(v_cache, kv_type, pos * kv_dim + static_cast<int64_t>(h) * d + i,
                           v[static_cast<int64_t>(h) * d + i]);
    }
    return;
  }
  const bool is_q = b < heads;
  const int h = is_q ? b : b - heads;
  const float* src = (is_q ? q : k) + static_cast<int64_t>(h) * d;
  // q goes to q_out in fp32; k to its cache row, rounded to the cache's type.
  float* q_dst = q_out + static_cast<int64_t>(h) * d;
  const int64_t k_row = pos * kv_dim + static_cast<int64_t>(h) * d;
  const void* w = is_q ? q_norm : k_norm;
  if (w != nullptr) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss = fmaf(src[i], src[i], ss);
    const float inv = detail::RmsInverse(ss, d, eps, scratch);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
      y[i] = src[i] * inv * detail::LoadAsF32(w, norm_type, i);
    }
  } else {
    for (int i = threadIdx.x; i < d; i += blockDim.x) y[i] = src[i];
  }
  __syncthreads();
  // RopeKernel's arithmetic with rot_dim = d.
  const int half = d / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float cf, sf;
    if (rope_table != nullptr) {
      const float2 cs = rope_table[static_cast<int64_t>(pos) * half + i];
      cf = cs.x;
      sf = cs.y;
    } else {
      RopeCosSin(theta, pos, i, d, &cf, &sf);
    }
    const int i0 = style == RopeStyle::kRotateHalf ? i : 2 * i;
    const int i1 = style == RopeStyle::kRotateHalf ? i + half : 2 * i + 1;
    const float x0 = y[i0], x1 = y[i1];
    const float a = x0 * cf - x1 * sf, c = x0 * sf + x1 * cf;
    if (is_q) {
      q_dst[i0] = a;
      q_dst[i1] = c;
    } else {
      detail::CacheStoreAs(k_cache, kv_type, k_row + i0, a);
      detail::CacheStoreAs(k_cache, kv_type, k_row + i1, c);
    }
  }
}

}  // namespace

cudaError_t LaunchSetDecodeState(DecodeState* state, const int32_t* device_token, int32_t host_token,
                                 int32_t pos, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(state != nullptr && pos >= 0);
  SetDecodeStateKernel<<<1, 1, 0, stream>>>(state, device_token, host_token, pos);
  return cudaGetLastError();
}

namespace {

constexpr int kInputThreads = 256;

bool DecodeInputValid(const DecodeInput& in) {
  return in.state != nullptr && in.pos >= 0 && in.table != nullptr && in.vocab > 0 && in.dim > 0 &&
         in.out != nullptr && in.dim % BlockElems(in.table_type) == 0;
}

}  // namespace

cudaError_t LaunchDecodeInput(const DecodeInput& in, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(DecodeInputValid(in));
  DecodeInputKernel<<<1, kInputThreads, 0, stream>>>(in);
  return cudaGetLastError();
}

cudaError_t SetDecodeInputNodeArgs(cudaGraphExec_t exec, cudaGraphNode_t node, const DecodeInput& in) {
  SPECGEN_KERNEL_REQUIRE(exec != nullptr && node != nullptr && DecodeInputValid(in));
  void* args[] = {const_cast<DecodeInput*>(&in)};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(DecodeInputKernel);
  p.gridDim = dim3(1);
  p.blockDim = dim3(kInputThreads);
  p.kernelParams = args;
  return cudaGraphExecKernelNodeSetParams(exec, node, &p);
}

cudaError_t LaunchFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                            const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                            GemvEpilogue epilogue, int max_blocks, cudaStream_t stream) {
  return LaunchFusedGemv(x, norm_w, norm_type, eps, segments, n_segments, w_type, in, epilogue, max_blocks,
                         stream, false);
}

cudaError_t LaunchFusedGemv(const float* x, const void* norm_w, ElemType norm_type, float eps,
                            const GemvSegment* segments, int n_segments, ElemType w_type, int in,
                            GemvEpilogue epilogue, int max_blocks, cudaStream_t stream,
                            bool programmatic, int rows_per_warp) {
  if (IsPacked(w_type)) {
    return LaunchPackedFusedGemv(x, norm_w, norm_type, eps, segments, n_segments, w_type, in, epilogue, max_blocks,
                                 stream, programmatic, rows_per_warp);
  }
  Segments segs;
  const cudaError_t checked = detail::MakeSegments(x, segments, n_segments, in, epilogue, max_blocks, &segs);
  if (checked != cudaSuccess) return checked;
  if (rows_per_warp > 0) {
    const int per_block = kWarps * rows_per_warp;
    max_blocks = std::min(max_blocks, (segs.total_rows + per_block - 1) / per_block);
  }
  return detail::WithHalfType(w_type, [&](auto t) {
    return LaunchTyped<decltype(t)::value>(x, norm_w, norm_type, eps, segs, in, epilogue, max_blocks, stream,
                                           programmatic);
  });
}

namespace {

cudaError_t QkNormRopeAppend(const float* q, const float* k, const float* v, float* q_out,
                             const void* q_norm, const void* k_norm, ElemType norm_type, float eps,
                             void* k_cache, void* v_cache, ElemType kv_type, const DecodeState* state, int heads,
                             int kv_heads, int head_dim, double theta, const float2* rope_table,
                             RopeStyle style, cudaStream_t stream, bool programmatic) {
  SPECGEN_KERNEL_REQUIRE(q && k && v && q_out && k_cache && v_cache && state);
  SPECGEN_KERNEL_REQUIRE((q_norm == nullptr) == (k_norm == nullptr));
  SPECGEN_KERNEL_REQUIRE(detail::IsCacheElemType(kv_type));
  SPECGEN_KERNEL_REQUIRE(heads > 0 && kv_heads > 0 && head_dim > 0 && head_dim % 2 == 0 &&
                         head_dim <= 256 && (theta > 0 || rope_table != nullptr));
  static const bool configured = [] {
    detail::PreferSharedCarveout(QkNormRopeAppendKernel);
    return true;
  }();
  (void)configured;
  const int threads = head_dim >= 256 ? 256 : ((head_dim + 31) / 32) * 32;
  const unsigned blocks = static_cast<unsigned>(heads + 2 * kv_heads);
  if (!programmatic) {
    QkNormRopeAppendKernel<<<blocks, threads, 0, stream>>>(q, k, v, q_out, q_norm, k_norm, norm_type, eps,
                                                           k_cache, v_cache, kv_type, state, heads, kv_heads,
                                                           head_dim, theta, rope_table, style);
    return cudaGetLastError();
  }
  return LaunchDecodeKernel(QkNormRopeAppendKernel, dim3(blocks), dim3(threads), 0, stream, true, q, k, v,
                            q_out, q_norm, k_norm, norm_type, eps, k_cache, v_cache, kv_type, state, heads,
                            kv_heads, head_dim, theta, rope_table, style);
}

}  // namespace

cudaError_t LaunchQkNormRopeAppend(const float* q, const float* k, const float* v, float* q_out,
                                   const void* q_norm, const void* k_norm, ElemType norm_type,
                                   float eps, void* k_cache, void* v_cache, ElemType kv_type,
                                   const DecodeState* state, int heads, int kv_heads, int head_dim, double theta,
                                   RopeStyle style, cudaStream_t stream) {
  return QkNormRopeAppend(q, k, v, q_out, q_norm, k_norm, norm_type, eps, k_cache, v_cache, kv_type, state, heads,
                          kv_heads, head_dim, theta, nullptr, style, stream, false);
}

cudaError_t LaunchQkNormRopeAppend(const float* q, const float* k, const float* v, float* q_out,
                                   const void* q_norm, const void* k_norm, ElemType norm_type,
                                   float eps, void* k_cache, void* v_cache, ElemType kv_type,
                                   const DecodeState* state, int heads, int kv_heads, int head_dim,
                                   const float2* rope_table, RopeStyle style, cudaStream_t stream,
                                   bool programmatic) {
  SPECGEN_KERNEL_REQUIRE(rope_table != nullptr);
  return QkNormRopeAppend(q, k, v, q_out, q_norm, k_norm, norm_type, eps, k_cache, v_cache, kv_type, state, heads,
                          kv_heads, head_dim, 0.0, rope_table, style, stream, programmatic);
}

cudaError_t LaunchRopeTable(float2* table, int positions, int head_dim, double theta,
                            cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(table != nullptr && positions > 0 && head_dim > 0 && head_dim % 2 == 0 &&
                         theta > 0);
  const int64_t total = static_cast<int64_t>(positions) * (head_dim / 2);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  RopeTableKernel<<<blocks, 256, 0, stream>>>(table, positions, head_dim, theta);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
