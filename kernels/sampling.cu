#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <mutex>

#include "engine/sampling/keyed_random.h"
#include "kernels/device_util.cuh"
#include "kernels/sampling.cuh"
#include "kernels/sampling_common.cuh"

namespace specgen::kernels {
namespace {

using detail::BlockBest;
using detail::Better;
using detail::Bits;
using detail::Mass;
using detail::WarpBest;

constexpr int kProcThreads = 1024;
constexpr int kBuckets = 2048;            // 11-bit radix digits: bits 31..21, 20..10, 9..0
// Which ids survive the filters applied so far: top-k and top-p each keep ids whose bits are above
// a threshold, plus ties at it up to an id cut-off; min-p keeps w >= min_p.
struct Filter {
  bool k_on, p_on, m_on;
  uint32_t k_thr, p_thr;
  int k_cut, p_cut;
  float min_p;
  __device__ bool Kept(float w, int i) const {
    const uint32_t b = Bits(w);
    if (k_on && !(b > k_thr || (b == k_thr && i <= k_cut))) return false;
    if (p_on && !(b > p_thr || (b == p_thr && i <= p_cut))) return false;
    if (m_on && !(static_cast<double>(w) >= static_cast<double>(min_p))) return false;
    return true;
  }
};

// One radix-select pass's choice, shared by the one-block and the cluster kernels: with the pass's
// histogram in sh.hist, thread j owns buckets 2047-2j and 2046-2j (descending), so an exclusive scan
// gives the measure above each bucket; the bucket holding `target` goes to sh.sel_digit and the
// measure above it to sh.sel_above (visible to every thread on return).
template <int kThreads, typename Shared>
__device__ __forceinline__ void SelectBucket(unsigned long long above, unsigned long long target,
                                             Shared& sh) {
  const int b0 = kBuckets - 1 - 2 * threadIdx.x, b1 = b0 - 1;
  const unsigned long long h0 = sh.hist[b0], h1 = sh.hist[b1];
  unsigned long long excl;
  cub::BlockScan<unsigned long long, kThreads>(sh.scan).ExclusiveSum(h0 + h1, excl);
  const unsigned long long a0 = above + excl, a1 = a0 + h0;
  if (a0 < target && target <= a0 + h0) {
    sh.sel_digit = b0;
    sh.sel_above = a0;
  } else if (a1 < target && target <= a1 + h1) {
    sh.sel_digit = b1;
    sh.sel_above = a1;
  }
  __syncthreads();
}

// The three passes of a radix select over the bits of the kept weights (11, 11 and 10 bits, largest
// first), shared by the one-block and the cluster kernels: build(pass, shift, width, prefix) leaves in
// sh.hist, visible to every thread, the measure of each `width`-bit digit at `shift` over the kept ids
// whose higher bits equal prefix (pass 0: all of them); SelectBucket picks the digit holding target.
// Returns the bits T with measure(bits > T) < target <= measure(bits >= T), *above_out =
// measure(bits > T).
template <int kThreads, typename Shared, typename BuildHistogram>
__device__ __forceinline__ uint32_t RadixPasses(unsigned long long target, unsigned long long* above_out,
                                                Shared& sh, BuildHistogram&& build) {
  uint32_t prefix = 0;
  unsigned long long above = 0;
  const int shifts[3] = {21, 10, 0};
  const int widths[3] = {11, 11, 10};
  for (int pass = 0; pass < 3; ++pass) {
    build(pass, shifts[pass], widths[pass], prefix);
    SelectBucket<kThreads>(above, target, sh);
    prefix = (prefix << widths[pass]) | sh.sel_digit;
    above = sh.sel_above;
    __syncthreads();
  }
  *above_out = above;
  return prefix;
}

struct ProcShared {
  unsigned long long hist[kBuckets];
  typename cub::BlockScan<unsigned long long, kProcThreads>::TempStorage scan;
  double scratch_d[32];
  int scratch_i[32];
  Filter f;
  uint32_t sel_digit;
  unsigned long long sel_above;
  int sel_id;
};

// Radix select over the kept ids' bits, largest first, measured by count (by_mass false) or by
// fixed-point mass: returns the bits T with measure(bits > T) < target <= measure(bits >= T), and
// sets *above = measure(bits > T). Requires target <= total measure.
__device__ uint32_t RadixSelect(const float* w, int vocab, bool by_mass, unsigned long long target,
                                unsigned long long* above_out, ProcShared& sh) {
  const auto build = [&](int pass, int shift, int width, uint32_t prefix) {
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t hi_shift = shift + width;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float wi = w[i];
      if (!sh.f.Kept(wi, i)) continue;
      const uint32_t b = Bits(wi);
      if (pass > 0 && (b >> hi_shift) != prefix) continue;
      const uint32_t digit = (b >> shift) & ((1u << width) - 1u);
      atomicAdd(&sh.hist[digit], by_mass ? static_cast<unsigned long long>(Mass(wi)) : 1ull);
    }
    __syncthreads();
  };
  return RadixPasses<kProcThreads>(target, above_out, sh, build);
}

// The id of the `need`-th kept id (in id order) whose bits equal `thr` (need >= 1; clamped to the
// number of such ids).
__device__ int TieCut(const float* w, int vocab, uint32_t thr, unsigned long long need,
                      ProcShared& sh) {
  const int chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int lo = threadIdx.x * chunk, hi = min(vocab, lo + chunk);
  unsigned long long cnt = 0;
  int last = -1;
  for (int i = lo; i < hi; ++i) {
    if (Bits(w[i]) == thr && sh.f.Kept(w[i], i)) {
      ++cnt;
      last = i;
    }
  }
  unsigned long long excl, total;
  cub::BlockScan<unsigned long long, kProcThreads>(sh.scan).ExclusiveSum(cnt, excl, total);
  if (need > total) need = total;
  if (excl < need && need <= excl + cnt) {
    unsigned long long seen = excl;
    for (int i = lo; i < hi; ++i) {
      if (Bits(w[i]) == thr && sh.f.Kept(w[i], i) && ++seen == need) {
        sh.sel_id = i;
        break;
      }
    }
  }
  if (total == 0 && threadIdx.x == 0) sh.sel_id = last;  // unreachable for a valid threshold
  __syncthreads();
  const int id = sh.sel_id;
  __syncthreads();
  return id;
}

__global__ void __launch_bounds__(kProcThreads)
    ProcessLogitsKernel(const float* __restrict__ logits, int vocab, SamplingConfig cfg,
                        float* __restrict__ probs) {
  __shared__ ProcShared sh;
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float* w = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  // Argmax (ties to the lowest id): greedy's answer, and the max for the softmax.
  double best = 0.0;
  int best_id = -1;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (Better(l[i], i, best, best_id)) {
      best = l[i];
      best_id = i;
    }
  }
  BlockBest(best, best_id, sh.scratch_d, sh.scratch_i);
  if (cfg.temperature <= 0.f) {
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) w[i] = i == best_id ? 1.f : 0.f;
    return;
  }
  const double max_logit = best, inv_t = 1.0 / static_cast<double>(cfg.temperature);
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    w[i] = expf(static_cast<float>((static_cast<double>(l[i]) - max_logit) * inv_t));
  }
  if (threadIdx.x == 0) sh.f = Filter{false, false, false, 0, 0, 0, 0, 0.f};
  __syncthreads();
  if (cfg.top_k > 0 && cfg.top_k < vocab) {
    unsigned long long above;
    const uint32_t thr = RadixSelect(w, vocab, false, cfg.top_k, &above, sh);
    const int cut = TieCut(w, vocab, thr, cfg.top_k - above, sh);
    if (threadIdx.x == 0) {
      sh.f.k_on = true;
      sh.f.k_thr = thr;
      sh.f.k_cut = cut;
    }
    __syncthreads();
  }
  if (cfg.top_p < 1.f) {
    unsigned long long mass = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      if (sh.f.Kept(w[i], i)) mass += Mass(w[i]);
    }
    unsigned long long total;
    cub::BlockScan<unsigned long long, kProcThreads>(sh.scan).ExclusiveSum(mass, mass, total);
    __syncthreads();
    unsigned long long target =
        static_cast<unsigned long long>(ceil(static_cast<double>(cfg.top_p) * total));
    if (target < 1) target = 1;
    if (target > total) target = total;
    unsigned long long above;
    const uint32_t thr = RadixSelect(w, vocab, true, target, &above, sh);
    const unsigned long long m_thr = Mass(__uint_as_float(thr));
    const unsigned long long need = m_thr > 0 ? (target - above + m_thr - 1) / m_thr : 1;
    const int cut = TieCut(w, vocab, thr, need > 0 ? need : 1, sh);
    if (threadIdx.x == 0) {
      sh.f.p_on = true;
      sh.f.p_thr = thr;
      sh.f.p_cut = cut;
    }
    __syncthreads();
  }
  if (cfg.min_p > 0.f && threadIdx.x == 0) {
    sh.f.m_on = true;  // max w is exp(0) = 1 exactly, so the threshold is min_p itself
    sh.f.min_p = cfg.min_p;
  }
  __syncthreads();
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    if (sh.f.Kept(w[i], i)) sum += static_cast<double>(w[i]);
  }
  sum = detail::BlockSum(sum, sh.scratch_d);
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float wi = w[i];
    w[i] = sh.f.Kept(wi, i) ? static_cast<float>(static_cast<double>(wi) / sum) : 0.f;
  }
}

// ---- Logits processing with each row split over a thread-block cluster ----
//
// One cluster of kClusterBlocks blocks per row (Hopper): each block loads its contiguous chunk of the
// row into shared memory once and every later pass (max, exp, the radix-select histograms, tie cuts,
// sums) runs over shared memory; blocks exchange partial results through distributed shared memory
// (DSMEM) between cluster barriers. Logits are read once and probabilities written once. The
// algorithm is the one-block kernel's step for step (same exponentials, same integer histograms,
// same selections), so the kept sets are identical; only the final double sum is added in another
// fixed order (per block, then blocks in rank order), which is still independent of the row count.

namespace cg = cooperative_groups;

constexpr int kClusterBlocks = 8;  // portable cluster size: 2 clusters fit a GPC, 16 rows at once
constexpr int kClusterThreads = 1024;
constexpr int kOwnedBuckets = kBuckets / kClusterBlocks;  // histogram slice each block sums
constexpr int kOwnedBuffers = 3;  // rotating, so a slice is zeroed only after everyone read it

// Scalar exchanges, each with its own slots so no exchange can overwrite one still being read.
enum ClusterPhase : int { kPhaseMax = 0, kPhaseKTies, kPhasePMass, kPhasePTies, kPhaseSum, kPhases };

struct ClusterShared {
  unsigned long long hist[kBuckets];  // this block's histogram, then the cluster's (gathered)
  unsigned long long owned[kOwnedBuffers][kOwnedBuckets];  // cluster sums of this block's slice
  typename cub::BlockScan<unsigned long long, kClusterThreads>::TempStorage scan;
  double scratch_d[32];
  int scratch_i[32];
  unsigned long long scratch_u[32];
  double slot_d[kPhases][kClusterBlocks];
  unsigned long long slot_u[kPhases][kClusterBlocks];
  int slot_i[kPhases][kClusterBlocks];
  uint32_t sel_digit;
  unsigned long long sel_above;
  int sel_id;
};

__device__ __forceinline__ unsigned long long WarpSumU(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ unsigned long long BlockSumU(unsigned long long v, unsigned long long* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = WarpSumU(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  unsigned long long t = lane < nwarps ? scratch[lane] : 0ull;
  t = WarpSumU(t);
  __syncthreads();
  return t;
}

// Every block's (d, u, i) lands in slot [phase][its rank] of every block; returns after the cluster
// barrier, so the slots can be read locally. Every thread of the block must call it.
__device__ void Exchange(cg::cluster_group& cluster, ClusterShared& sh, int phase, double d,
                         unsigned long long u, int i) {
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x < kClusterBlocks) {
    ClusterShared* dst = cluster.map_shared_rank(&sh, threadIdx.x);
    dst->slot_d[phase][rank] = d;
    dst->slot_u[phase][rank] = u;
    dst->slot_i[phase][rank] = i;
  }
  cluster.sync();
}

// The chunk of a row a block holds: ids [base, base + n).
struct Chunk {
  const float* s;  // shared memory copy (logits, then exp weights)
  int base, n;
};

// RadixSelect over the whole row, the cluster sharing histograms: each pass builds the local
// histogram, adds it into the owners' slices (block b owns buckets [b*256, (b+1)*256)), and after the
// barrier every block gathers the full histogram and makes the same selection.
__device__ uint32_t ClusterRadixSelect(cg::cluster_group& cluster, const Chunk& c, const Filter& f,
                                       bool by_mass, unsigned long long target,
                                       unsigned long long* above_out, int* pass_no,
                                       ClusterShared& sh) {
  const auto build = [&](int pass, int shift, int width, uint32_t prefix) {
    const int buf = *pass_no % kOwnedBuffers;
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t hi_shift = shift + width;
    for (int i = threadIdx.x; i < c.n; i += blockDim.x) {
      const float wi = c.s[i];
      const uint32_t b = Bits(wi);
      if (pass > 0 && (b >> hi_shift) != prefix) continue;
      if (!f.Kept(wi, c.base + i)) continue;
      const uint32_t digit = (b >> shift) & ((1u << width) - 1u);
      atomicAdd(&sh.hist[digit], by_mass ? static_cast<unsigned long long>(Mass(wi)) : 1ull);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
      const unsigned long long h = sh.hist[b];
      if (h != 0) {
        ClusterShared* owner = cluster.map_shared_rank(&sh, b / kOwnedBuckets);
        atomicAdd(&owner->owned[buf][b % kOwnedBuckets], h);
      }
    }
    cluster.sync();
    for (int b = threadIdx.x; b < kBuckets; b += blockDim.x) {
      const ClusterShared* owner = cluster.map_shared_rank(&sh, b / kOwnedBuckets);
      sh.hist[b] = owner->owned[buf][b % kOwnedBuckets];
    }
    // The buffer used one pass ago: every block gathered from it before this pass's barrier, and
    // the next adds into it come after the next pass's barrier.
    const int stale = (*pass_no + kOwnedBuffers - 1) % kOwnedBuffers;
    for (int b = threadIdx.x; b < kOwnedBuckets; b += blockDim.x) sh.owned[stale][b] = 0;
    __syncthreads();
    ++*pass_no;
  };
  return RadixPasses<kClusterThreads>(target, above_out, sh, build);
}

// TieCut over the row: the global id of the `need`-th kept id (in id order) whose bits equal `thr`,
// as seen by this block: the exact id in the block that holds it, -1 in blocks after it (none of
// their ties kept), INT_MAX in blocks before it (all kept).
__device__ int ClusterTieCut(cg::cluster_group& cluster, const Chunk& c, const Filter& f,
                             uint32_t thr, unsigned long long need, int phase, ClusterShared& sh) {
  const int per_thread = (c.n + blockDim.x - 1) / blockDim.x;
  const int lo = min(c.n, static_cast<int>(threadIdx.x) * per_thread);
  const int hi = min(c.n, lo + per_thread);
  unsigned long long cnt = 0;
  for (int i = lo; i < hi; ++i) {
    if (Bits(c.s[i]) == thr && f.Kept(c.s[i], c.base + i)) ++cnt;
  }
  unsigned long long excl, block_total;
  cub::BlockScan<unsigned long long, kClusterThreads>(sh.scan).ExclusiveSum(cnt, excl, block_total);
  __syncthreads();
  Exchange(cluster, sh, phase, 0.0, block_total, 0);
  const unsigned rank = cluster.block_rank();
  unsigned long long before = 0, total = 0;
  for (int r = 0; r < kClusterBlocks; ++r) {
    if (r < static_cast<int>(rank)) before += sh.slot_u[phase][r];
    total += sh.slot_u[phase][r];
  }
  if (need > total) need = total;
  if (need <= before) return -1;
  if (need > before + block_total) return INT_MAX;
  const unsigned long long local_need = need - before;
  if (excl < local_need && local_need <= excl + cnt) {
    unsigned long long seen = excl;
    for (int i = lo; i < hi; ++i) {
      if (Bits(c.s[i]) == thr && f.Kept(c.s[i], c.base + i) && ++seen == local_need) {
        sh.sel_id = c.base + i;
        break;
      }
    }
  }
  __syncthreads();
  const int id = sh.sel_id;
  __syncthreads();
  return id;
}

__global__ void __launch_bounds__(kClusterThreads)
    ProcessLogitsClusterKernel(const float* __restrict__ logits, int vocab, int chunk_len,
                               SamplingConfig cfg, float* __restrict__ probs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ float chunk_s[];
  __shared__ ClusterShared sh;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t row = blockIdx.y;
  const float* l = logits + row * vocab;
  float* out = probs + row * vocab;
  const int base = rank * chunk_len;
  const int n = max(0, min(chunk_len, vocab - base));
  float* s = chunk_s;
  for (int b = threadIdx.x; b < kOwnedBuffers * kOwnedBuckets; b += blockDim.x) {
    (&sh.owned[0][0])[b] = 0;
  }
  double best = 0.0;
  int best_id = -1;
#pragma unroll 4
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float x = l[base + i];
    s[i] = x;
    if (Better(x, base + i, best, best_id)) {
      best = x;
      best_id = base + i;
    }
  }
  BlockBest(best, best_id, sh.scratch_d, sh.scratch_i);
  cluster.sync();  // every block of the cluster runs (and has zeroed its slices) before any DSMEM use
  Exchange(cluster, sh, kPhaseMax, best, 0, best_id);
  best = 0.0;
  best_id = -1;
  for (int r = 0; r < kClusterBlocks; ++r) {
    if (Better(sh.slot_d[kPhaseMax][r], sh.slot_i[kPhaseMax][r], best, best_id)) {
      best = sh.slot_d[kPhaseMax][r];
      best_id = sh.slot_i[kPhaseMax][r];
    }
  }
  if (cfg.temperature <= 0.f) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[base + i] = base + i == best_id ? 1.f : 0.f;
    return;
  }
  const double max_logit = best, inv_t = 1.0 / static_cast<double>(cfg.temperature);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    s[i] = expf(static_cast<float>((static_cast<double>(s[i]) - max_logit) * inv_t));
  }
  __syncthreads();
  const Chunk c{s, base, n};
  Filter f{false, false, false, 0, 0, 0, 0, 0.f};
  int pass_no = 0;
  if (cfg.top_k > 0 && cfg.top_k < vocab) {
    unsigned long long above;
    const uint32_t thr =
        ClusterRadixSelect(cluster, c, f, false, cfg.top_k, &above, &pass_no, sh);
    const int cut = ClusterTieCut(cluster, c, f, thr, cfg.top_k - above, kPhaseKTies, sh);
    f.k_on = true;
    f.k_thr = thr;
    f.k_cut = cut;
  }
  if (cfg.top_p < 1.f) {
    unsigned long long mass = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      if (f.Kept(s[i], base + i)) mass += Mass(s[i]);
    }
    mass = BlockSumU(mass, sh.scratch_u);
    Exchange(cluster, sh, kPhasePMass, 0.0, mass, 0);
    unsigned long long total = 0;
    for (int r = 0; r < kClusterBlocks; ++r) total += sh.slot_u[kPhasePMass][r];
    unsigned long long target =
        static_cast<unsigned long long>(ceil(static_cast<double>(cfg.top_p) * total));
    if (target < 1) target = 1;
    if (target > total) target = total;
    unsigned long long above;
    const uint32_t thr = ClusterRadixSelect(cluster, c, f, true, target, &above, &pass_no, sh);
    const unsigned long long m_thr = Mass(__uint_as_float(thr));
    const unsigned long long need = m_thr > 0 ? (target - above + m_thr - 1) / m_thr : 1;
    const int cut = ClusterTieCut(cluster, c, f, thr, need > 0 ? need : 1, kPhasePTies, sh);
    f.p_on = true;
    f.p_thr = thr;
    f.p_cut = cut;
  }
  if (cfg.min_p > 0.f) {
    f.m_on = true;  // max w is exp(0) = 1 exactly, so the threshold is min_p itself
    f.min_p = cfg.min_p;
  }
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (f.Kept(s[i], base + i)) sum += static_cast<double>(s[i]);
  }
  sum = detail::BlockSum(sum, sh.scratch_d);
  Exchange(cluster, sh, kPhaseSum, sum, 0, 0);  // the last DSMEM access: blocks may exit after it
  sum = 0.0;
  for (int r = 0; r < kClusterBlocks; ++r) sum += sh.slot_d[kPhaseSum][r];
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float wi = s[i];
    out[base + i] = f.Kept(wi, base + i) ? static_cast<float>(static_cast<double>(wi) / sum) : 0.f;
  }
#else
  __trap();  // launched only on sm_90+ (ClusterSupport checks the device)
#endif
}

// Whether (and up to which chunk length) the current device runs the cluster kernel; probed once
// per device (function attributes and occupancy are not stream work, so this is capture-safe).
struct ClusterSupport {
  bool ok = false;
  int max_chunk = 0;  // floats of the row one block may hold
};

ClusterSupport ProbeClusterSupport(int device) {
  ClusterSupport s;
  int major = 0, optin = 0, cluster_launch = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  if (major < 9 || !cluster_launch) return s;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, ProcessLogitsClusterKernel) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  const int dyn = (optin - static_cast<int>(attr.sharedSizeBytes)) / 16 * 16;
  if (dyn <= 0 || cudaFuncSetAttribute(ProcessLogitsClusterKernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       dyn) != cudaSuccess) {
    cudaGetLastError();
    return s;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kClusterBlocks, 1, 1);
  config.blockDim = dim3(kClusterThreads, 1, 1);
  config.dynamicSmemBytes = dyn;
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = kClusterBlocks;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  config.attrs = attrs;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, ProcessLogitsClusterKernel, &config) !=
          cudaSuccess ||
      clusters < 1) {
    cudaGetLastError();
    return s;
  }
  s.ok = true;
  s.max_chunk = dyn / static_cast<int>(sizeof(float)) / 4 * 4;
  return s;
}

const ClusterSupport& ClusterSupportFor(int device) {
  constexpr int kMaxDevices = 64;
  static ClusterSupport support[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  static const ClusterSupport none;
  if (device < 0 || device >= kMaxDevices) return none;
  std::call_once(once[device], [device] { support[device] = ProbeClusterSupport(device); });
  return support[device];
}

int ClusterChunkLen(int vocab) {
  const int per_block = (vocab + kClusterBlocks - 1) / kClusterBlocks;
  return (per_block + 3) / 4 * 4;
}

cudaError_t LaunchClusterProcess(const float* logits, int rows, int vocab, SamplingConfig config,
                                 float* probs, cudaStream_t stream) {
  const int chunk_len = ClusterChunkLen(vocab);
  cudaLaunchConfig_t lc{};
  lc.gridDim = dim3(kClusterBlocks, rows, 1);
  lc.blockDim = dim3(kClusterThreads, 1, 1);
  lc.dynamicSmemBytes = static_cast<size_t>(chunk_len) * sizeof(float);
  lc.stream = stream;
  cudaLaunchAttribute attrs[1];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = kClusterBlocks;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  lc.attrs = attrs;
  lc.numAttrs = 1;
  return cudaLaunchKernelEx(&lc, ProcessLogitsClusterKernel, logits, vocab, chunk_len, config,
                            probs);
}

// ---- Gumbel-max / argmax partials ----

constexpr int kPartThreads = 256;
using detail::FastScore;
using detail::kScoreMargin;

__device__ __forceinline__ float Weight(const float* p, const float* q, int64_t i,
                                        detail::WeightKind kind) {
  if (kind == detail::WeightKind::kGumbelResidual) return fmaxf(0.f, p[i] - q[i]);
  return p[i];
}

// The weights of ids 4b .. 4b+3 (the four ids one Philox block draws for; 0 past the vocabulary);
// false when none is positive, so both passes of the draw skip the same blocks.
__device__ __forceinline__ bool LoadFour(const float* p, const float* q, int b, int vocab,
                                         detail::WeightKind kind, float (&wv)[4]) {
  bool any = false;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = b * 4 + j;
    wv[j] = i < vocab ? Weight(p, q, i, kind) : 0.f;
    any |= wv[j] > 0.f;
  }
  return any;
}

__global__ void __launch_bounds__(kPartThreads)
    SamplePartialKernel(const float* __restrict__ p_all, const float* __restrict__ q_all, int vocab,
                        detail::WeightKind kind, uint64_t seed, int64_t first_position,
                        uint32_t purpose, detail::SamplePartial* __restrict__ partials) {
  __shared__ double sv[32];
  __shared__ int si[32];
  __shared__ float sf[32];
  const int row = blockIdx.x, split = blockIdx.y;
  const float* p = p_all + static_cast<int64_t>(row) * vocab;
  const float* q = q_all ? q_all + static_cast<int64_t>(row) * vocab : nullptr;
  const int64_t position = first_position + row;
  const int nblocks4 = (vocab + 3) / 4;
  const int b_lo = static_cast<int>(static_cast<int64_t>(nblocks4) * split / kSampleSplits);
  const int b_hi = static_cast<int>(static_cast<int64_t>(nblocks4) * (split + 1) / kSampleSplits);
  double best = 0.0;
  int best_id = -1;
  // Any NaN or infinity among the split's p (raw logits or probabilities: neither is legitimately
  // infinite), which the comparisons below pass over.
  bool nonfinite = false;
  if (kind == detail::WeightKind::kArgmax) {
#pragma unroll 4
    for (int i = b_lo * 4 + threadIdx.x; i < min(vocab, b_hi * 4); i += blockDim.x) {
      nonfinite |= !isfinite(p[i]);
      if (Better(p[i], i, best, best_id)) {
        best = p[i];
        best_id = i;
      }
    }
    BlockBest(best, best_id, sv, si);
  } else {
    const RandomPurpose rp = static_cast<RandomPurpose>(purpose);
    for (int i = b_lo * 4 + threadIdx.x; i < min(vocab, b_hi * 4); i += blockDim.x) nonfinite |= !isfinite(p[i]);
    // Pass 1: the best fp32 score.
    float fbest = -INFINITY;
    for (int b = b_lo + threadIdx.x; b < b_hi; b += blockDim.x) {
      float wv[4];
      if (!LoadFour(p, q, b, vocab, kind, wv)) continue;
      const PhiloxCounter bits = KeyedBlock(seed, position, rp, static_cast<uint32_t>(b));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (wv[j] > 0.f) fbest = fmaxf(fbest, FastScore(wv[j], bits.v[j]));
      }
    }
    fbest = detail::BlockMax(fbest, sf);
    // Pass 2: exact double scores (as the CPU reference computes them) for the near-best.
    if (fbest > -INFINITY) {
      for (int b = b_lo + threadIdx.x; b < b_hi; b += blockDim.x) {
        float wv[4];
        if (!LoadFour(p, q, b, vocab, kind, wv)) continue;
        const PhiloxCounter bits = KeyedBlock(seed, position, rp, static_cast<uint32_t>(b));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (wv[j] > 0.f && FastScore(wv[j], bits.v[j]) >= fbest - kScoreMargin) {
            const double s = log(static_cast<double>(wv[j])) + GumbelFromBits(bits.v[j]);
            if (Better(s, b * 4 + j, best, best_id)) {
              best = s;
              best_id = b * 4 + j;
            }
          }
        }
      }
    }
    BlockBest(best, best_id, sv, si);
  }
  nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    partials[row * kSampleSplits + split] = detail::SamplePartial{best, best_id, nonfinite ? 1 : 0};
  }
}

// One warp per row: lane j folds partials j, j + 32, ...; then a butterfly (Better is a total order,
// so the winner does not depend on the folding order).
__global__ void CombinePartialsKernel(const detail::SamplePartial* __restrict__ partials, int rows,
                                      int32_t* __restrict__ tokens) {
  const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;
  double best = 0.0;
  int best_id = -1;
  for (int s = threadIdx.x & 31; s < kSampleSplits; s += 32) {
    const detail::SamplePartial sp = partials[r * kSampleSplits + s];
    if (Better(sp.score, sp.id, best, best_id)) {
      best = sp.score;
      best_id = sp.id;
    }
  }
  WarpBest(best, best_id);
  if ((threadIdx.x & 31) == 0) tokens[r] = best_id;
}

}  // namespace

cudaError_t LaunchProcessLogits(const float* logits, int rows, int vocab, SamplingConfig config,
                                float* probs, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && vocab > 0 && config.top_k >= 0 &&
                         !(config.temperature != config.temperature));
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(logits && probs && logits != probs);
  if (rows <= 65535 && detail::ProcessLogitsUsesClusters(vocab)) {
    return LaunchClusterProcess(logits, rows, vocab, config, probs, stream);
  }
  return detail::LaunchProcessLogitsOneBlock(logits, rows, vocab, config, probs, stream);
}

namespace detail {
cudaError_t LaunchProcessLogitsOneBlock(const float* logits, int rows, int vocab,
                                        SamplingConfig config, float* probs, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && vocab > 0 && config.top_k >= 0 &&
                         !(config.temperature != config.temperature));
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(logits && probs && logits != probs);
  ProcessLogitsKernel<<<rows, kProcThreads, 0, stream>>>(logits, vocab, config, probs);
  return cudaGetLastError();
}

bool ProcessLogitsUsesClusters(int vocab) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const ClusterSupport& cs = ClusterSupportFor(device);
  return cs.ok && ClusterChunkLen(vocab) <= cs.max_chunk;
}
}  // namespace detail

size_t SampleWorkspaceBytes(int rows) {
  return static_cast<size_t>(rows) * kSampleSplits * sizeof(detail::SamplePartial);
}

namespace detail {
cudaError_t LaunchSamplePartials(const float* p, const float* q, int rows, int vocab,
                                 WeightKind kind, uint64_t seed, int64_t first_position,
                                 uint32_t purpose, SamplePartial* partials, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && vocab > 0);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(p && partials && (kind != WeightKind::kGumbelResidual || q));
  SamplePartialKernel<<<dim3(rows, kSampleSplits), kPartThreads, 0, stream>>>(
      p, q, vocab, kind, seed, first_position, purpose, partials);
  return cudaGetLastError();
}
}  // namespace detail

cudaError_t LaunchSampleTokens(const float* weights, int rows, int vocab, bool greedy,
                               uint64_t seed, int64_t first_position, uint32_t purpose,
                               int32_t* tokens, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(rows >= 0 && vocab > 0);
  if (rows == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(weights && tokens && workspace &&
                         workspace_bytes >= SampleWorkspaceBytes(rows));
  auto* partials = static_cast<detail::SamplePartial*>(workspace);
  cudaError_t err = detail::LaunchSamplePartials(
      weights, nullptr, rows, vocab, greedy ? detail::WeightKind::kArgmax : detail::WeightKind::kGumbel,
      seed, first_position, purpose, partials, stream);
  if (err != cudaSuccess) return err;
  CombinePartialsKernel<<<(rows + 3) / 4, 128, 0, stream>>>(partials, rows, tokens);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
