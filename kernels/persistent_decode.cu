#include "kernels/persistent_decode.cuh"

#include <algorithm>

#include "kernels/decode_fused.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gemv_rows.cuh"
#include "kernels/warp_norm_rope.cuh"

namespace specgen::kernels {
namespace {

using detail::LoadBatch;
using detail::RowDots;
using detail::RowOf;
using detail::Segments;
using detail::PrefetchL2;

// One block of 256 threads per multiprocessor, with up to 255 registers per thread: with 512 threads
// (128 registers) the fused phases spilled ~2 KB per thread; 8 warps keep 32 KB of weight loads in
// flight per multiprocessor, and the L2 prefetch keeps HBM busy beyond that.
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Output-head rows a warp prefetches into L2 ahead of the row it computes (x kWarps rows per block:
// 64 rows = 128 KB per multiprocessor for a 1024-wide head, ~17 MB in flight over 132 of them).
constexpr int kHeadAhead = 8;
constexpr int kMaxHeadDim = 256;

// ---- activations with their epoch (no grid barrier) ----

// Every activation a phase hands to the next (h, q, k, v, attn, act) is stored as 8-byte pairs
// {value bits, epoch}, written with one 8-byte store, which is single-copy atomic: a reader that sees
// the epoch it expects has the value written with it, with no fence and no barrier (the low-latency
// protocol of NCCL's LL). Each phase of a launch has its own epoch, so a consumer polls exactly the
// elements it needs until they carry the producing phase's epoch: a phase starts as soon as its inputs
// exist, and a layer costs one global round trip per phase instead of a barrier's two plus a read.
// Reuse is safe without barriers because every phase's output depends on all of the inputs of the
// phase before that overwrote the same buffer (e.g. h is rewritten by the O projection only after
// every attention item, hence every QKV block, has finished reading the h it started from).
__device__ __forceinline__ void StoreLL(uint2* p, float v, unsigned epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(epoch)
               : "memory");
}
__device__ __forceinline__ uint2 LoadPair(const uint2* p) {
  uint2 r;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p) : "memory");
  return r;
}
__device__ __forceinline__ uint4 LoadTwoPairs(const uint4* p) {
  uint4 r;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p)
               : "memory");
  return r;
}
// The value of a pair once it carries `epoch` (`first`: a load already issued for it).
__device__ __forceinline__ float AwaitPair(const uint2* p, uint2 first, unsigned epoch) {
  while (first.y != epoch) first = LoadPair(p);
  return __uint_as_float(first.x);
}

// xs[StagedIndex(i)] = the value of x[i] once it carries `epoch`, for i < in (even), by the whole
// block. Each thread issues up to 4 loads of two pairs before checking any (polling one element after
// another would cost one round trip each), then re-polls only what was not there yet. No barrier at
// the end.
__device__ __forceinline__ void AwaitStage(const uint2* x, unsigned epoch, int in, float* xs) {
  const uint4* x4 = reinterpret_cast<const uint4*>(x);
  const int n4 = in / 2;
  for (int base = threadIdx.x; base < n4; base += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n4) v[j] = LoadTwoPairs(x4 + i);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * blockDim.x;
      if (i < n4) {
        while (v[j].y != epoch || v[j].w != epoch) v[j] = LoadTwoPairs(x4 + i);
        xs[detail::StagedIndex(2 * i)] = __uint_as_float(v[j].x);
        xs[detail::StagedIndex(2 * i + 1)] = __uint_as_float(v[j].z);
      }
    }
  }
}

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Phase k of launch n writes its outputs with epoch n * PersistentDecodePhases + k + 1 (32 bits:
// equal epochs are 2^32 phases apart, while every buffer is rewritten every layer). Phases: 0 the
// embedding; per layer l: 1 + 5l QKV, 2 + 5l attention, 3 + 5l O, 4 + 5l gate/up, 5 + 5l down.
struct Epochs {
  unsigned base;
  __device__ __forceinline__ unsigned of(int phase) const { return base + static_cast<unsigned>(phase) + 1u; }
};

// Measurement hook (PersistentDecodeParams::timeline): thread 0 of each block stamps the end of its
// k-th phase at [k * (blocks + 1) + block].
__device__ __forceinline__ void Stamp(unsigned long long* timeline, int k) {
  if (timeline != nullptr) {
    __syncthreads();
    if (threadIdx.x == 0) timeline[static_cast<size_t>(k) * (gridDim.x + 1) + blockIdx.x] = GlobalTimer();
  }
}

// Finer measurement inside a layer, block 0 only (see PersistentDecodeParams::timeline): `probe` is
// the layer's kPersistentProbeSlots stamps, or null.
__device__ __forceinline__ void Probe(unsigned long long* probe, int slot) {
  if (probe != nullptr && blockIdx.x == 0) {
    __syncthreads();
    if (threadIdx.x == 0) probe[slot] = GlobalTimer();
  }
}

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

// The epoch-tagged activations of a launch, in the workspace (see WorkspaceLayout).
struct Activations {
  uint2 *h, *q, *k, *v, *attn, *act;
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

// ---- attention phase ----

constexpr int kMaxPer = detail::kMaxNormRopePer;  // head dims per lane at most
constexpr int kSlotBatch = 4;                      // cache slots per warp batch of the online softmax
static_assert(kMaxHeadDim == detail::kMaxNormRopeDim);

// One warp: dst[0..D) = RoPE(RmsNorm(src)) (detail::WarpNormRopeValues), src read as activation pairs of
// the given epoch (all of the lane's loads in flight before the first check).
__device__ __noinline__ void WarpNormRope(const uint2* src, unsigned epoch, const void* norm_w, ElemType norm_type,
                                          float eps, int D, const float2* rope, RopeStyle style, float* tmp,
                                          float* dst) {
  const int lane = threadIdx.x & 31, per = (D + 31) / 32;
  uint2 raw[kMaxPer];
#pragma unroll
  for (int e = 0; e < kMaxPer; ++e) {
    const int i = e * 32 + lane;
    if (e < per && i < D) raw[e] = LoadPair(src + i);
  }
  float y[kMaxPer];
#pragma unroll
  for (int e = 0; e < kMaxPer; ++e) {
    const int i = e * 32 + lane;
    y[e] = e < per && i < D ? AwaitPair(src + i, raw[e], epoch) : 0.f;
  }
  detail::WarpNormRopeValues(y, D, norm_w, norm_type, eps, rope, style, tmp, dst);
}

// Shared memory of the attention phase, in floats: per warp its rotated query and its partial
// accumulator (kMaxHeadDim each), then the new key's staging row, m and l per warp.
constexpr int kAttnSmemFloats = kWarps * kMaxHeadDim * 2 + kMaxHeadDim + 2 * kWarps;
// The staged K and V rows of one work item: [2][chunk][head_dim] floats, 64 KB.
constexpr int kKvStageFloats = 16 * 1024;

// Cache slots per attention work item: as many as the K/V staging holds, at most 128.
__host__ __device__ __forceinline__ int KvChunk(int head_dim) {
  const int fit = kKvStageFloats / (2 * head_dim);
  return fit < 128 ? fit : 128;
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// Starts copying the committed cache rows (slots before pos) of work item `item` into kv_s by the
// whole block (16-byte cp.async, all in flight at once; cp.async.wait_all + a block barrier before
// use). They were written by earlier launches and never change during this one, so the copy can start
// long before the item's own inputs exist (the kernel starts it before the layer's QKV projection).
__device__ __forceinline__ void StageKvAsync(const PersistentDecodeParams& p, const PersistentLayer& L, int pos,
                                             int item, float* kv_s) {
  const int D = p.head_dim, chunk = KvChunk(D), n_chunks = (pos + 1 + chunk - 1) / chunk;
  const int kvh = item / n_chunks, c0 = (item % n_chunks) * chunk, stop = min(pos, c0 + chunk);
  const int64_t kv_dim = static_cast<int64_t>(p.kv_heads) * D;
  const int pieces = D / 4;  // 16-byte pieces of one row of one kv head
  const int total = (stop - c0) * pieces;
  for (int e = threadIdx.x; e < 2 * total; e += blockDim.x) {
    const int which = e / total, r = e % total, slot = c0 + r / pieces, piece = r % pieces;
    const float* src = (which == 0 ? L.k_cache : L.v_cache) + slot * kv_dim + kvh * D + piece * 4;
    CpAsync16(kv_s + (which * chunk + (slot - c0)) * D + piece * 4, src);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// Work item (kv head kvh, chunk c): slots [c * chunk, min(len, c * chunk + chunk)), chunk = KvChunk(D).
// Its committed rows are copied into kv_s (by StageKvAsync, started early for the block's first item),
// the new row (slot pos: k normalized and rotated, v as is) is appended to the cache and to kv_s. The
// G query heads of kvh share the block's warps: warp w serves head g = w / wph (wph = 8 / G warps
// each) and takes the chunk's slots c0 + (w % wph) + wph * i in batches of kSlotBatch, with an online
// softmax; lane l holds dims l, l + 32, ... The warps of a head are merged in warp order; with several
// chunks the kv head's last block to finish merges the chunks in chunk order (a counter in the
// workspace), as the decode attention kernel does. Not inlined (one copy of the code for every layer,
// and for every head_dim up to 256: the dims per lane are a run-time bound).
__device__ __noinline__ void AttentionPhase(const PersistentDecodeParams& p, const PersistentLayer& L, int pos,
                                            const Activations& a, unsigned in_epoch, unsigned out_epoch, float* smem,
                                            float* kv_s, unsigned* counters, float* ws_ml, float* ws_acc,
                                            int max_chunks, unsigned long long* probe) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int D = p.head_dim, per = (D + 31) / 32, G = p.heads / p.kv_heads, wph = kWarps / G;
  const int chunk = KvChunk(D);
  const int64_t kv_dim = static_cast<int64_t>(p.kv_heads) * D;
  const int len = pos + 1, n_chunks = (len + chunk - 1) / chunk;
  const float2* rope = p.rope_table + static_cast<int64_t>(pos) * (D / 2);
  __syncthreads();  // the previous phase's warps are done with the shared memory reused here
  Probe(probe, 0);
  float* q_s = smem;                          // [kWarps][kMaxHeadDim]
  float* acc_s = smem + kWarps * kMaxHeadDim;  // [kWarps][kMaxHeadDim]
  float* k_s = acc_s + kWarps * kMaxHeadDim;   // [kMaxHeadDim]
  float* m_s = k_s + kMaxHeadDim;              // [kWarps]
  float* l_s = m_s + kWarps;                   // [kWarps]
  __shared__ int last_s;
  for (int item = blockIdx.x; item < p.kv_heads * n_chunks; item += gridDim.x) {
    const int kvh = item / n_chunks, c = item % n_chunks;
    const int c0 = c * chunk, end = min(len, c0 + chunk);
    if (item != blockIdx.x) StageKvAsync(p, L, pos, item, kv_s);  // a later item: staged now
    if (c == n_chunks - 1) {  // the chunk holding slot pos appends the new K/V row
      float* k_row = kv_s + (pos - c0) * D;
      float* v_row = kv_s + (chunk + pos - c0) * D;
      if (warp == 0) {
        WarpNormRope(a.k + kvh * D, in_epoch, L.k_norm, p.norm_type, p.eps, D, rope, p.style, k_s, k_row);
        for (int i = lane; i < D; i += 32) L.k_cache[pos * kv_dim + kvh * D + i] = k_row[i];
      } else if (warp == 1) {
        uint2 raw[kMaxPer];
#pragma unroll
        for (int e = 0; e < kMaxPer; ++e) {
          if (e * 32 + lane < D) raw[e] = LoadPair(a.v + kvh * D + e * 32 + lane);
        }
#pragma unroll
        for (int e = 0; e < kMaxPer; ++e) {
          const int i = e * 32 + lane;
          if (i < D) {
            const float v = AwaitPair(a.v + kvh * D + i, raw[e], in_epoch);
            v_row[i] = v;
            L.v_cache[pos * kv_dim + kvh * D + i] = v;
          }
        }
      }
    }
    Probe(probe, 1);
    const int g = warp / wph, sub = warp % wph;
    float* qw = q_s + warp * kMaxHeadDim;
    if (g < G) {
      WarpNormRope(a.q + (kvh * G + g) * D, in_epoch, L.q_norm, p.norm_type, p.eps, D, rope, p.style, qw, qw);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();  // every thread's staged rows and the appended row are visible to the block
    Probe(probe, 2);
    if (g < G) {
      float qv[kMaxPer], acc[kMaxPer];
#pragma unroll
      for (int e = 0; e < kMaxPer; ++e) {
        const int i = e * 32 + lane;
        qv[e] = e < per && i < D ? qw[i] : 0.f;
        acc[e] = 0.f;
      }
      float m = -INFINITY, l = 0.f;
      for (int j0 = c0 + sub; j0 < end; j0 += wph * kSlotBatch) {
        float sg[kSlotBatch];
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
          const int j = j0 + b * wph;
          float part = 0.f;
#pragma unroll
          for (int e = 0; e < kMaxPer; ++e) {
            const int i = e * 32 + lane;
            if (e < per && i < D && j < end) part = fmaf(qv[e], kv_s[(j - c0) * D + i], part);
          }
          part = detail::WarpSum(part);
          sg[b] = j < end ? part * p.scale : -INFINITY;
        }
        float mb = m;
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) mb = fmaxf(mb, sg[b]);  // finite: slot j0 exists
        const float corr = expf(m - mb);                            // 0 on the first batch
        l *= corr;
#pragma unroll
        for (int e = 0; e < kMaxPer; ++e) acc[e] *= corr;
#pragma unroll
        for (int b = 0; b < kSlotBatch; ++b) {
          const int j = j0 + b * wph;
          const float pb = expf(sg[b] - mb);  // 0 for absent slots
          l += pb;
          if (j < end) {
#pragma unroll
            for (int e = 0; e < kMaxPer; ++e) {
              const int i = e * 32 + lane;
              if (e < per && i < D) acc[e] = fmaf(pb, kv_s[(chunk + j - c0) * D + i], acc[e]);
            }
          }
        }
        m = mb;
      }
      if (lane == 0) {
        m_s[warp] = m;
        l_s[warp] = l;
      }
#pragma unroll
      for (int e = 0; e < kMaxPer; ++e) {
        const int i = e * 32 + lane;
        if (e < per && i < D) acc_s[warp * kMaxHeadDim + i] = acc[e];
      }
    }
    __syncthreads();
    Probe(probe, 3);
    // The chunk's result per (head g, dim d): the head's warps merged in order (its first warp holds
    // slot c0, so the max is finite and the sum >= 1).
    for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
      const int gg = e / D, d = e % D;
      float mm = -INFINITY;
#pragma unroll 1
      for (int s = 0; s < wph; ++s) mm = fmaxf(mm, m_s[gg * wph + s]);
      float ll = 0.f, aa = 0.f;
#pragma unroll 1
      for (int s = 0; s < wph; ++s) {
        const float mw = m_s[gg * wph + s];
        if (mw == -INFINITY) continue;
        const float f = expf(mw - mm);
        ll = fmaf(l_s[gg * wph + s], f, ll);
        aa = fmaf(acc_s[(gg * wph + s) * kMaxHeadDim + d], f, aa);
      }
      const int64_t qh = static_cast<int64_t>(kvh) * G + gg;
      if (n_chunks == 1) {
        StoreLL(a.attn + qh * D + d, aa / ll, out_epoch);
      } else {
        ws_acc[(qh * max_chunks + c) * D + d] = aa;
        if (d == 0) {
          ws_ml[(qh * max_chunks + c) * 2] = mm;
          ws_ml[(qh * max_chunks + c) * 2 + 1] = ll;
        }
      }
    }
    if (n_chunks > 1) {
      // The last of the kv head's chunks to get here merges them all, in chunk order.
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) last_s = atomicAdd(&counters[kvh], 1u) == static_cast<unsigned>(n_chunks - 1);
      __syncthreads();
      if (last_s) {
        __threadfence();
        for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
          const int gg = e / D, d = e % D;
          const int64_t qh = static_cast<int64_t>(kvh) * G + gg;
          float mm = -INFINITY;
#pragma unroll 1
          for (int cc = 0; cc < n_chunks; ++cc) mm = fmaxf(mm, __ldcg(&ws_ml[(qh * max_chunks + cc) * 2]));
          float ll = 0.f, aa = 0.f;
#pragma unroll 1
          for (int cc = 0; cc < n_chunks; ++cc) {
            const float f = expf(__ldcg(&ws_ml[(qh * max_chunks + cc) * 2]) - mm);
            ll = fmaf(__ldcg(&ws_ml[(qh * max_chunks + cc) * 2 + 1]), f, ll);
            aa = fmaf(__ldcg(&ws_acc[(qh * max_chunks + cc) * D + d]), f, aa);
          }
          StoreLL(a.attn + qh * D + d, aa / ll, out_epoch);
        }
        if (threadIdx.x == 0) counters[kvh] = 0u;  // ready for the next layer
      }
    }
    __syncthreads();  // shared memory (and kv_s) is reused by the next item
    Probe(probe, 4);
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
