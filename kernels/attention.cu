#include "kernels/attention.cuh"

#include <algorithm>

#include "kernels/cache_elem.cuh"
#include "kernels/device_util.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/warp_norm_rope.cuh"

namespace specgen::kernels {
namespace {

constexpr int kWarps = kAttentionChunk / 32;  // one 32-key tile per warp
constexpr int kG = kAttentionMaxGroup;

template <ElemType kT, int kPer>
__device__ __forceinline__ void LoadRow(const void* base, int64_t offset, float (&v)[kPer]) {
#pragma unroll
  for (int e = 0; e < kPer; ++e) v[e] = detail::CacheLoad<kT>(base, offset + e);
}

// K/V staging for the staged chunk kernel: each warp copies its 32-slot tile into shared memory with
// coalesced 16-byte cp.async (all copies in flight at once), one piece of each row at a time, instead of
// each lane walking its own K row and the warp walking the 32 V rows one dependent load after another.
// Rows are padded by 16 bytes so the per-lane 16-byte reads of a row are free of bank conflicts.
inline constexpr int kPieceMaxBytes = 512;
template <ElemType kT, int D>
struct Staging {
  static constexpr int kElemBytes = kT == ElemType::kF32 ? 4 : 2;
  static constexpr int kRowBytes = D * kElemBytes;
  static constexpr int kPieceBytes = kRowBytes < kPieceMaxBytes ? kRowBytes : kPieceMaxBytes;
  static constexpr int kPieces = kRowBytes / kPieceBytes;
  static constexpr int kPieceElems = kPieceBytes / kElemBytes;
  static constexpr int kStride = kPieceBytes + 16;  // bytes per staged row
  static constexpr int kWarpBytes = 32 * kStride;
  static constexpr int kBlockBytes = kWarps * kWarpBytes;  // dynamic shared memory of a block
};

using detail::CpAsync16;

// Copies bytes [piece * kPieceBytes, +kPieceBytes) of the tile's first `rows` rows (slots t0 ..) of
// kv head kvh into buf (row r at r * kStride); on return the whole warp sees them.
template <ElemType kT, int D>
__device__ __forceinline__ void StagePiece(char* buf, const void* cache, int t0, int rows, int kv_heads,
                                           int kvh, int piece, int lane) {
  using S = Staging<kT, D>;
  constexpr int kCpr = S::kPieceBytes / 16;  // 16-byte copies per row
  const char* base = static_cast<const char*>(cache);
#pragma unroll
  for (int idx = lane; idx < 32 * kCpr; idx += 32) {
    const int r = idx / kCpr, c = idx % kCpr;
    if (r < rows) {
      const int64_t off = (static_cast<int64_t>(t0 + r) * kv_heads + kvh) * S::kRowBytes +
                          piece * S::kPieceBytes + c * 16;
      CpAsync16(buf + r * S::kStride + c * 16, base + off);
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncwarp();
}

// kN consecutive cache elements staged at p (aligned to their size * kN, up to 16 bytes) as fp32.
template <ElemType kT, int kN>
__device__ __forceinline__ void StagedToF32(const char* p, float (&v)[kN]) {
  if constexpr (kT == ElemType::kF32) {
    if constexpr (kN % 4 == 0) {
#pragma unroll
      for (int i = 0; i < kN / 4; ++i) {
        const float4 f = reinterpret_cast<const float4*>(p)[i];
        v[4 * i] = f.x;
        v[4 * i + 1] = f.y;
        v[4 * i + 2] = f.z;
        v[4 * i + 3] = f.w;
      }
    } else if constexpr (kN == 2) {
      const float2 f = *reinterpret_cast<const float2*>(p);
      v[0] = f.x;
      v[1] = f.y;
    } else {
      static_assert(kN == 1);
      v[0] = *reinterpret_cast<const float*>(p);
    }
  } else if constexpr (kN == 1) {  // head_dim 32: one 16-bit element a lane
    v[0] = detail::CacheLoad<kT>(p, 0);
  } else {
    uint32_t w[kN / 2];
    if constexpr (kN == 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(p);
      w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
    } else if constexpr (kN == 4) {
      const uint2 u = *reinterpret_cast<const uint2*>(p);
      w[0] = u.x, w[1] = u.y;
    } else {
      static_assert(kN == 2);
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
    // Little-endian: element 2i is the low half of word i (as LoadRow's CacheLoad(p, 2i)).
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      if constexpr (kT == ElemType::kF16) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
  }
}

// The merge of `chunks` partials (max m_c, sum l_c, unnormalized acc_c) of one output element, in chunk
// order. Shared by the merge kernel and the chunk kernel's single-chunk case, so both give the same bits.
template <typename M, typename L, typename A>
__device__ __forceinline__ float MergePartials(int chunks, M m_at, L l_at, A acc_at) {
  float mm = -INFINITY;
  for (int c = 0; c < chunks; ++c) mm = fmaxf(mm, m_at(c));
  float ll = 0.f, aa = 0.f;
  if (mm != -INFINITY) {
    for (int c = 0; c < chunks; ++c) {
      const float mc = m_at(c);
      if (mc == -INFINITY) continue;
      const float f = expf(mc - mm);
      ll = fmaf(l_at(c), f, ll);
      aa = fmaf(acc_at(c), f, aa);
    }
  }
  return ll > 0.f ? aa / ll : 0.f;
}

// Chunks that hold keys for a batch of n after n_past committed slots.
__device__ __host__ __forceinline__ int ChunksWithKeys(int n_past, int n) {
  return (n_past + n + kAttentionChunk - 1) / kAttentionChunk;
}

// Partial attention of the queries of one (query i, kv head) over one chunk of cache slots.
// grid = (kv_heads, n, chunks), block = kWarps * 32. Writes m, l and the unnormalized acc per query
// head into the workspace. kStaged: K/V tiles staged in shared memory (Staging::kBlockBytes of dynamic
// shared memory; cache pointers 16-byte aligned); else each lane loads from global memory directly.
// Both variants do the same arithmetic in the same order, so their results are bit-identical.
// When a single chunk holds all the keys, the block writes the merged result to `out` itself (the
// merge of one partial, MergePartials) and the merge kernel has nothing to do.
template <ElemType kT, int D, bool kStaged>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionChunkKernel(const float* __restrict__ q, const void* __restrict__ k_cache,
                         const void* __restrict__ v_cache, const uint8_t* __restrict__ mask, int n,
                         int n_past, int heads, int kv_heads, float scale,
                         float* __restrict__ ws_ml, float* __restrict__ ws_acc, int chunks,
                         const int32_t* __restrict__ d_n_past, float* __restrict__ out) {
  constexpr int kPer = D / 32;  // dims per lane in the V accumulation
  using S = Staging<kT, D>;
  __shared__ float q_s[kG][D];
  __shared__ float m_s[kWarps][kG], l_s[kWarps][kG];
  __shared__ float acc_s[kG][D];
  extern __shared__ __align__(16) char stage_s[];
  const int kvh = blockIdx.x, i = blockIdx.y, chunk = blockIdx.z;
  WaitForPrecedingGrid();  // everything read below may come from the previous kernel (PDL)
  LetDependentsLaunch();
  if (d_n_past != nullptr) {  // grid sized for the longest cache: chunks past the keys do nothing
    n_past = *d_n_past;
    if (chunk * kAttentionChunk >= n_past + n) return;
  }
  const int G = heads / kv_heads;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    q_s[e / D][e % D] = q[(static_cast<int64_t>(i) * heads + kvh * G + e / D) * D + e % D];
  }
  __syncthreads();

  const int t0 = chunk * kAttentionChunk + warp * 32;  // the warp's first cache slot
  const int j = t0 + lane;                              // this lane's cache slot
  bool visible = false;
  if (j < n_past) {
    visible = true;
  } else if (j < n_past + n) {
    const int b = j - n_past;
    visible = mask ? mask[i * n + b] != 0 : b <= i;
  }
  // Tile rows that exist in the cache (slots < n_past + n): the only ones ever read.
  const int tile_rows = min(32, max(0, n_past + n - t0));
  char* buf = stage_s + (kStaged ? warp * S::kWarpBytes : 0);
  float s[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) s[g] = 0.f;
  if constexpr (kStaged) {
#pragma unroll
    for (int piece = 0; piece < S::kPieces; ++piece) {
      if (tile_rows > 0) StagePiece<kT, D>(buf, k_cache, t0, tile_rows, kv_heads, kvh, piece, lane);
      if (visible) {
        const char* row = buf + lane * S::kStride;
#pragma unroll 4
        for (int dd = 0; dd < S::kPieceElems; dd += 8) {
          float kv[8];
          StagedToF32<kT, 8>(row + dd * S::kElemBytes, kv);
          const int d = piece * S::kPieceElems + dd;
#pragma unroll
          for (int g = 0; g < kG; ++g) {
            if (g < G) {
#pragma unroll
              for (int e = 0; e < 8; ++e) s[g] = fmaf(q_s[g][d + e], kv[e], s[g]);
            }
          }
        }
      }
      __syncwarp();  // every lane is done with the buffer before it is refilled
    }
  } else if (visible) {
    const int64_t row = (static_cast<int64_t>(j) * kv_heads + kvh) * D;
#pragma unroll 4
    for (int d = 0; d < D; d += 8) {
      float kv[8];
      LoadRow<kT, 8>(k_cache, row + d, kv);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g < G) {
#pragma unroll
          for (int e = 0; e < 8; ++e) s[g] = fmaf(q_s[g][d + e], kv[e], s[g]);
        }
      }
    }
  }
  float m[kG], l[kG], acc[kG][kPer], p[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    const float sg = visible ? s[g] * scale : -INFINITY;
    m[g] = detail::WarpMax(sg);
    p[g] = visible ? expf(sg - m[g]) : 0.f;
    l[g] = detail::WarpSum(p[g]);
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc[g][e] = 0.f;
  }
  // V accumulation: lane owns dims lane*kPer .. +kPer; keys of the tile in slot order.
  const unsigned any = __ballot_sync(0xffffffffu, visible);
  if constexpr (kStaged) {
    // The piece holding this lane's dims (a piece is a whole number of lanes' dims).
    const int my_piece = lane * kPer / S::kPieceElems;
    const int my_off = (lane * kPer - my_piece * S::kPieceElems) * S::kElemBytes;
#pragma unroll
    for (int piece = 0; piece < S::kPieces; ++piece) {
      if (any == 0u) break;
      StagePiece<kT, D>(buf, v_cache, t0, tile_rows, kv_heads, kvh, piece, lane);
      const bool mine = my_piece == piece;
      for (int jj = 0; jj < 32; ++jj) {
        if (!(any >> jj & 1u)) continue;
        float vv[kPer];
        if (mine) {
          StagedToF32<kT, kPer>(buf + jj * S::kStride + my_off, vv);
        } else {
#pragma unroll
          for (int e = 0; e < kPer; ++e) vv[e] = 0.f;
        }
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          const float pj = __shfl_sync(0xffffffffu, p[g], jj);
          if (mine) {
#pragma unroll
            for (int e = 0; e < kPer; ++e) acc[g][e] = fmaf(pj, vv[e], acc[g][e]);
          }
        }
      }
      __syncwarp();
    }
  } else {
    for (int jj = 0; jj < 32; ++jj) {
      if (!(any >> jj & 1u)) continue;
      const int64_t row = (static_cast<int64_t>(warp * 32 + jj + chunk * kAttentionChunk) * kv_heads +
                           kvh) * D + lane * kPer;
      float vv[kPer];
      LoadRow<kT, kPer>(v_cache, row, vv);
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float pj = __shfl_sync(0xffffffffu, p[g], jj);
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[g][e] = fmaf(pj, vv[e], acc[g][e]);
      }
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      m_s[warp][g] = m[g];
      l_s[warp][g] = l[g];
    }
  }
  __syncthreads();
  // Merge the warps' tiles in slot order (warp 0 first), rescaled to the chunk's max.
  float c[kG];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    float mm = -INFINITY;
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, m_s[w][g]);
    c[g] = m[g] == -INFINITY ? 0.f : expf(m[g] - mm);
  }
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        if (g >= G) continue;
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
          float& t = acc_s[g][lane * kPer + e];
          t = fmaf(acc[g][e], c[g], w == 0 ? 0.f : t);
        }
      }
    }
    __syncthreads();
  }
  const bool single = ChunksWithKeys(n_past, n) == 1;
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    const int64_t qh = static_cast<int64_t>(i) * heads + kvh * G + g;
    if (!single) ws_acc[(qh * chunks + chunk) * D + d] = acc_s[g][d];
    if (single || d == 0) {
      float mm = -INFINITY, ll = 0.f;
      for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, m_s[w][g]);
      for (int w = 0; w < kWarps; ++w) {
        if (m_s[w][g] != -INFINITY) ll = fmaf(l_s[w][g], expf(m_s[w][g] - mm), ll);
      }
      if (single) {
        const float a = acc_s[g][d];
        out[qh * D + d] = MergePartials(
            1, [&](int) { return mm; }, [&](int) { return ll; }, [&](int) { return a; });
      } else {
        ws_ml[(qh * chunks + chunk) * 2] = mm;
        ws_ml[(qh * chunks + chunk) * 2 + 1] = ll;
      }
    }
  }
}

// out[i, h, d]: merge the chunk partials in chunk order. grid = (heads, n), block = D.
// With d_n_past, `chunks` is the workspace's stride and only the chunks holding keys are merged (n is
// then the batch size, used to count them), which is the merge of a launch sized for those keys; when
// one chunk holds them all, the chunk kernel has written `out` and this kernel does nothing.
__global__ void AttentionMergeKernel(const float* __restrict__ ws_ml, const float* __restrict__ ws_acc,
                                     float* __restrict__ out, int heads, int stride, int D,
                                     const int32_t* __restrict__ d_n_past, int n) {
  WaitForPrecedingGrid();
  LetDependentsLaunch();
  const int h = blockIdx.x, i = blockIdx.y, d = threadIdx.x;
  const int chunks = d_n_past != nullptr ? ChunksWithKeys(*d_n_past, n) : stride;
  if (chunks == 1) return;
  const int64_t qh = static_cast<int64_t>(i) * heads + h;
  out[qh * D + d] = MergePartials(
      chunks, [&](int c) { return ws_ml[(qh * stride + c) * 2]; },
      [&](int c) { return ws_ml[(qh * stride + c) * 2 + 1]; },
      [&](int c) { return ws_acc[(qh * stride + c) * D + d]; });
}

template <ElemType kT, int D>
cudaError_t LaunchTyped(const float* q, const void* k, const void* v, const uint8_t* mask,
                        float* out, int n, int n_past, int heads, int kv_heads, float scale,
                        float* ws, const int32_t* d_n_past, cudaStream_t stream, bool programmatic) {
  const int chunks = ChunksWithKeys(n_past, n);
  float* ws_ml = ws;
  float* ws_acc = ws + static_cast<size_t>(n) * heads * chunks * 2;
  // The staged kernel needs more than the default 48 KB of dynamic shared memory (raised once per
  // instantiation) and 16-byte aligned caches; otherwise the direct kernel gives the same bits.
  using S = Staging<kT, D>;
  static const cudaError_t staged_ready = [] {
    const cudaError_t e = cudaFuncSetAttribute(AttentionChunkKernel<kT, D, true>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               S::kBlockBytes);
    if (e != cudaSuccess) (void)cudaGetLastError();  // our own failure only: fall back, report nothing
    detail::PreferSharedCarveout(AttentionChunkKernel<kT, D, true>);
    detail::PreferSharedCarveout(AttentionChunkKernel<kT, D, false>);
    detail::PreferSharedCarveout(AttentionMergeKernel);
    return e;
  }();
  const bool aligned =
      reinterpret_cast<uintptr_t>(k) % 16 == 0 && reinterpret_cast<uintptr_t>(v) % 16 == 0;
  const dim3 grid(kv_heads, n, chunks);
  const bool staged = staged_ready == cudaSuccess && aligned;
  cudaError_t e = LaunchDecodeKernel(
      staged ? AttentionChunkKernel<kT, D, true> : AttentionChunkKernel<kT, D, false>, grid,
      dim3(kWarps * 32), staged ? S::kBlockBytes : 0, stream, programmatic, q, k, v, mask, n, n_past,
      heads, kv_heads, scale, ws_ml, ws_acc, chunks, d_n_past, out);
  if (e != cudaSuccess) return e;
  // One chunk for every possible length: the chunk kernel wrote `out`.
  if (chunks == 1) return cudaSuccess;
  return LaunchDecodeKernel(AttentionMergeKernel, dim3(heads, n), dim3(D), 0, stream, programmatic,
                            ws_ml, ws_acc, out, heads, chunks, D, d_n_past, n);
}


// ---- Single-query decode attention (LaunchDecodeAttention) ----

constexpr int kDecWarps = 8;
constexpr int kDecThreads = kDecWarps * 32;

// Bytes before the partials in the decode workspace: one counter per (query, head) of the largest
// batch, rounded to 16. Sized for kDecodeMaxQueries whatever the launch's batch, so that the counters
// stay where they are: a batch of 1 after one of 5 would otherwise lay its partials over counters that
// the next batch of 5 expects at zero (the workspace is zeroed once).
__host__ __device__ __forceinline__ size_t DecodeCounterBytes(int heads) {
  return (static_cast<size_t>(heads) * kDecodeMaxQueries * sizeof(unsigned) + 15) / 16 * 16;
}

// How the decode attention cuts `len` cache slots into chunks (one block each): in units of one batch
// of every warp (kDecWarps x kBatch slots: 128, 128, 64, 32 for D = 32, 64, 128, 256), as few units per chunk as
// keep the chunks at most kDecodeSplits; up to kDecodeWholeUnits units stay one chunk. A batch costs a
// memory round trip and a split the chunks' merge by the head's last block (a counter round trip and
// the partials' reads), about as much: so 2 units are 2 batches in one chunk (the merge would cost what
// it saves), while from 3 units up every warp of a chunk loads its slots in one round trip, with up to 16
// chunks of a head in flight at once. Fixed-size chunks lose both ways: large ones leave a few blocks a
// head whose warps walk their batches one after another, small ones pay a merge at short contexts for
// nothing (docs/experiments.md). 16 chunks rather than 8 (two blocks of at most 128 registers share a
// multiprocessor) halve the batches a warp walks at long contexts. A function of len and D only: the
// reduction order never depends on the grid.
constexpr int kDecodeSplits = 16;
constexpr int kDecodeWholeUnits = 2;
// Slots a warp batch: 32 / (D / 32) (one K/V row's D / 32 elements a lane), at most 16 (D = 32: 16 rows'
// registers and scores, not 32, under the kernel's 128-register bound).
__host__ __device__ constexpr int DecodeBatchSlots(int head_dim) {
  return head_dim >= 64 ? 32 / (head_dim / 32) : 16;
}
__host__ __device__ constexpr int DecodeUnitSlots(int head_dim) { return kDecWarps * DecodeBatchSlots(head_dim); }
__host__ __device__ constexpr int DecodeChunkSlots(int len, int head_dim) {
  const int unit = DecodeUnitSlots(head_dim);
  const int units = (len + unit - 1) / unit;
  return units <= kDecodeWholeUnits ? units * unit : (units + kDecodeSplits - 1) / kDecodeSplits * unit;
}

// grid = (heads, chunks <= kDecodeSplits), block = kDecThreads, dynamic shared memory (kDecWarps + 1) *
// D floats. Block (h, c) takes query head h (kv head h / G) and slots [c * C, min(c * C + C, len)), C =
// DecodeChunkSlots(len, D); warp w the slots c * C + w + 8 i in batches of kBatch (all their K/V loads
// in flight together), with an online softmax (one rescale per batch); lane l holds dims l * kPer ..
// + kPer. The warps' partials are merged in warp order, then (more than one chunk) the chunks' in chunk
// order by the head's last block. One query head a block (not the G heads of a kv head): at a short
// context the block's time is the length of its warps' dependent chains, which G heads a warp made G
// times longer; the G blocks of a kv head read the same K/V rows, mostly from L2.
// With rope.q_raw set (the fused prologue): q is the rotated rope.q_raw, and every block of the chunk
// holding slot n_past normalizes and rotates that slot's K row itself (the same bits); the kv head's
// first block writes it and the V row into the caches, rounded to kT (so the caches are not
// __restrict__), and every block attends over the rounded rows, as a later step reads them.
// Two blocks a multiprocessor (at most 128 registers): a long context's 16 chunks x the heads run in one
// wave.
template <ElemType kT, int D>
__global__ void __launch_bounds__(kDecThreads, 2)
    DecodeAttentionKernel(const float* __restrict__ q, const void* k_cache, const void* v_cache, int max_past,
                          int heads, int kv_heads, float scale, float* __restrict__ ws,
                          unsigned* __restrict__ counters, int chunks, const int32_t* __restrict__ d_n_past,
                          float* __restrict__ out, DecodeRopeAppend rope) {
  constexpr int kPer = D / 32;
  constexpr int kBatch = DecodeBatchSlots(D);  // 16, 16, 8, 4 slots per warp batch for D = 32, 64, 128, 256
  constexpr int kElemBytes = kT == ElemType::kF32 ? 4 : 2;
  extern __shared__ float4 dec_dyn_s[];
  float* acc_s = reinterpret_cast<float*>(dec_dyn_s);  // [kDecWarps][D]
  __shared__ float m_s[kDecWarps], l_s[kDecWarps];
  __shared__ int last_s;
  // blockIdx.z: the query of a batch (LaunchDecodeAttentionBatch; 0 for the single-query launches).
  const int qh = blockIdx.x, chunk = blockIdx.y, t = blockIdx.z;
  const int qt = t * heads + qh;  // the (query, head) row of q, out, the counters and the partials
  const int G = heads / kv_heads, kvh = qh / G;
  const bool writes_rows = qh % G == 0;  // the kv head's first block appends the new K/V rows
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // *d_n_past is set before the previous kernel (the caller's contract) and the cache rows before the
  // launch's first new position were written by earlier launches: both are read before waiting for the
  // previous kernel, so the first batch's K/V loads (from HBM: a token's weights evict them from L2)
  // overlap its end and the prologue below. The new rows (slots `fresh` .. len - 1: this launch's or the
  // previous kernel's), after.
  const int fresh = d_n_past != nullptr ? *d_n_past : max_past;
  const int len = fresh + 1 + t;  // slots the query sees
  const int chunk_slots = DecodeChunkSlots(len, D);
  const int c0 = chunk * chunk_slots;
  if (c0 >= len) return;
  const int end = min(len, c0 + chunk_slots);
  const int n_chunks = (len + chunk_slots - 1) / chunk_slots;
  const char* kb = static_cast<const char*>(k_cache);
  const char* vb = static_cast<const char*>(v_cache);
  const auto row_offset = [&](int j) {
    return ((static_cast<int64_t>(j) * kv_heads + kvh) * D + lane * kPer) * kElemBytes;
  };
  // The warp's current batch of K/V rows, slots j0, j0 + kDecWarps, ...: absent slots (past the chunk,
  // and the new ones, which are placed after the wait) hold zeros. The first batch is loaded here.
  float kr[kBatch][kPer], vr[kBatch][kPer];
  const auto load_row = [&](int j, int b) {
    StagedToF32<kT, kPer>(kb + row_offset(j), kr[b]);
    StagedToF32<kT, kPer>(vb + row_offset(j), vr[b]);
  };
  const auto load_batch = [&](int j0) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = j0 + b * kDecWarps;
      if (j < end && j < fresh) {
        load_row(j, b);
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) kr[b][e] = vr[b][e] = 0.f;
      }
    }
  };
  load_batch(c0 + warp);
  // The fused prologue's constants (norm weights, the position's cos/sin), loaded now: the query on
  // warp 0, K on the last warp, V on the one before (in parallel: each is a chain of loads and
  // reductions).
  const bool fused = rope.q_raw != nullptr;
  const bool k_warp = fused && chunk == n_chunks - 1 && warp == kDecWarps - 1;
  const bool v_warp = fused && chunk == n_chunks - 1 && warp == kDecWarps - 2;
  detail::NormRopeConsts k_consts, q_consts;
  if (fused) {
    const float2* rope_row = rope.rope_table + static_cast<int64_t>(len - 1) * (D / 2);
    if (k_warp) detail::LoadNormRopeConsts(D, rope.k_norm, rope.norm_type, rope_row, &k_consts);
    if (warp == 0) detail::LoadNormRopeConsts(D, rope.q_norm, rope.norm_type, rope_row, &q_consts);
  }
  WaitForPrecedingGrid();  // q and the newest K/V row come from the previous kernels (PDL)
  LetDependentsLaunch();

  // The fused prologue: the rotated query into q_rot (after acc_s), the new K/V rows into k_new / v_new
  // (from which the warp holding the newest slot reads them: no round trip to L2) and, by the kv head's
  // first block, into the caches.
  float* q_rot = acc_s + kDecWarps * D;  // [D]
  __shared__ float k_tmp[D];
  __shared__ __align__(16) float k_new[D], v_new[D];
  if (fused) {
    {
      // The new rows as the cache holds them (rounded to kT): the attention below reads them from
      // k_new / v_new, and must see the values every later step reads from the cache.
      const int64_t row = (static_cast<int64_t>(len - 1) * kv_heads + kvh) * D;
      void* k_dst = const_cast<void*>(k_cache);
      void* v_dst = const_cast<void*>(v_cache);
      float y[detail::kMaxNormRopePer];
      if (k_warp) {
#pragma unroll
        for (int e = 0; e < detail::kMaxNormRopePer; ++e) {
          y[e] = e * 32 + lane < D ? __ldcg(rope.k_raw + kvh * D + e * 32 + lane) : 0.f;
        }
        detail::WarpNormRopeValues(y, D, k_consts, rope.k_norm != nullptr, rope.eps, rope.style, k_tmp,
                                   k_new);
        for (int i = lane; i < D; i += 32) {
          const float k = k_new[i];
          k_new[i] = detail::CacheRound<kT>(k);
          if (writes_rows) detail::CacheStore<kT>(k_dst, row + i, k);
        }
        __syncwarp();
      } else if (v_warp) {
        for (int i = lane; i < D; i += 32) {
          const float v = __ldcg(rope.v_raw + kvh * D + i);
          v_new[i] = detail::CacheRound<kT>(v);
          if (writes_rows) detail::CacheStore<kT>(v_dst, row + i, v);
        }
      } else if (warp == 0) {
#pragma unroll
        for (int e = 0; e < detail::kMaxNormRopePer; ++e) {
          y[e] = e * 32 + lane < D ? __ldcg(rope.q_raw + static_cast<int64_t>(qh) * D + e * 32 + lane) : 0.f;
        }
        detail::WarpNormRopeValues(y, D, q_consts, rope.q_norm != nullptr, rope.eps, rope.style, q_rot,
                                   q_rot);
      }
      __syncthreads();  // the new rows and the rotated query are visible to the whole block
    }
  }

  float qv[kPer];
  StagedToF32<ElemType::kF32, kPer>(
      reinterpret_cast<const char*>((fused ? q_rot : q + static_cast<int64_t>(qt) * D) + lane * kPer), qv);
  float m = -INFINITY, l = 0.f, acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.f;
  for (int j0 = c0 + warp; j0 < end; j0 += kDecWarps * kBatch) {
    if (j0 != c0 + warp) load_batch(j0);  // later batches (long contexts): loaded now
    // The new rows into their batch slots: from shared memory (the fused prologue's one new row) or
    // the cache (written by the previous kernel).
    if (fresh < min(end, j0 + kDecWarps * kBatch)) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int j = j0 + b * kDecWarps;
        if (j < fresh || j >= end) continue;
        if (fused) {  // j == len - 1: one query, one new row
          StagedToF32<ElemType::kF32, kPer>(reinterpret_cast<const char*>(k_new + lane * kPer), kr[b]);
          StagedToF32<ElemType::kF32, kPer>(reinterpret_cast<const char*>(v_new + lane * kPer), vr[b]);
        } else {
          load_row(j, b);
        }
      }
    }
    float sg[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      float part = 0.f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) part = fmaf(qv[e], kr[b][e], part);
      part = detail::WarpSum(part);  // every lane gets the same bits
      sg[b] = j0 + b * kDecWarps < end ? part * scale : -INFINITY;
    }
    float mb = m;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) mb = fmaxf(mb, sg[b]);  // finite: slot j0 exists
    const float corr = expf(m - mb);                        // 0 on the first batch (l, acc are 0)
    l *= corr;
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc[e] *= corr;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const float p = expf(sg[b] - mb);  // 0 for absent slots (their V is 0 too)
      l += p;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[e] = fmaf(p, vr[b][e], acc[e]);
    }
    m = mb;
  }
  // Warp partials to shared memory (a warp without slots leaves m = -inf, l = 0, acc = 0).
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc_s[warp * D + lane * kPer + e] = acc[e];
  __syncthreads();
  // The chunk's result per dim d, warps merged in order (warp 0 holds slot c0, so the max is finite and
  // ll >= 1).
  const int rows = heads * gridDim.z;                          // (query, head) rows
  float* ws_ml = ws;                                          // [rows][chunks][2]
  float* ws_acc = ws + static_cast<size_t>(rows) * chunks * 2;  // [rows][chunks][D]
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float mm = -INFINITY;
    for (int w = 0; w < kDecWarps; ++w) mm = fmaxf(mm, m_s[w]);
    // Branch-free, so that every warp's partials are read at once (a skip per warp made the merge a
    // chain of shared-memory round trips); a warp without slots still adds nothing.
    float ll = 0.f, aa = 0.f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) {
      const float mw = m_s[w];
      const float f = expf(mw - mm);
      const float l_next = fmaf(l_s[w], f, ll), a_next = fmaf(acc_s[w * D + d], f, aa);
      ll = mw == -INFINITY ? ll : l_next;
      aa = mw == -INFINITY ? aa : a_next;
    }
    if (n_chunks == 1) {
      out[static_cast<int64_t>(qt) * D + d] = aa / ll;
    } else {
      ws_acc[(static_cast<int64_t>(qt) * chunks + chunk) * D + d] = aa;
      if (d == 0) {
        ws_ml[(static_cast<int64_t>(qt) * chunks + chunk) * 2] = mm;
        ws_ml[(static_cast<int64_t>(qt) * chunks + chunk) * 2 + 1] = ll;
      }
    }
  }
  if (n_chunks == 1) return;
  // The last of the head's n_chunks blocks to get here merges every chunk, in chunk order.
  __threadfence();  // this thread's partial writes are visible device-wide before the count
  __syncthreads();
  if (threadIdx.x == 0) last_s = atomicAdd(&counters[qt], 1u) == static_cast<unsigned>(n_chunks - 1);
  __syncthreads();
  if (!last_s) return;
  __threadfence();  // the other blocks' partials, counted before our increment, are visible
  // Every chunk's partials are loaded at once (one round trip to L2, not one per chunk), then merged in
  // chunk order.
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const int64_t base = static_cast<int64_t>(qt) * chunks;
    float mc[kDecodeSplits], lc[kDecodeSplits], ac[kDecodeSplits];
#pragma unroll
    for (int c = 0; c < kDecodeSplits; ++c) {
      if (c < n_chunks) {
        mc[c] = __ldcg(&ws_ml[(base + c) * 2]);
        lc[c] = __ldcg(&ws_ml[(base + c) * 2 + 1]);
        ac[c] = __ldcg(&ws_acc[(base + c) * D + d]);
      }
    }
    float mm = -INFINITY;
#pragma unroll
    for (int c = 0; c < kDecodeSplits; ++c) {
      if (c < n_chunks) mm = fmaxf(mm, mc[c]);
    }
    float ll = 0.f, aa = 0.f;
#pragma unroll
    for (int c = 0; c < kDecodeSplits; ++c) {  // every chunk < n_chunks holds keys: its max is finite
      if (c < n_chunks) {
        const float f = expf(mc[c] - mm);
        ll = fmaf(lc[c], f, ll);
        aa = fmaf(ac[c], f, aa);
      }
    }
    out[static_cast<int64_t>(qt) * D + d] = aa / ll;
  }
  if (threadIdx.x == 0) counters[qt] = 0u;  // ready for the next launch (a later kernel)
}

template <ElemType kT, int D>
cudaError_t LaunchDecodeTyped(const float* q, const void* k, const void* v, float* out, int max_past,
                              int heads, int kv_heads, float scale, void* workspace,
                              const int32_t* d_n_past, cudaStream_t stream, bool programmatic,
                              const DecodeRopeAppend& rope, int queries) {
  // acc_s, plus q_rot for the fused prologue: 9 KB for D = 256.
  constexpr size_t kMaxSmem = sizeof(float) * (kDecWarps + 1) * D;
  static const cudaError_t ready = [] {
    const cudaError_t e = cudaFuncSetAttribute(DecodeAttentionKernel<kT, D>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kMaxSmem));
    if (e != cudaSuccess) (void)cudaGetLastError();  // our own failure: only G * D > 48 KB is affected
    detail::PreferSharedCarveout(DecodeAttentionKernel<kT, D>);
    return e;
  }();
  const size_t smem = sizeof(float) * (kDecWarps + (rope.q_raw != nullptr ? 1 : 0)) * D;
  if (smem > 48 * 1024 && ready != cudaSuccess) return ready;
  // Sized for the batch's last query, which sees max_past + queries slots.
  const int chunks =
      std::min(kDecodeSplits, (max_past + queries - 1 + DecodeUnitSlots(D)) / DecodeUnitSlots(D));
  auto* counters = static_cast<unsigned*>(workspace);
  float* ws = reinterpret_cast<float*>(static_cast<char*>(workspace) + DecodeCounterBytes(heads));
  return LaunchDecodeKernel(DecodeAttentionKernel<kT, D>, dim3(heads, chunks, queries), dim3(kDecThreads), smem,
                            stream, programmatic, q, k, v, max_past, heads, kv_heads, scale, ws, counters,
                            chunks, d_n_past, out, rope);
}
}  // namespace

size_t AttentionWorkspaceBytes(int queries, int heads, int max_keys, int head_dim) {
  const size_t chunks = (static_cast<size_t>(max_keys) + kAttentionChunk - 1) / kAttentionChunk;
  return static_cast<size_t>(queries) * heads * chunks * (head_dim + 2) * sizeof(float);
}

cudaError_t LaunchAttention(const float* q, const void* k_cache, const void* v_cache,
                            ElemType kv_type, const uint8_t* mask, float* out, int n, int n_past,
                            int heads, int kv_heads, int head_dim, float scale, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream, const int32_t* d_n_past) {
  return LaunchAttention(q, k_cache, v_cache, kv_type, mask, out, n, n_past, heads, kv_heads, head_dim,
                         scale, workspace, workspace_bytes, stream, d_n_past, false);
}

cudaError_t LaunchAttention(const float* q, const void* k_cache, const void* v_cache,
                            ElemType kv_type, const uint8_t* mask, float* out, int n, int n_past,
                            int heads, int kv_heads, int head_dim, float scale, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream, const int32_t* d_n_past,
                            bool programmatic) {
  SPECGEN_KERNEL_REQUIRE(n >= 1 && n <= kAttentionMaxQueries && n_past >= 0);
  SPECGEN_KERNEL_REQUIRE(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 &&
                         heads / kv_heads <= kAttentionMaxGroup);
  SPECGEN_KERNEL_REQUIRE(head_dim == 64 || head_dim == 128 || head_dim == 256);
  SPECGEN_KERNEL_REQUIRE(detail::IsCacheElemType(kv_type));
  SPECGEN_KERNEL_REQUIRE(q && k_cache && v_cache && out && workspace);
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >=
                         AttentionWorkspaceBytes(n, heads, n_past + n, head_dim));
  float* ws = static_cast<float*>(workspace);
#define SPECGEN_ATTN_CASE(T, D)                                                                    \
  if (kv_type == T && head_dim == D)                                                               \
    return LaunchTyped<T, D>(q, k_cache, v_cache, mask, out, n, n_past, heads, kv_heads, scale, ws, \
                             d_n_past, stream, programmatic);
  SPECGEN_ATTN_CASE(ElemType::kF32, 64)
  SPECGEN_ATTN_CASE(ElemType::kF32, 128)
  SPECGEN_ATTN_CASE(ElemType::kF32, 256)
  SPECGEN_ATTN_CASE(ElemType::kBF16, 64)
  SPECGEN_ATTN_CASE(ElemType::kBF16, 128)
  SPECGEN_ATTN_CASE(ElemType::kBF16, 256)
  SPECGEN_ATTN_CASE(ElemType::kF16, 64)
  SPECGEN_ATTN_CASE(ElemType::kF16, 128)
  SPECGEN_ATTN_CASE(ElemType::kF16, 256)
#undef SPECGEN_ATTN_CASE
  return cudaErrorInvalidValue;
}

size_t DecodeAttentionWorkspaceBytes(int heads, int kv_heads, int max_keys, int head_dim, int queries) {
  (void)max_keys;
  (void)kv_heads;
  const size_t chunks = kDecodeSplits;  // at most, whatever the length
  const int rows = heads * queries;
  return DecodeCounterBytes(heads) + static_cast<size_t>(rows) * chunks * (head_dim + 2) * sizeof(float);
}

namespace {

cudaError_t DecodeAttention(const float* q, const void* k_cache, const void* v_cache, ElemType kv_type,
                            float* out, int max_past, int heads, int kv_heads, int head_dim, float scale,
                            void* workspace, size_t workspace_bytes, const int32_t* d_n_past,
                            cudaStream_t stream, bool programmatic, const DecodeRopeAppend& rope,
                            int queries = 1) {
  SPECGEN_KERNEL_REQUIRE(max_past >= 0 && queries >= 1 && queries <= kDecodeMaxQueries);
  SPECGEN_KERNEL_REQUIRE(queries == 1 || rope.q_raw == nullptr);
  SPECGEN_KERNEL_REQUIRE(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 &&
                         heads / kv_heads <= kAttentionMaxGroup);
  SPECGEN_KERNEL_REQUIRE(DecodeAttentionTakes(head_dim));
  SPECGEN_KERNEL_REQUIRE(detail::IsCacheElemType(kv_type));
  SPECGEN_KERNEL_REQUIRE((q || rope.q_raw) && k_cache && v_cache && out && workspace);
  SPECGEN_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(v_cache) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(workspace) % 16 == 0);
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >=
                         DecodeAttentionWorkspaceBytes(heads, kv_heads, max_past + queries, head_dim, queries));
#define SPECGEN_DEC_CASE(T, D)                                                                       \
  if (kv_type == T && head_dim == D)                                                                 \
    return LaunchDecodeTyped<T, D>(q, k_cache, v_cache, out, max_past, heads, kv_heads, scale,       \
                                   workspace, d_n_past, stream, programmatic, rope, queries);
  SPECGEN_DEC_CASE(ElemType::kF32, 32)
  SPECGEN_DEC_CASE(ElemType::kF32, 64)
  SPECGEN_DEC_CASE(ElemType::kF32, 128)
  SPECGEN_DEC_CASE(ElemType::kF32, 256)
  SPECGEN_DEC_CASE(ElemType::kBF16, 32)
  SPECGEN_DEC_CASE(ElemType::kBF16, 64)
  SPECGEN_DEC_CASE(ElemType::kBF16, 128)
  SPECGEN_DEC_CASE(ElemType::kBF16, 256)
  SPECGEN_DEC_CASE(ElemType::kF16, 32)
  SPECGEN_DEC_CASE(ElemType::kF16, 64)
  SPECGEN_DEC_CASE(ElemType::kF16, 128)
  SPECGEN_DEC_CASE(ElemType::kF16, 256)
#undef SPECGEN_DEC_CASE
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchDecodeAttention(const float* q, const void* k_cache, const void* v_cache,
                                  ElemType kv_type, float* out, int max_past, int heads, int kv_heads,
                                  int head_dim, float scale, void* workspace, size_t workspace_bytes,
                                  const int32_t* d_n_past, cudaStream_t stream, bool programmatic) {
  SPECGEN_KERNEL_REQUIRE(q != nullptr);
  return DecodeAttention(q, k_cache, v_cache, kv_type, out, max_past, heads, kv_heads, head_dim, scale,
                         workspace, workspace_bytes, d_n_past, stream, programmatic, DecodeRopeAppend{});
}

cudaError_t LaunchDecodeAttention(const DecodeRopeAppend& rope, void* k_cache, void* v_cache, ElemType kv_type,
                                  float* out, int max_past, int heads, int kv_heads, int head_dim, float scale,
                                  void* workspace, size_t workspace_bytes, const int32_t* d_n_past,
                                  cudaStream_t stream, bool programmatic) {
  SPECGEN_KERNEL_REQUIRE(rope.q_raw && rope.k_raw && rope.v_raw && rope.rope_table);
  SPECGEN_KERNEL_REQUIRE((rope.q_norm == nullptr) == (rope.k_norm == nullptr));
  return DecodeAttention(nullptr, k_cache, v_cache, kv_type, out, max_past, heads, kv_heads, head_dim,
                         scale, workspace, workspace_bytes, d_n_past, stream, programmatic, rope);
}

cudaError_t LaunchDecodeAttentionBatch(const float* q, const void* k_cache, const void* v_cache,
                                       ElemType kv_type, float* out, int n_past, int queries, int heads,
                                       int kv_heads, int head_dim, float scale, void* workspace,
                                       size_t workspace_bytes, cudaStream_t stream, const int32_t* d_n_past) {
  SPECGEN_KERNEL_REQUIRE(q != nullptr);
  return DecodeAttention(q, k_cache, v_cache, kv_type, out, n_past, heads, kv_heads, head_dim, scale, workspace,
                         workspace_bytes, d_n_past, stream, ProgrammaticLaunchOnCurrentDevice(),
                         DecodeRopeAppend{}, queries);
}

}  // namespace specgen::kernels
