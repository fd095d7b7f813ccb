#include "kernels/device_util.cuh"
#include "kernels/warp_topk.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/router.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 128;

// A warp a token, kWarps tokens a block: the logits in shared memory (lane l owns experts l + 32 i),
// the softmax's max and sum by butterflies, then k rounds of a warp argmax over the experts not yet
// taken (a lane's taken experts as bits). At one token the block's barriers and serial picks of a
// block-wide search cost more than the work; a warp needs none.
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kRouterMaxExperts / 32;
static_assert(kPerLane <= 32, "a lane's taken experts are the bits of one word");

__global__ void __launch_bounds__(kThreads) RouterKernel(const float* __restrict__ logits, int n, int experts, int k,
                                                         RouterMode mode, float* __restrict__ weights,
                                                         int32_t* __restrict__ ids) {
  __shared__ float l_s[kWarps][kRouterMaxExperts];
  __shared__ int chosen_s[kWarps][kRouterMaxTopK];
  // The routed experts' plan kernel (routed_experts.cu, launched programmatically) may be scheduled
  // now; it waits for this grid before reading the ids. A no-op before a plainly launched kernel.
  LetDependentsLaunch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int token = blockIdx.x * kWarps + warp;
  if (token >= n) return;
  float* l = l_s[warp];
  int* chosen = chosen_s[warp];
  const float* row = logits + static_cast<int64_t>(token) * experts;
  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    l[e] = row[e];
    mx = fmaxf(mx, l[e]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int e = lane; e < experts; e += 32) sum += expf(l[e] - mx);
  sum = detail::WarpSum(sum);
  detail::WarpTopK(l, experts, k, lane, [](int) { return true; }, chosen);
  __syncwarp();
  if (lane == 0) {
    float* w_out = weights + static_cast<int64_t>(token) * k;
    int32_t* i_out = ids + static_cast<int64_t>(token) * k;
    float w[kRouterMaxTopK];
    float chosen_sum = 0.f;
    for (int r = 0; r < k; ++r) {
      // kTopKSoftmax: the chosen logits' own softmax; its max is l[chosen[0]].
      w[r] = mode == RouterMode::kTopKSoftmax ? expf(l[chosen[r]] - l[chosen[0]]) : expf(l[chosen[r]] - mx) / sum;
      chosen_sum += w[r];
    }
    for (int r = 0; r < k; ++r) {
      i_out[r] = chosen[r];
      w_out[r] = mode == RouterMode::kSoftmaxTopK ? w[r] : w[r] / chosen_sum;
    }
  }
}

}  // namespace

cudaError_t LaunchRouterTopK(const float* logits, int n, int experts, int k, RouterMode mode,
                             float* weights, int32_t* ids, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0 && experts >= 1 && experts <= kRouterMaxExperts && k >= 1 &&
                         k <= experts && k <= kRouterMaxTopK);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(logits && weights && ids);
  RouterKernel<<<(n + kWarps - 1) / kWarps, kThreads, 0, stream>>>(logits, n, experts, k, mode, weights, ids);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
