#include "kernels/persistent_decode.cuh"

#include <algorithm>

#include "kernels/decode_fused.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/persistent_attention.cuh"
#include "kernels/persistent_common.cuh"

namespace specgen::kernels {
namespace {

using detail::LoadBatch;
using detail::RowDots;
using detail::RowOf;
using detail::Segments;
using detail::PrefetchL2;
using namespace persistent;  // NOLINT: the kernel's own internal headers

// ---- L2 prefetch of weight rows ----

// Rows [r0, r1) of `total` that block b of nb computes in a GEMV phase (contiguous, so one prefetch).
__device__ __forceinline__ void BlockRows(int total, int b, int nb, int* r0, int* r1) {
  *r0 = static_cast<int>(static_cast<int64_t>(total) * b / nb);
  *r1 = static_cast<int>(static_cast<int64_t>(total) * (b + 1) / nb);
}

// The weight phases of a token, in order: per layer QKV (4l), O (4l+1), gate/up (4l+2), down (4l+3);
// then the output head (4L).
struct WeightPhase {
  Segments segs;
  int in = 0;
  bool paired = false;  // gate/up: row r of both segments
};

// Segment outputs point at the activation pairs (the GEMV epilogue stores pairs there; kPlain: floats).
__device__ __forceinline__ WeightPhase PhaseWeights(const PersistentDecodeParams& p, const Activations& a, int wp) {
  WeightPhase ph;
  const int qd = p.heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
  const auto f = [](uint2* x) { return reinterpret_cast<float*>(x); };
  if (wp >= 4 * p.n_layers) {
    ph.segs.n = 1;
    ph.segs.s[0] = {p.head, p.logits, p.vocab};
    ph.segs.total_rows = p.vocab;
    ph.in = p.hidden;
    return ph;
  }
  const PersistentLayer& L = p.layers[wp / 4];
  switch (wp % 4) {
    case 0:
      ph.segs.n = 3;
      ph.segs.s[0] = {L.q, f(a.q), qd};
      ph.segs.s[1] = {L.k, f(a.k), kvd};
      ph.segs.s[2] = {L.v, f(a.v), kvd};
      ph.segs.total_rows = qd + 2 * kvd;
      ph.in = p.hidden;
      break;
    case 1:
      ph.segs.n = 1;
      ph.segs.s[0] = {L.o, f(a.h), p.hidden};
      ph.segs.total_rows = p.hidden;
      ph.in = qd;
      break;
    case 2:
      ph.segs.n = 2;
      ph.segs.s[0] = {L.gate, f(a.act), p.ffn};
      ph.segs.s[1] = {L.up, f(a.act), p.ffn};
      ph.segs.total_rows = p.ffn;
      ph.in = p.hidden;
      ph.paired = true;
      break;
    default:
      ph.segs.n = 1;
      ph.segs.s[0] = {L.down, f(a.h), p.hidden};
      ph.segs.total_rows = p.hidden;
      ph.in = p.ffn;
      break;
  }
  return ph;
}

// Thread 0 of each block asks L2 for the block's rows of weight phase wp (the head: only its first
// kHeadAhead rows per warp; the rest is prefetched while the head runs). A hint only: results never
// depend on it. Not inlined: six call sites per layer would each carry a copy.
__device__ __noinline__ void PrefetchPhase(const PersistentDecodeParams& p, int wp) {
  if (threadIdx.x != 0 || wp > 4 * p.n_layers || !p.l2_prefetch) return;
  const WeightPhase ph = PhaseWeights(p, Activations{}, wp);
  const int64_t row_bytes = static_cast<int64_t>(ph.in) * ElemBytes(p.w_type);
  int r0, r1;
  BlockRows(ph.segs.total_rows, blockIdx.x, gridDim.x, &r0, &r1);
  if (wp == 4 * p.n_layers) r1 = min(r1, r0 + kHeadAhead * kWarps);
  if (ph.paired) {
    for (int s = 0; s < 2; ++s) {
      PrefetchL2(static_cast<const char*>(ph.segs.s[s].w) + r0 * row_bytes, (r1 - r0) * row_bytes);
    }
    return;
  }
  int base = 0;  // first concatenated row of segment s
  for (int s = 0; s < ph.segs.n; ++s) {
    const int lo = max(r0, base), hi = min(r1, base + ph.segs.s[s].rows);
    if (lo < hi) {
      PrefetchL2(static_cast<const char*>(ph.segs.s[s].w) + (lo - base) * row_bytes, (hi - lo) * row_bytes);
    }
    base += ph.segs.s[s].rows;
  }
}

// ---- GEMV phases ----

// Where a GEMV phase's rows go.
enum class Out : uint8_t {
  kLL = 0,        // epoch-tagged activation pairs (segment y pointers are uint2 arrays)
  kResidual = 1,  // h: y[o] = h[o] + s, with h[o] kept by its owning block in shared memory (h_own),
                  // then published as a pair
  kPlain = 2,     // fp32 (the logits)
};

struct PhaseIo {
  const uint2* x;       // the input activation pairs [in]
  unsigned x_epoch;     // the epoch they must carry
  Out out;
  unsigned out_epoch;   // kLL / kResidual
  uint2* h;             // kResidual: the published h pairs
  float* h_own;         // kResidual: this block's rows of h (shared memory), row o at h_own[o - h_row0]
  int h_row0;
};

// One GEMV phase: the block's rows [r0, r1) of `segs` (warp w: rows r0 + w, r0 + w + 8, ..) against
// x' = RmsNorm(x) (norm_w set) or x, staged in xs once x carries its epoch. Each warp keeps kDepth rows'
// loads in flight (a ring of register buffers: a row's buffer is refilled with the row kDepth rows
// later right after its dot product); the first kDepth rows' loads are issued (and the norm weights
// staged) before waiting for x: weights do not depend on it. Rows wider than 256 * kU inputs are
// finished by RowDots' own later batches. kHead: each warp also prefetches the row kHeadAhead
// iterations ahead into L2 (the head is far larger than L2, so it cannot be prefetched a phase ahead).
// Per row the arithmetic is RowDots' (GemvKernel's order) and the epilogue LaunchFusedGemv's.
template <ElemType kW, GemvEpilogue kEpi, int kU, int kDepth, bool kHead>
__device__ void GemvPhaseT(const Segments& segs, int in, const PhaseIo& io, const void* norm_w,
                           ElemType norm_type, float eps, float* xs, float* norm_s, float* scratch,
                           bool prefetch) {
  constexpr int kRows = RowOf<kEpi>::kRows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int r0, r1;
  BlockRows(segs.total_rows, blockIdx.x, gridDim.x, &r0, &r1);
  if (r0 >= r1) return;  // no rows: nothing to read either
  const int row0 = r0 + warp;
  uint4 buf[kDepth][kU][kRows];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) {
    const int row = row0 + d * kWarps;
    if (row < r1) LoadBatch<kRows, kU>(RowOf<kEpi>(segs, row, in).w, lane * detail::kRowChunk, in, buf[d]);
  }
  __syncthreads();  // the previous phase's warps are done with xs and norm_s
  if (norm_w != nullptr) {
    for (int i = threadIdx.x; i < in; i += blockDim.x) norm_s[i] = detail::LoadAsF32(norm_w, norm_type, i);
  }
  AwaitStage(io.x, io.x_epoch, in, xs);
  __syncthreads();
  if (norm_w != nullptr) detail::NormalizeStaged(xs, norm_w, norm_type, eps, in, scratch, norm_s);
  for (int base = row0; base < r1; base += kDepth * kWarps) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int row = base + d * kWarps;
      if (row >= r1) break;
      const RowOf<kEpi> ro(segs, row, in);
      if constexpr (kHead) {
        const int ahead = row + kHeadAhead * kWarps;
        if (lane == 0 && ahead < r1 && prefetch) {
          PrefetchL2(RowOf<kEpi>(segs, ahead, in).w[0], static_cast<int64_t>(in) * ElemBytes(kW));
        }
      }
      float dot[kRows];
      RowDots<kW, kRows, kU>(ro.w, xs, in, lane, buf[d], dot);
      const int refill = row + kDepth * kWarps;
      if (refill < r1) {
        LoadBatch<kRows, kU>(RowOf<kEpi>(segs, refill, in).w, lane * detail::kRowChunk, in, buf[d]);
      }
      if (lane == 0) {
        float v;
        if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
          v = dot[0] / (1.f + expf(-dot[0])) * dot[1];
        } else if constexpr (kEpi == GemvEpilogue::kAddTo) {
          float* own = io.h_own + (row - io.h_row0);
          v = *own + dot[0];
          *own = v;
        } else {
          v = dot[0];
        }
        if (io.out == Out::kPlain) {
          *ro.y = v;
        } else if (io.out == Out::kResidual) {
          StoreLL(io.h + row, v, io.out_epoch);
        } else {
          StoreLL(reinterpret_cast<uint2*>(ro.y_base) + ro.r, v, io.out_epoch);
        }
      }
    }
  }
}

// kU = 16-byte loads per lane and row: the whole row up to 3072 inputs (the O and down projections
// have about one row per warp, which must be in flight at once); rows up to 1024 inputs keep 2 rows in
// flight per warp (the gate/up pair: 2 x 2 rows x 4 loads x 4 registers), a wider hidden is walked in
// several batches. Deeper rings spilled (4 KB per thread at 4 rows) under the 255-register bound.
template <ElemType kW, GemvEpilogue kEpi, bool kHead>
__device__ __forceinline__ void GemvPhase(const WeightPhase& ph, const PhaseIo& io, const void* norm_w,
                                          ElemType norm_type, float eps, float* xs, float* norm_s,
                                          float* scratch, bool prefetch) {
  const int batches = (ph.in + detail::kRowWarpK - 1) / detail::kRowWarpK;
  if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
    GemvPhaseT<kW, kEpi, 4, 2, kHead>(ph.segs, ph.in, io, norm_w, norm_type, eps, xs, norm_s, scratch, prefetch);
  } else {
    if (batches <= 4) {
      GemvPhaseT<kW, kEpi, 4, 2, kHead>(ph.segs, ph.in, io, norm_w, norm_type, eps, xs, norm_s, scratch,
                                        prefetch);
    } else if (batches <= 8) {
      GemvPhaseT<kW, kEpi, 8, 1, kHead>(ph.segs, ph.in, io, norm_w, norm_type, eps, xs, norm_s, scratch,
                                        prefetch);
    } else {
      GemvPhaseT<kW, kEpi, 12, 1, kHead>(ph.segs, ph.in, io, norm_w, norm_type, eps, xs, norm_s, scratch,
                                         prefetch);
    }
  }
}

// ---- the kernel ----

// Workspace layout: kv_heads attention merge counters (rounded to 16 bytes); the chunk partials ml
// [heads][max_chunks][2] and acc [heads][max_chunks][head_dim] (fp32); then the activation pairs h
// [hidden], q [heads*d], k and v [kv_heads*d], attn [heads*d], act [ffn].
__host__ __device__ __forceinline__ size_t Align16(size_t n) { return (n + 15) / 16 * 16; }
__host__ __device__ __forceinline__ int MaxChunks(int capacity, int head_dim) {
  return (capacity + KvChunk(head_dim) - 1) / KvChunk(head_dim);
}
struct WorkspaceLayout {
  size_t counters, ml, acc, h, q, k, v, attn, act, total;
  __host__ __device__ explicit WorkspaceLayout(const PersistentDecodeParams& p) {
    const size_t chunks = static_cast<size_t>(MaxChunks(p.capacity, p.head_dim));
    const size_t qd = static_cast<size_t>(p.heads) * p.head_dim, kvd = static_cast<size_t>(p.kv_heads) * p.head_dim;
    counters = 0;
    ml = Align16(static_cast<size_t>(p.kv_heads) * sizeof(unsigned));
    acc = ml + Align16(static_cast<size_t>(p.heads) * chunks * 2 * sizeof(float));
    h = acc + Align16(static_cast<size_t>(p.heads) * chunks * p.head_dim * sizeof(float));
    q = h + Align16(static_cast<size_t>(p.hidden) * sizeof(uint2));
    k = q + Align16(qd * sizeof(uint2));
    v = k + Align16(kvd * sizeof(uint2));
    attn = v + Align16(kvd * sizeof(uint2));
    act = attn + Align16(qd * sizeof(uint2));
    total = act + Align16(static_cast<size_t>(p.ffn) * sizeof(uint2));
  }
};

template <ElemType kW>
__global__ void __launch_bounds__(kThreads, 1)
    PersistentDecodeKernel(PersistentDecodeParams p, const int32_t* __restrict__ device_token,
                           int32_t host_token, int32_t pos, unsigned long long launch_index) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int widest = detail::StagedFloats(max(max(p.hidden, p.heads * p.head_dim), p.ffn));
  float* norm_s = smem + max(widest, kAttnSmemFloats);  // [hidden]: the phase's norm weights as fp32
  float* h_own = norm_s + p.hidden;                      // this block's rows of h
  float* kv_s = h_own + p.hidden;                        // [2][chunk][head_dim]: the attention's cache rows
  __shared__ float scratch[32];
  char* ws = static_cast<char*>(p.workspace);
  const WorkspaceLayout lay(p);
  auto* merge_counters = reinterpret_cast<unsigned*>(ws + lay.counters);
  float* ws_ml = reinterpret_cast<float*>(ws + lay.ml);
  float* ws_acc = reinterpret_cast<float*>(ws + lay.acc);
  const Activations act{reinterpret_cast<uint2*>(ws + lay.h),    reinterpret_cast<uint2*>(ws + lay.q),
                        reinterpret_cast<uint2*>(ws + lay.k),    reinterpret_cast<uint2*>(ws + lay.v),
                        reinterpret_cast<uint2*>(ws + lay.attn), reinterpret_cast<uint2*>(ws + lay.act)};
  const int max_chunks = MaxChunks(p.capacity, p.head_dim);
  const Epochs ep{static_cast<unsigned>(launch_index * PersistentDecodePhases(p.n_layers))};
  unsigned long long* probe =
      p.timeline != nullptr
          ? p.timeline + static_cast<size_t>(PersistentDecodePhases(p.n_layers) + 1) * (gridDim.x + 1)
          : nullptr;
  int h0, h1;  // the rows of h this block owns (its rows of the O and down projections)
  BlockRows(p.hidden, blockIdx.x, gridDim.x, &h0, &h1);

  PrefetchPhase(p, 0);
  PrefetchPhase(p, 1);
  // Embedding: h = table[token] (NaN for an id outside the table, as LaunchEmbedding), own rows.
  const int token = device_token != nullptr ? __ldcg(device_token) : host_token;
  const bool valid = token >= 0 && token < p.vocab;
  for (int o = h0 + threadIdx.x; o < h1; o += kThreads) {
    const float v = valid ? detail::LoadAsF32(p.embedding, p.embed_type, static_cast<int64_t>(token) * p.hidden + o)
                          : NAN;
    h_own[o - h0] = v;
    StoreLL(act.h + o, v, ep.of(0));
  }
  Stamp(p.timeline, 0);
  for (int l = 0; l < p.n_layers; ++l) {
    const PersistentLayer& L = p.layers[l];
    const int wp = 4 * l, k0 = 5 * l;
    // Each weight phase prefetches the one two ahead (at most ~27 MB of a qwen3-0.6b layer pending).
    PrefetchPhase(p, wp + 2);
    // The block's attention item (if it has one) copies its committed cache rows while the QKV
    // projection runs: they do not depend on this token.
    {
      const int chunk = KvChunk(p.head_dim);
      if (blockIdx.x < p.kv_heads * ((pos + chunk) / chunk)) StageKvAsync(p, L, pos, blockIdx.x, kv_s);
    }
    GemvPhase<kW, GemvEpilogue::kStore, false>(PhaseWeights(p, act, wp),
                                               PhaseIo{act.h, ep.of(k0), Out::kLL, ep.of(k0 + 1)}, L.attn_norm,
                                               p.norm_type, p.eps, smem, norm_s, scratch, false);
    Stamp(p.timeline, k0 + 1);
    AttentionPhase(p, L, pos, act, ep.of(k0 + 1), ep.of(k0 + 2), smem, kv_s, merge_counters, ws_ml, ws_acc,
                   max_chunks, probe != nullptr ? probe + l * kPersistentProbeSlots : nullptr);
    Stamp(p.timeline, k0 + 2);
    PrefetchPhase(p, wp + 3);
    GemvPhase<kW, GemvEpilogue::kAddTo, false>(
        PhaseWeights(p, act, wp + 1), PhaseIo{act.attn, ep.of(k0 + 2), Out::kResidual, ep.of(k0 + 3), act.h, h_own, h0},
        nullptr, p.norm_type, p.eps, smem, norm_s, scratch, false);
    Stamp(p.timeline, k0 + 3);
    PrefetchPhase(p, wp + 4);
    GemvPhase<kW, GemvEpilogue::kSwiGlu, false>(PhaseWeights(p, act, wp + 2),
                                                PhaseIo{act.h, ep.of(k0 + 3), Out::kLL, ep.of(k0 + 4)}, L.ffn_norm,
                                                p.norm_type, p.eps, smem, norm_s, scratch, false);
    Stamp(p.timeline, k0 + 4);
    PrefetchPhase(p, wp + 5);
    GemvPhase<kW, GemvEpilogue::kAddTo, false>(
        PhaseWeights(p, act, wp + 3), PhaseIo{act.act, ep.of(k0 + 4), Out::kResidual, ep.of(k0 + 5), act.h, h_own, h0},
        nullptr, p.norm_type, p.eps, smem, norm_s, scratch, false);
    Stamp(p.timeline, k0 + 5);
  }
  GemvPhase<kW, GemvEpilogue::kStore, true>(PhaseWeights(p, act, 4 * p.n_layers),
                                            PhaseIo{act.h, ep.of(5 * p.n_layers), Out::kPlain, 0u}, p.out_norm,
                                            p.norm_type, p.eps, smem, norm_s, scratch, p.l2_prefetch);
  Stamp(p.timeline, 5 * p.n_layers + 1);
}

constexpr size_t kMaxSmemBytes =
    sizeof(float) * ((kFusedGemvMaxIn > kAttnSmemFloats ? kFusedGemvMaxIn : kAttnSmemFloats) + 2 * kFusedGemvMaxIn +
                     kKvStageFloats);

// Dynamic shared memory: the staged activation (or the attention's buffers), the norm weights, the
// block's rows of h (at most hidden of them), the attention's staged cache rows.
size_t SmemBytes(const PersistentDecodeParams& p) {
  const int widest = detail::StagedFloats(std::max({p.hidden, p.heads * p.head_dim, p.ffn}));
  return sizeof(float) * (static_cast<size_t>(std::max(widest, kAttnSmemFloats)) + 2 * static_cast<size_t>(p.hidden) +
                          kKvStageFloats);
}

template <ElemType kW>
cudaError_t ConfigureOnce() {
  static const cudaError_t e = [] {
    const cudaError_t r = cudaFuncSetAttribute(PersistentDecodeKernel<kW>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kMaxSmemBytes));
    if (r != cudaSuccess) (void)cudaGetLastError();
    return r;
  }();
  return e;
}

using KernelFn = void (*)(PersistentDecodeParams, const int32_t*, int32_t, int32_t, unsigned long long);

KernelFn KernelFor(ElemType w) {
  if (w == ElemType::kBF16) return PersistentDecodeKernel<ElemType::kBF16>;
  if (w == ElemType::kF16) return PersistentDecodeKernel<ElemType::kF16>;
  return nullptr;
}

cudaError_t Configure(ElemType w) {
  if (w == ElemType::kBF16) return ConfigureOnce<ElemType::kBF16>();
  if (w == ElemType::kF16) return ConfigureOnce<ElemType::kF16>();
  return cudaErrorInvalidValue;
}

}  // namespace

size_t PersistentDecodeWorkspaceBytes(const PersistentDecodeParams& p) { return WorkspaceLayout(p).total; }

const char* PersistentDecodeUnsupported(const PersistentDecodeParams& p) {
  const auto fits = [](int in) { return in > 0 && in % 8 == 0 && in <= kFusedGemvMaxIn; };
  if (p.n_layers <= 0 || p.vocab <= 0 || p.capacity <= 0) return "empty model or cache";
  if (!fits(p.hidden) || !fits(p.heads * p.head_dim) || !fits(p.ffn)) {
    return "hidden, q_dim and ffn must be multiples of 8 up to 8192";
  }
  if (p.head_dim <= 0 || p.head_dim % 4 != 0 || p.head_dim > kMaxHeadDim) {
    return "head_dim must be a multiple of 4 up to 256";
  }
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.heads / p.kv_heads > kWarps) {
    return "heads / kv_heads must be a whole number up to 8";
  }
  if (p.w_type != ElemType::kBF16 && p.w_type != ElemType::kF16) return "weights must be bf16 or f16";
  return "";
}

int PersistentDecodeBlocks(const PersistentDecodeParams& p) {
  if (*PersistentDecodeUnsupported(p) != '\0' || Configure(p.w_type) != cudaSuccess) return 0;
  int device = 0, coop = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, KernelFor(p.w_type), kThreads, SmemBytes(p)) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return coop != 0 && per_sm >= 1 ? sms : 0;
}

cudaError_t LaunchPersistentDecode(const PersistentDecodeParams& p, const int32_t* device_token,
                                   int32_t host_token, int32_t pos, uint64_t launch_index, int blocks,
                                   cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(*PersistentDecodeUnsupported(p) == '\0' && blocks > 0);
  SPECGEN_KERNEL_REQUIRE(pos >= 0 && pos < p.capacity);
  SPECGEN_KERNEL_REQUIRE(p.layers && p.rope_table && p.embedding && p.out_norm && p.head && p.logits &&
                         p.workspace);
  SPECGEN_KERNEL_REQUIRE(p.workspace_bytes >= PersistentDecodeWorkspaceBytes(p));
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(p.head) % 16 == 0);
  const cudaError_t configured = Configure(p.w_type);
  if (configured != cudaSuccess) return configured;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = SmemBytes(p);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  // Every block resident at once: blocks wait for each other's activations, so none may wait for a
  // multiprocessor that a waiting block holds.
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, KernelFor(p.w_type), p, device_token, host_token, pos,
                            static_cast<unsigned long long>(launch_index));
}

}  // namespace specgen::kernels
