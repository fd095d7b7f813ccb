#include "kernels/device_util.cuh"
#include "kernels/warp_topk.cuh"
#include "kernels/router.cuh"
#include "kernels/router_sigmoid.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kRouterMaxExperts / 32;
static_assert(kPerLane <= 32, "a lane's taken experts are the bits of one word");

// A warp a token (as RouterKernel, router.cu): scores and choices in shared memory, lane l owning
// experts l + 32 i; lane g ranks group g by the CPU's serial top-two scan; then argmax rounds over the
// groups and over the allowed experts. Every selection is an exact comparison of the same fp32 values
// the CPU compares, so the ids are the CPU's wherever the scores are (σ's expf is the one difference).
__global__ void __launch_bounds__(kThreads)
    SigmoidRouterKernel(const float* __restrict__ logits, int n, int experts, int k, SigmoidRouterParams p,
                        float* __restrict__ weights, int32_t* __restrict__ ids) {
  __shared__ float score_s[kWarps][kRouterMaxExperts];
  __shared__ float choice_s[kWarps][kRouterMaxExperts];
  __shared__ int chosen_s[kWarps][kRouterMaxTopK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int token = blockIdx.x * kWarps + warp;
  if (token >= n) return;
  float* score = score_s[warp];
  float* choice = choice_s[warp];
  int* chosen = chosen_s[warp];
  const float* row = logits + static_cast<int64_t>(token) * experts;
  for (int e = lane; e < experts; e += 32) {
    const float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-row[e])));
    score[e] = s;
    choice[e] = __fadd_rn(s, p.bias != nullptr ? detail::LoadAsF32(p.bias, p.bias_type, e) : 0.0f);
  }
  __syncwarp();
  uint32_t allowed_groups = 0xffffffffu;  // bit g: group g selectable
  const int group_size = experts / p.groups;
  if (p.groups > 1) {
    float gs = -INFINITY;
    if (lane < p.groups) {  // the CPU's scan: a the best, b the second
      const float* c = choice + lane * group_size;
      float a = -INFINITY, b = -INFINITY;
      for (int j = 0; j < group_size; ++j) {
        if (c[j] > a) {
          b = a;
          a = c[j];
        } else if (c[j] > b) {
          b = c[j];
        }
      }
      gs = __fadd_rn(a, b);
    }
    allowed_groups = 0;
    bool taken = lane >= p.groups;
    for (int r = 0; r < p.groups_used; ++r) {
      float v = taken ? -INFINITY : gs;
      int idx = taken ? 0x7fffffff : lane;
      detail::WarpArgmax(v, idx);
      if (idx == lane) taken = true;
      if (idx < p.groups) allowed_groups |= 1u << idx;
    }
  }
  detail::WarpTopK(choice, experts, k, lane,
                   [&](int e) { return ((allowed_groups >> (e / group_size)) & 1u) != 0; }, chosen);
  __syncwarp();
  if (lane == 0) {
    float* w_out = weights + static_cast<int64_t>(token) * k;
    int32_t* i_out = ids + static_cast<int64_t>(token) * k;
    float sum = 0.0f;
    for (int r = 0; r < k; ++r) sum = __fadd_rn(sum, score[chosen[r]]);
    for (int r = 0; r < k; ++r) {
      float w = score[chosen[r]];
      if (p.renormalize) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
      i_out[r] = chosen[r];
      w_out[r] = __fmul_rn(w, p.scale);
    }
  }
}

}  // namespace

cudaError_t LaunchSigmoidRouterTopK(const float* logits, int n, int experts, int k, const SigmoidRouterParams& p,
                                    float* weights, int32_t* ids, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0 && experts >= 1 && experts <= kRouterMaxExperts && k >= 1 && k <= experts &&
                         k <= kRouterMaxTopK);
  SPECGEN_KERNEL_REQUIRE(p.groups >= 1 && p.groups <= kSigmoidRouterMaxGroups && experts % p.groups == 0 &&
                         p.groups_used >= 1 && p.groups_used <= p.groups &&
                         p.groups_used * (experts / p.groups) >= k && (p.groups == 1 || experts / p.groups >= 2));
  SPECGEN_KERNEL_REQUIRE(p.bias == nullptr || !IsPacked(p.bias_type));
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(logits && weights && ids);
  SigmoidRouterKernel<<<(n + kWarps - 1) / kWarps, kThreads, 0, stream>>>(logits, n, experts, k, p, weights, ids);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
