// Temperature-only logits processing (T > 0, no top-k, no top-p; min-p allowed: the sampling defaults of
// vLLM and of Hugging Face's generate) spread over one block per 2048 ids of a row, as the top-k-first
// path is (sampling_topk.cu), instead of one cluster of 8 blocks a row walking 19 K ids each:
//   1. every slice's (max logit, id) (SliceMaxKernel);
//   2. every slice: w = exp((logit - max) / T), the formula of the other paths (so the same floats),
//      kept where w >= min_p (the largest w is exp(0) = 1), and the kept weights' double sum;
//   3. every slice: the row's sum S from those (a fixed-order block sum that every block repeats, so
//      every block has the same S), its probabilities w / S (in double, rounded once) or 0; with a draw,
//      the slice's best keyed Gumbel-max score over them (fp32 scores pick the candidates, doubles
//      decide, as LaunchSampleTokens does);
//   4. with a draw, one warp per row: the best of its slices' candidates.
// The same kept sets as LaunchProcessLogits; its sum is added in another fixed order, so a probability
// may differ from it by one fp32 ulp. A row's result never depends on the number of rows.
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
namespace {

using detail::Better;
using detail::BlockBest;
using detail::kSliceIds;
using detail::kSliceThreads;
using detail::MaxPartial;
using detail::SamplePartial;
using detail::SliceDraw;
using detail::Slices;

// A thread's ids: lo + 4 t .. lo + 4 t + 3, the four ids of one Philox block of the keyed draw.
constexpr int kPer = kSliceIds / kSliceThreads;
static_assert(kPer == 4, "a thread holds the four ids of one Philox block");

// The slice's logits, read before the PDL wait (the logits were written before SliceMaxKernel began).
__device__ __forceinline__ void LoadSlice(const float* l, int lo, int hi, float (&x)[kPer]) {
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lo + kPer * static_cast<int>(threadIdx.x) + j;
    x[j] = i < hi ? l[i] : 0.f;
  }
}

// A slice kernel's start: its logits read before the PDL wait, then the row's max logit (from
// SliceMaxKernel's partials, complete once the wait returns) and 1 / T.
struct SliceStart {
  int lo, hi;
  float x[kPer];
  double max_logit, inv_t;
};
__device__ __forceinline__ SliceStart BeginSlice(const float* logits, int vocab, float temperature,
                                                 const MaxPartial* partials, double* sv, int* si) {
  SliceStart st;
  const int s = blockIdx.x, row = blockIdx.y, slices = gridDim.x;
  st.lo = s * kSliceIds;
  st.hi = min(vocab, st.lo + kSliceIds);
  LoadSlice(logits + static_cast<int64_t>(row) * vocab, st.lo, st.hi, st.x);
  LetDependentsLaunch();
  WaitForPrecedingGrid();
  st.max_logit = detail::RowMax(partials + static_cast<int64_t>(row) * slices, slices, sv, si).value;
  st.inv_t = 1.0 / static_cast<double>(temperature);
  return st;
}

// The other paths' weight of a logit (exp of the fp32-rounded double argument) and min-p's test.
__device__ __forceinline__ float PlainWeight(float logit, double max_logit, double inv_t) {
  return expf(static_cast<float>((static_cast<double>(logit) - max_logit) * inv_t));
}
__device__ __forceinline__ bool KeptByMinP(float w, float min_p) {
  return min_p <= 0.f || static_cast<double>(w) >= static_cast<double>(min_p);
}

// 2. sums[row][s] = the double sum of slice s's kept weights.
__global__ void __launch_bounds__(kSliceThreads)
    PlainSumKernel(const float* __restrict__ logits, int vocab, float temperature, float min_p,
                   const MaxPartial* __restrict__ partials, double* __restrict__ sums) {
  __shared__ double sv[32];
  __shared__ int si[32];
  const SliceStart st = BeginSlice(logits, vocab, temperature, partials, sv, si);
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = st.lo + kPer * static_cast<int>(threadIdx.x) + j;
    if (i >= st.hi) continue;
    const float w = PlainWeight(st.x[j], st.max_logit, st.inv_t);
    if (KeptByMinP(w, min_p)) sum += static_cast<double>(w);
  }
  sum = detail::BlockSum(sum, sv);
  if (threadIdx.x == 0) sums[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = sum;
}

// 3. Slice s's probabilities; with a draw, its best (exact score, id) at cand[row][s] (id -1: none).
__global__ void __launch_bounds__(kSliceThreads)
    PlainNormalizeKernel(const float* __restrict__ logits, int vocab, float temperature, float min_p,
                         const MaxPartial* __restrict__ partials, const double* __restrict__ sums,
                         float* __restrict__ probs, SliceDraw draw, SamplePartial* __restrict__ cand) {
  __shared__ double sv[32];
  __shared__ int si[32];
  __shared__ float sf[32];
  const int s = blockIdx.x, row = blockIdx.y, slices = gridDim.x;
  const SliceStart st = BeginSlice(logits, vocab, temperature, partials, sv, si);
  const int lo = st.lo, hi = st.hi;
  // Every block of the row adds the same values in the same order: the same S everywhere.
  double total = 0.0;
  for (int t = threadIdx.x; t < slices; t += blockDim.x) total += sums[static_cast<int64_t>(row) * slices + t];
  total = detail::BlockSum(total, sv);
  float* out = probs + static_cast<int64_t>(row) * vocab;
  float q[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = lo + kPer * static_cast<int>(threadIdx.x) + j;
    const float w = PlainWeight(st.x[j], st.max_logit, st.inv_t);
    q[j] = i < hi && KeptByMinP(w, min_p) ? static_cast<float>(static_cast<double>(w) / total) : 0.f;
    if (i < hi) out[i] = q[j];
  }
  if (draw.tokens == nullptr) return;
  // The keyed Gumbel-max over q, as LaunchSampleTokens scores it (sampling.cu): the fp32 scores' best,
  // then the double scores of those within kScoreMargin of it.
  const uint32_t block4 = static_cast<uint32_t>((lo >> 2) + static_cast<int>(threadIdx.x));
  const PhiloxCounter bits =
      KeyedBlock(draw.seed, draw.first_position + row, static_cast<RandomPurpose>(draw.purpose), block4);
  float fast[kPer], fbest = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    fast[j] = q[j] > 0.f ? detail::FastScore(q[j], bits.v[j]) : -INFINITY;
    fbest = fmaxf(fbest, fast[j]);
  }
  fbest = detail::BlockMax(fbest, sf);
  double best = 0.0;
  int best_id = -1;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (q[j] > 0.f && fast[j] >= fbest - detail::kScoreMargin) {
      const double score = log(static_cast<double>(q[j])) + GumbelFromBits(bits.v[j]);
      const int id = lo + kPer * static_cast<int>(threadIdx.x) + j;
      if (Better(score, id, best, best_id)) {
        best = score;
        best_id = id;
      }
    }
  }
  BlockBest(best, best_id, sv, si);
  if (threadIdx.x == 0) cand[static_cast<int64_t>(row) * slices + s] = SamplePartial{best, best_id, 0};
}

// 4. One warp per row: tokens[row] = the best of its slices' candidates (Better is a total order, so
// the winner does not depend on the folding order).
__global__ void PlainDrawKernel(const SamplePartial* __restrict__ cand, int slices, int32_t* __restrict__ tokens) {
  WaitForPrecedingGrid();
  const int row = blockIdx.x;
  double best = 0.0;
  int best_id = -1;
  for (int s = threadIdx.x; s < slices; s += 32) {
    const SamplePartial c = cand[static_cast<int64_t>(row) * slices + s];
    if (Better(c.score, c.id, best, best_id)) {
      best = c.score;
      best_id = c.id;
    }
  }
  detail::WarpBest(best, best_id);
  if (threadIdx.x == 0) tokens[row] = best_id;
}

}  // namespace

bool ProcessPlainApplies(int vocab, SamplingConfig config) {
  return vocab > 0 && config.temperature > 0.f && (config.top_k <= 0 || config.top_k >= vocab) &&
         config.top_p >= 1.f;
}

namespace detail {

size_t ProcessPlainWorkspaceBytes(int rows, int vocab) {
  return static_cast<size_t>(rows) * Slices(vocab) * (sizeof(MaxPartial) + sizeof(double) + sizeof(SamplePartial));
}

cudaError_t LaunchProcessPlain(const float* logits, int rows, int vocab, SamplingConfig config, float* probs,
                               int32_t* tokens, uint64_t seed, int64_t first_position, uint32_t purpose,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(ProcessPlainApplies(vocab, config));
  const cudaError_t checked =
      detail::CheckSplitArgs(logits, rows, probs, workspace, workspace_bytes, ProcessPlainWorkspaceBytes(rows, vocab));
  if (checked != cudaSuccess || rows == 0) return checked;
  const int slices = Slices(vocab);
  const size_t n = static_cast<size_t>(rows) * slices;
  auto* partials = static_cast<MaxPartial*>(workspace);
  auto* cand = reinterpret_cast<SamplePartial*>(partials + n);
  auto* sums = reinterpret_cast<double*>(cand + n);
  const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(rows));
  const bool pdl = detail::SplitLaunchesProgrammatic();
  detail::SliceMaxKernel<<<grid, kSliceThreads, 0, stream>>>(logits, vocab, partials);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  e = LaunchDecodeKernel(PlainSumKernel, grid, dim3(kSliceThreads), 0, stream, pdl, logits, vocab,
                         config.temperature, config.min_p, static_cast<const MaxPartial*>(partials), sums);
  if (e != cudaSuccess) return e;
  e = LaunchDecodeKernel(PlainNormalizeKernel, grid, dim3(kSliceThreads), 0, stream, pdl, logits, vocab,
                         config.temperature, config.min_p, static_cast<const MaxPartial*>(partials),
                         static_cast<const double*>(sums), probs, SliceDraw{tokens, seed, first_position, purpose},
                         cand);
  if (e != cudaSuccess || tokens == nullptr) return e;
  return LaunchDecodeKernel(PlainDrawKernel, dim3(static_cast<unsigned>(rows)), dim3(32), 0, stream, pdl,
                            static_cast<const SamplePartial*>(cand), slices, tokens);
}

}  // namespace detail
}  // namespace specgen::kernels
