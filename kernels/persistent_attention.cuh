// The attention phase of the persistent decode kernel (persistent_decode.cu): per work item (kv head,
// chunk of cache slots) the new K/V row is appended, the chunk's committed rows are staged in shared
// memory (cp.async, started while the QKV projection runs), and the kv head's query heads attend over
// them with an online softmax. Included from that one translation unit only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/persistent_common.cuh"
#include "kernels/persistent_decode.cuh"
#include "kernels/warp_norm_rope.cuh"

namespace specgen::kernels::persistent {

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

using detail::CpAsync16;

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

}  // namespace specgen::kernels::persistent
