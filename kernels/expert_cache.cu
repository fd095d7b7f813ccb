#include "kernels/device_util.cuh"
#include "kernels/expert_cache.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = kExpertCacheMaxExperts;  // the decision block: one thread an expert
static_assert(kThreads == 1024, "BlockExclusiveScan assumes 32 full warps");

// Exclusive prefix sum of v over the block in thread order; *total gets the sum. Every thread calls it.
__device__ int BlockExclusiveScan(int v, int* total) {
  __shared__ int warp_sum[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sum[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = warp_sum[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sum[lane] = w;
  }
  __syncthreads();
  const int before = (warp > 0 ? warp_sum[warp - 1] : 0) + x - v;
  *total = warp_sum[31];
  __syncthreads();  // warp_sum is reused by the next call
  return before;
}

// One block of kThreads. Hits are stamped first; the m misses (ascending expert) take the m slots of
// smallest (stamp, index), in ascending index: the m-th smallest stamp T by a radix select over the
// stamps (4 passes of 8 bits), then every slot below T and the lowest-indexed ones at T.
__global__ void __launch_bounds__(kThreads) DecideKernel(ExpertCacheTables c, ExpertCacheLayer l,
                                                         const int32_t* __restrict__ ids, int n_ids) {
  __shared__ int used[kThreads];
  __shared__ int miss_expert[kThreads];
  __shared__ int victim[kThreads];
  __shared__ unsigned hist[256];
  __shared__ unsigned s_prefix;
  __shared__ int s_rank, s_hits;
  const int t = threadIdx.x, experts = l.experts;
  const uint32_t now = c.state->clock + 1;  // thread 0 stores it last, after every read
  used[t] = 0;
  if (t == 0) s_hits = 0;
  __syncthreads();
  for (int i = t; i < n_ids; i += kThreads) used[ids[i]] = 1;
  __syncthreads();
  int32_t* slot_of = c.slot_of + static_cast<int64_t>(l.layer) * c.experts_per_layer;
  int miss = 0;
  if (t < experts && used[t]) {
    const int s = slot_of[t];
    if (s >= 0) {
      c.stamp[s] = now;  // before the victims are chosen: a slot of the union is never one
      atomicAdd(&s_hits, 1);
    } else {
      miss = 1;
    }
  }
  int m;
  const int miss_before = BlockExclusiveScan(miss, &m);  // its barriers publish the stamps too
  if (miss) miss_expert[miss_before] = t;
  if (m > 0) {
    unsigned prefix = 0;
    int rank = m;  // the wanted stamp's rank (1-based) among the stamps that match the prefix
    for (int shift = 24; shift >= 0; shift -= 8) {
      if (t < 256) hist[t] = 0;
      __syncthreads();
      const unsigned high = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
      for (int s = t; s < c.n_slots; s += kThreads) {
        const unsigned st = c.stamp[s];
        if ((st & high) == prefix) atomicAdd(&hist[(st >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (t == 0) {
        int before = 0;
        for (unsigned d = 0; d < 256; ++d) {
          if (before + static_cast<int>(hist[d]) >= rank) {
            s_prefix = prefix | (d << shift);
            s_rank = rank - before;
            break;
          }
          before += static_cast<int>(hist[d]);
        }
      }
      __syncthreads();
      prefix = s_prefix;
      rank = s_rank;
    }
    const unsigned threshold = prefix;  // take every stamp below it and `rank` slots at it
    const int chunk = (c.n_slots + kThreads - 1) / kThreads;
    const int lo = min(t * chunk, c.n_slots), hi = min(lo + chunk, c.n_slots);
    int less = 0, equal = 0;
    for (int s = lo; s < hi; ++s) {
      const unsigned st = c.stamp[s];
      less += st < threshold;
      equal += st == threshold;
    }
    int less_total, equal_total;
    const int less_before = BlockExclusiveScan(less, &less_total);
    int equal_seen = BlockExclusiveScan(equal, &equal_total);
    int pos = less_before + min(equal_seen, rank);
    for (int s = lo; s < hi; ++s) {
      const unsigned st = c.stamp[s];
      if (st < threshold) {
        victim[pos++] = s;
      } else if (st == threshold) {
        if (equal_seen < rank) victim[pos++] = s;
        ++equal_seen;
      }
    }
  }
  __syncthreads();
  int evicted = 0;
  if (t < m) {
    const int s = victim[t], e = miss_expert[t];
    const int old = c.owner[s];
    if (old >= 0) {  // never a key of this union: a missing expert has no slot, a hit's slot is not taken
      c.slot_of[old] = -1;
      evicted = 1;
    }
    c.owner[s] = l.layer * c.experts_per_layer + e;
    slot_of[e] = s;
    c.stamp[s] = now;
    c.fetch_expert[t] = e;
    c.fetch_slot[t] = s;
  }
  int evictions;
  BlockExclusiveScan(evicted, &evictions);  // also the barrier before the tables read slot_of
  if (t < experts && used[t]) {
    const char* base = c.slots + static_cast<size_t>(slot_of[t]) * c.slot_bytes;
    l.gate_table[t] = base + l.gate;
    l.up_table[t] = base + l.up;
    l.down_table[t] = base + l.down;
  }
  if (t == 0) {
    ExpertCacheState* st = c.state;
    st->hits += static_cast<unsigned long long>(s_hits);
    st->misses += static_cast<unsigned long long>(m);
    st->evictions += static_cast<unsigned long long>(evictions);
    st->bytes += static_cast<unsigned long long>(m) * l.stride;
    st->clock = now;
    st->fetches = m;
  }
}

constexpr int kGatherThreads = 512;
constexpr int kGatherVectors = 4;  // 16-byte loads in flight a thread
constexpr size_t kChunk = static_cast<size_t>(kGatherThreads) * kGatherVectors;  // uint4 a block-chunk

// The decision's misses, each `stride` bytes from mapped host memory into its slot, in chunks spread
// over the grid; every load of a chunk is issued before its stores.
__global__ void __launch_bounds__(kGatherThreads) GatherKernel(ExpertCacheTables c, ExpertCacheLayer l) {
  const int m = c.state->fetches;
  const size_t vectors = l.stride / 16;
  const size_t chunks = (vectors + kChunk - 1) / kChunk;
  for (size_t i = blockIdx.x; i < static_cast<size_t>(m) * chunks; i += gridDim.x) {
    const size_t f = i / chunks, first = (i % chunks) * kChunk + threadIdx.x;
    const uint4* src = reinterpret_cast<const uint4*>(l.host + static_cast<size_t>(c.fetch_expert[f]) * l.stride);
    uint4* dst = reinterpret_cast<uint4*>(c.slots + static_cast<size_t>(c.fetch_slot[f]) * c.slot_bytes);
    uint4 v[kGatherVectors];
#pragma unroll
    for (int j = 0; j < kGatherVectors; ++j) {
      const size_t k = first + static_cast<size_t>(j) * kGatherThreads;
      if (k < vectors) v[j] = src[k];
    }
#pragma unroll
    for (int j = 0; j < kGatherVectors; ++j) {
      const size_t k = first + static_cast<size_t>(j) * kGatherThreads;
      if (k < vectors) dst[k] = v[j];
    }
  }
}

}  // namespace

cudaError_t LaunchExpertCacheFetch(const ExpertCacheTables& cache, const ExpertCacheLayer& layer,
                                   const int32_t* ids, int n_ids, int gather_blocks, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(layer.experts >= 1 && layer.experts <= kExpertCacheMaxExperts &&
                         layer.experts <= cache.experts_per_layer);
  SPECGEN_KERNEL_REQUIRE(n_ids >= 1 && (n_ids <= cache.n_slots || layer.experts <= cache.n_slots));
  SPECGEN_KERNEL_REQUIRE(cache.slot_of && cache.owner && cache.stamp && cache.fetch_expert && cache.fetch_slot &&
                         cache.state && cache.slots && ids && layer.host && layer.gate_table && layer.up_table &&
                         layer.down_table);
  SPECGEN_KERNEL_REQUIRE(layer.stride % 16 == 0 && layer.stride <= cache.slot_bytes && cache.slot_bytes % 16 == 0 &&
                         gather_blocks >= 1);
  DecideKernel<<<1, kThreads, 0, stream>>>(cache, layer, ids, n_ids);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  GatherKernel<<<gather_blocks, kGatherThreads, 0, stream>>>(cache, layer);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
