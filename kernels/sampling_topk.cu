// Top-k-first logits processing (LaunchProcessLogitsSplit where ProcessTopKApplies; the entry points
// also route the temperature-only configs to sampling_plain.cu): the row is spread over one block per 2048
// ids instead of one cluster of 8 blocks, because a top-k of a few dozen ids needs only each slice's
// own top-k, not a radix select over the whole row:
//   1. every slice's (max logit, id);
//   2. every slice: the global max from those, its weights w = exp((logit - max) / T) (the formula of
//      the other paths, so the same floats), its probabilities zeroed, and its top-k ids by (w
//      descending, id ascending) — a radix select over 64-bit keys (w's bits, then the id reversed),
//      which are distinct, so exactly k of them are at or above the k-th;
//   3. one block per row: the row's top-k among the slices' candidates (no slice holds more than k of
//      it, and a slice's ties go to its lower ids as the row's do), in that order (a 64-key sort),
//      top-p over that prefix in the 2^40 fixed-point mass of the other paths, min-p, the sum of the
//      kept weights in double, and the kept probabilities scattered into the row.
// (A bitonic sort of each slice instead of the select costs far more shared-memory traffic a slice;
// docs/experiments.md.)
// A row's result never depends on the number of rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "engine/sampling/keyed_random.h"
#include "kernels/device_util.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/sampling.cuh"
#include "kernels/sampling_common.cuh"
#include "kernels/sampling_slices.cuh"

namespace specgen::kernels {
namespace detail {

// 1. Every slice's (max logit, id) (declared in sampling_slices.cuh).
__global__ void __launch_bounds__(kSliceThreads)
    SliceMaxKernel(const float* __restrict__ logits, int vocab, MaxPartial* __restrict__ partials) {
  __shared__ double sv[32];
  __shared__ int si[32];
  const int s = blockIdx.x, row = blockIdx.y, lo = s * kSliceIds, hi = min(vocab, lo + kSliceIds);
  const float* l = logits + static_cast<int64_t>(row) * vocab;
  LetDependentsLaunch();
  double best = 0.0;
  int best_id = -1;
  for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    if (Better(l[i], i, best, best_id)) {
      best = l[i];
      best_id = i;
    }
  }
  BlockBest(best, best_id, sv, si);
  if (threadIdx.x == 0) partials[static_cast<int64_t>(row) * gridDim.x + s] = MaxPartial{best, best_id, 0};
}

}  // namespace detail
namespace {

using detail::Better;
using detail::BlockBest;
using detail::Mass;

using detail::kSliceIds;
using detail::kSliceThreads;
using detail::MaxPartial;
using detail::Slices;
using detail::SliceMaxKernel;
using detail::SliceDraw;
constexpr int kSelectThreads = 1024;  // the row's final selection: up to kTopKMaxCandidates keys
constexpr int kTopKMaxK = 64;         // the largest top-k this path takes (its sort of the row's top-k)

// The sort key of (w, id): larger for larger w, then for the lower id; 0 (below every real key) pads.
__device__ __forceinline__ uint64_t Key(float w, int id) {
  return (static_cast<uint64_t>(detail::Bits(w)) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ float KeyWeight(uint64_t key) { return __uint_as_float(static_cast<uint32_t>(key >> 32)); }
__device__ __forceinline__ int KeyId(uint64_t key) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(key));
}

// The k-th largest of keys[0..n) (1 <= k <= n; distinct, but for 0-pads below the k-th), by the whole
// block: a radix select, one byte a pass from the top, over the bytes below those every key shares
// (the upper bytes of a slice's ids are one value). Exactly k keys are >= the result. The histogram's
// adds are gathered per warp (__match_any_sync), since a byte is often one value for most keys. `sh`:
// the histogram, the keys' range and the pass's chosen digit and rank.
struct SelectShared {
  unsigned hist[256];
  uint64_t lo, hi;
  int digit, rank;
};
__device__ uint64_t SelectKth(const uint64_t* keys, int n, int k, SelectShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t lo = ~0ull, hi = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    lo = min(lo, keys[i]);
    hi = max(hi, keys[i]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (threadIdx.x == 0) {
    sh.lo = ~0ull;
    sh.hi = 0;
  }
  __syncthreads();
  if (lane == 0) {
    atomicMin(reinterpret_cast<unsigned long long*>(&sh.lo), static_cast<unsigned long long>(lo));
    atomicMax(reinterpret_cast<unsigned long long*>(&sh.hi), static_cast<unsigned long long>(hi));
  }
  __syncthreads();
  const uint64_t diff = sh.lo ^ sh.hi;
  if (diff == 0) return sh.hi;  // one key
  int shift = (63 - __clzll(static_cast<long long>(diff))) / 8 * 8;  // the highest byte that differs
  uint64_t mask = shift == 56 ? 0 : ~0ull << (shift + 8);
  uint64_t prefix = sh.hi & mask;
  int rank = k;  // the rank sought among the keys under the prefix
  for (; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
      const int i = base + threadIdx.x;
      const bool in = i < n && (keys[i] & mask) == prefix;
      const unsigned digit = in ? static_cast<unsigned>(keys[i] >> shift) & 255u : 256u;
      const unsigned peers = __match_any_sync(__activemask(), digit);
      if (in && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[digit], static_cast<unsigned>(__popc(peers)));
    }
    __syncthreads();
    if (warp == 0) {  // lane j holds digits 255 - 8j .. 248 - 8j, descending
      unsigned c[8], own = 0;
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        c[q] = sh.hist[255 - 8 * lane - q];
        own += c[q];
      }
      unsigned incl = own;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      unsigned acc = incl - own;
      if (acc < static_cast<unsigned>(rank) && incl >= static_cast<unsigned>(rank)) {
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          if (acc + c[q] >= static_cast<unsigned>(rank)) {
            sh.digit = 255 - 8 * lane - q;
            sh.rank = rank - static_cast<int>(acc);
            break;
          }
          acc += c[q];
        }
      }
    }
    __syncthreads();
    prefix |= static_cast<uint64_t>(sh.digit) << shift;
    mask |= 0xffull << shift;
    rank = sh.rank;
    __syncthreads();  // every thread has read sh before the next pass rewrites it
  }
  return prefix;
}

// Appends the keys[0..n) >= thr to out at *count (shared; order unspecified: the readers sort).
__device__ __forceinline__ void GatherAtLeast(const uint64_t* keys, int n, uint64_t thr, uint64_t* out, int* count) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (keys[i] >= thr) out[atomicAdd(count, 1)] = keys[i];
  }
}

// 2. Slice s of the row: its probabilities zeroed and its top k keys (descending, 0-padded) at
// cand[row][s * k ..).
__global__ void __launch_bounds__(kSliceThreads)
    SliceTopKKernel(const float* __restrict__ logits, int vocab, float temperature, int k,
                    const MaxPartial* __restrict__ partials, uint64_t* __restrict__ cand,
                    float* __restrict__ probs) {
  __shared__ uint64_t keys[kSliceIds];
  __shared__ double sv[32];
  __shared__ int si[32];
  __shared__ SelectShared sel;
  __shared__ int count;
  const int s = blockIdx.x, row = blockIdx.y, slices = gridDim.x;
  const int lo = s * kSliceIds, hi = min(vocab, lo + kSliceIds), n = hi - lo;
  const float* l = logits + static_cast<int64_t>(row) * vocab;
  // The slice's logits (written before the max kernel started) are read before waiting for it.
  constexpr int kPer = kSliceIds / kSliceThreads;
  float x[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int t = threadIdx.x + j * kSliceThreads;
    x[j] = t < n ? l[lo + t] : 0.f;
  }
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  const double max_logit = detail::RowMax(partials + static_cast<int64_t>(row) * slices, slices, sv, si).value;
  const double inv_t = 1.0 / static_cast<double>(temperature);
  float* out = probs + static_cast<int64_t>(row) * vocab;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int t = threadIdx.x + j * kSliceThreads;
    if (t < n) {
      const float w = expf(static_cast<float>((static_cast<double>(x[j]) - max_logit) * inv_t));
      keys[t] = Key(w, lo + t);
      out[lo + t] = 0.f;
    }
  }
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  uint64_t* c = cand + (static_cast<int64_t>(row) * slices + s) * k;
  if (n <= k) {  // the whole slice, 0-padded
    for (int t = threadIdx.x; t < k; t += blockDim.x) c[t] = t < n ? keys[t] : 0;
    return;
  }
  const uint64_t thr = SelectKth(keys, n, k, sel);
  GatherAtLeast(keys, n, thr, c, &count);
}

// 3. One block per row: the row's top-k, top-p, min-p, normalization, and the kept probabilities;
// with a draw, tokens[row] = LaunchSampleTokens' keyed Gumbel-max over them (only kept ids have
// weight, so it scores only those, with the exact double score the full-row draw decides by).
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(int vocab, int slices, SamplingConfig cfg, const uint64_t* __restrict__ cand,
                 float* __restrict__ probs, SliceDraw draw) {
  __shared__ uint64_t keys[kTopKMaxCandidates];
  __shared__ uint64_t top[kTopKMaxK];
  __shared__ SelectShared sel;
  __shared__ int count, kept_s;
  __shared__ double sum_s;
  __shared__ double sv[32];
  __shared__ int si[32];
  const int row = blockIdx.x, k = cfg.top_k, total = slices * k;
  const uint64_t* c = cand + static_cast<int64_t>(row) * total;
  WaitForPrecedingGrid();
  for (int t = threadIdx.x; t < total; t += blockDim.x) keys[t] = c[t];
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  // The row's top k keys (every slice gave min(k, its ids) real keys, >= k in all; pads are 0, below
  // every real key), then in order: a bitonic sort of kTopKMaxK by the first warp.
  GatherAtLeast(keys, total, SelectKth(keys, total, k, sel), top, &count);
  __syncthreads();
  if (threadIdx.x < 32) {
    for (int t = k + threadIdx.x; t < kTopKMaxK; t += 32) top[t] = 0;
    __syncwarp();
    for (int size = 2; size <= kTopKMaxK; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = threadIdx.x; t < kTopKMaxK / 2; t += 32) {
          const int i = 2 * t - (t & (stride - 1)), j = i + stride;
          const uint64_t a = top[i], b = top[j];
          if ((a < b) == ((i & size) == 0)) {
            top[i] = b;
            top[j] = a;
          }
        }
        __syncwarp();
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // The first k keys are the top-k (every slice gave min(k, its ids) >= k real keys in all).
    int kept = k;
    if (cfg.top_p < 1.f) {
      unsigned long long mass_total = 0;
      for (int i = 0; i < k; ++i) mass_total += Mass(KeyWeight(top[i]));
      unsigned long long target = static_cast<unsigned long long>(ceil(static_cast<double>(cfg.top_p) * mass_total));
      if (target < 1) target = 1;
      if (target > mass_total) target = mass_total;
      // The shortest prefix (w descending, ties by the lower id) whose mass reaches the target.
      unsigned long long acc = 0;
      for (int i = 0; i < k; ++i) {
        acc += Mass(KeyWeight(top[i]));
        if (acc >= target) {
          kept = i + 1;
          break;
        }
      }
    }
    if (cfg.min_p > 0.f) {  // max w is exp(0) = 1 exactly, so the threshold is min_p itself
      while (kept > 0 && !(static_cast<double>(KeyWeight(top[kept - 1])) >= static_cast<double>(cfg.min_p))) --kept;
    }
    double sum = 0.0;
    for (int i = 0; i < kept; ++i) sum += static_cast<double>(KeyWeight(top[i]));
    kept_s = kept;
    sum_s = sum;
  }
  __syncthreads();
  float* out = probs + static_cast<int64_t>(row) * vocab;
  double best = 0.0;
  int best_id = -1;
  for (int i = threadIdx.x; i < kept_s; i += blockDim.x) {
    const int id = KeyId(top[i]);
    const float p = static_cast<float>(static_cast<double>(KeyWeight(top[i])) / sum_s);
    out[id] = p;
    if (draw.tokens != nullptr && p > 0.f) {
      const PhiloxCounter bits = KeyedBlock(draw.seed, draw.first_position + row,
                                            static_cast<RandomPurpose>(draw.purpose), static_cast<uint32_t>(id >> 2));
      const double score = log(static_cast<double>(p)) + GumbelFromBits(bits.v[id & 3]);
      if (Better(score, id, best, best_id)) {
        best = score;
        best_id = id;
      }
    }
  }
  if (draw.tokens != nullptr) {
    BlockBest(best, best_id, sv, si);
    if (threadIdx.x == 0) draw.tokens[row] = best_id;
  }
}

}  // namespace

bool ProcessTopKApplies(int vocab, SamplingConfig config) {
  return vocab > 0 && config.temperature > 0.f && config.top_k > 0 && config.top_k < vocab &&
         config.top_k <= kTopKMaxK &&
         static_cast<int64_t>(Slices(vocab)) * config.top_k <= kTopKMaxCandidates;
}

size_t ProcessSplitWorkspaceBytes(int rows, int vocab) {
  const size_t topk =
      static_cast<size_t>(rows) * (static_cast<size_t>(Slices(vocab)) * sizeof(MaxPartial) + kTopKMaxCandidates * sizeof(uint64_t));
  return std::max(topk, detail::ProcessPlainWorkspaceBytes(rows, vocab));
}

namespace {
cudaError_t LaunchTopK(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                       const SliceDraw& draw, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const cudaError_t checked =
      detail::CheckSplitArgs(logits, rows, probs, workspace, workspace_bytes, ProcessSplitWorkspaceBytes(rows, vocab));
  if (checked != cudaSuccess || rows == 0) return checked;
  const int slices = Slices(vocab);
  auto* partials = static_cast<MaxPartial*>(workspace);
  auto* cand = reinterpret_cast<uint64_t*>(partials + static_cast<size_t>(rows) * slices);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(rows));
  const bool pdl = detail::SplitLaunchesProgrammatic();  // the slice and select kernels
  SliceMaxKernel<<<grid, kSliceThreads, 0, stream>>>(logits, vocab, partials);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  e = LaunchDecodeKernel(SliceTopKKernel, grid, dim3(kSliceThreads), 0, stream, pdl, logits, vocab,
                         config.temperature, config.top_k, static_cast<const MaxPartial*>(partials), cand, probs);
  if (e != cudaSuccess) return e;
  return LaunchDecodeKernel(SelectKernel, dim3(static_cast<unsigned>(rows)), dim3(kSelectThreads), 0, stream, pdl,
                            vocab, slices, config, static_cast<const uint64_t*>(cand), probs, draw);
}
}  // namespace

cudaError_t LaunchProcessLogitsSplit(const float* logits, int rows, int vocab, SamplingConfig config,
                                   float* probs, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (ProcessPlainApplies(vocab, config)) {
    return detail::LaunchProcessPlain(logits, rows, vocab, config, probs, nullptr, 0, 0, 0, workspace, workspace_bytes,
                                      stream);
  }
  if (!ProcessTopKApplies(vocab, config)) return LaunchProcessLogits(logits, rows, vocab, config, probs, stream);
  return LaunchTopK(logits, rows, vocab, config, probs, SliceDraw{}, workspace, workspace_bytes, stream);
}

size_t ProcessAndSampleWorkspaceBytes(int rows, int vocab) {
  return std::max(ProcessSplitWorkspaceBytes(rows, vocab), SampleWorkspaceBytes(rows));
}

cudaError_t LaunchProcessAndSample(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                                   uint64_t seed, int64_t first_position, uint32_t purpose, int32_t* tokens,
                                   void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(workspace_bytes >= ProcessAndSampleWorkspaceBytes(rows, vocab));
  if (ProcessPlainApplies(vocab, config)) {
    SPECGEN_KERNEL_REQUIRE(tokens != nullptr);
    return detail::LaunchProcessPlain(logits, rows, vocab, config, probs, tokens, seed, first_position, purpose,
                                      workspace, workspace_bytes, stream);
  }
  if (ProcessTopKApplies(vocab, config)) {
    SPECGEN_KERNEL_REQUIRE(tokens != nullptr);
    return LaunchTopK(logits, rows, vocab, config, probs, SliceDraw{tokens, seed, first_position, purpose}, workspace,
                      workspace_bytes, stream);
  }
  const cudaError_t e = LaunchProcessLogits(logits, rows, vocab, config, probs, stream);
  if (e != cudaSuccess) return e;
  return LaunchSampleTokens(probs, rows, vocab, config.temperature <= 0.f, seed, first_position, purpose, tokens,
                            workspace, workspace_bytes, stream);
}

}  // namespace specgen::kernels
