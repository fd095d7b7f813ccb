// MoE router: per token, softmax over the E expert logits, choose the top k experts, and produce
// their mixing weights in one of the three conventions models use.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace specgen::kernels {

inline constexpr int kRouterMaxExperts = 1024;
inline constexpr int kRouterMaxTopK = 32;

enum class RouterMode : uint8_t {
  kSoftmaxTopK = 0,         // weights = softmax(logits)[chosen] (Qwen2-MoE, norm_topk_prob=false)
  kSoftmaxTopKRenorm = 1,   // the same, renormalized to sum 1 (Qwen3-MoE, OLMoE with norm)
  kTopKSoftmax = 2,         // softmax over the chosen logits only (Mixtral)
};

// For each token t < n: ids[t, 0..k) = the k experts of largest logit, in decreasing order, ties to
// the lower expert index (selection on logits equals selection on softmax probabilities up to those
// ties); weights[t, 0..k) their mixing weights per `mode`. Softmax in fp32 with the max subtracted.
//   logits   [n, experts] fp32, device
//   weights  [n, k] fp32, device
//   ids      [n, k] int32, device
//   experts  1..kRouterMaxExperts;  k 1..min(experts, kRouterMaxTopK)
cudaError_t LaunchRouterTopK(const float* logits, int n, int experts, int k, RouterMode mode,
                             float* weights, int32_t* ids, cudaStream_t stream);

}  // namespace specgen::kernels
