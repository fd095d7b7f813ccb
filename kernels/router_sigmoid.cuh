// The DeepSeek-V3 / GLM-4.5 router ("noaux_tc", RouterNorm::kSigmoid*; docs/formats.md §8) on the
// device, the CPU backend's RouteWith step for step: scores σ(logit), selection on score + bias within
// the best groups, weights the unbiased scores (renormalized or not) times the routed scale.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_types.h"

namespace specgen::kernels {

inline constexpr int kSigmoidRouterMaxGroups = 32;

struct SigmoidRouterParams {
  const void* bias = nullptr;  // [experts] of bias_type, or null: the selection bias
  ElemType bias_type = ElemType::kF32;
  int groups = 1;              // 1..kSigmoidRouterMaxGroups, dividing experts (>= 2 experts a group if > 1)
  int groups_used = 1;         // 1..groups, groups_used · experts / groups >= k
  bool renormalize = false;    // kSigmoidTopKRenormalize: w / (Σ w + 1e-20)
  float scale = 1.0f;          // every weight, last
};

// For each token t < n: score_e = 1 / (1 + e^−logit_e), choice_e = score_e + bias_e. With groups > 1,
// each group's rank is the sum of its two largest choices and the groups_used best groups (ties: the
// lower group) are the only ones selectable. ids[t, 0..k) = the k selectable experts of largest choice,
// in decreasing order, ties to the lower id; weights[t, r] = score of ids[t, r], divided by (the k
// scores' sum in rank order + 1e-20) when renormalizing, then times scale. One warp a token: the ids do
// not depend on the batch.
//   logits [n, experts] fp32, weights [n, k] fp32, ids [n, k] int32, all device
//   experts 1..kRouterMaxExperts (router.cuh);  k 1..min(experts, kRouterMaxTopK)
cudaError_t LaunchSigmoidRouterTopK(const float* logits, int n, int experts, int k, const SigmoidRouterParams& p,
                                    float* weights, int32_t* ids, cudaStream_t stream);

}  // namespace specgen::kernels
