#include "kernels/device_util.cuh"
#include "kernels/programmatic_launch.cuh"
#include "kernels/router.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 128;

// (value, index) maximum with ties to the lower index, across a warp.
__device__ __forceinline__ void WarpArgmax(float& v, int& idx) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
}

// One block per token.
__global__ void RouterKernel(const float* __restrict__ logits, int experts, int k, RouterMode mode,
                             float* __restrict__ weights, int32_t* __restrict__ ids) {
  __shared__ float l_s[kRouterMaxExperts];
  __shared__ float scratch[32];
  __shared__ float wv[32];
  __shared__ int wi[32];
  __shared__ int chosen[kRouterMaxTopK];
  // The routed experts' plan kernel (routed_experts.cu, launched programmatically) may be scheduled
  // now; it waits for this grid before reading the ids. A no-op before a plainly launched kernel.
  LetDependentsLaunch();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * experts;
  float mx = -INFINITY;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    l_s[e] = row[e];
    mx = fmaxf(mx, l_s[e]);
  }
  mx = detail::BlockMax(mx, scratch);
  float sum = 0.f;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) sum += expf(l_s[e] - mx);
  sum = detail::BlockSum(sum, scratch);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r = 0; r < k; ++r) {
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
      bool taken = false;
      for (int c = 0; c < r; ++c) taken |= chosen[c] == e;
      if (!taken && (l_s[e] > v || (l_s[e] == v && e < idx))) {
        v = l_s[e];
        idx = e;
      }
    }
    WarpArgmax(v, idx);
    if (lane == 0) {
      wv[warp] = v;
      wi[warp] = idx;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = wv[0];
      int bi = wi[0];
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
        if (wv[w] > bv || (wv[w] == bv && wi[w] < bi)) {
          bv = wv[w];
          bi = wi[w];
        }
      }
      chosen[r] = bi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float* w_out = weights + static_cast<int64_t>(blockIdx.x) * k;
    int32_t* i_out = ids + static_cast<int64_t>(blockIdx.x) * k;
    float w[kRouterMaxTopK];
    float chosen_sum = 0.f;
    for (int r = 0; r < k; ++r) {
      // kTopKSoftmax: the chosen logits' own softmax; its max is l_s[chosen[0]].
      w[r] = mode == RouterMode::kTopKSoftmax ? expf(l_s[chosen[r]] - l_s[chosen[0]])
                                              : expf(l_s[chosen[r]] - mx) / sum;
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
  RouterKernel<<<n, kThreads, 0, stream>>>(logits, experts, k, mode, weights, ids);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
