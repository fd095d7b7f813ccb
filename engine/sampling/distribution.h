// Logits → the probability distribution a token is actually drawn from (temperature, then top-k,
// top-p, min-p filtering, renormalized), and draws from such distributions with keyed Gumbel noise.
// The CPU reference of the GPU sampling kernels; applied identically to the target (p) and draft (q).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/keyed_random.h"
#include "engine/sampling/sampling_params.h"

namespace specgen {

// Lowest id among the maximal entries (greedy's tie rule).
int32_t Argmax(std::span<const float> values);

// Writes the processed distribution of one row of logits into `probs` (resized to V): softmax of
// logits / temperature restricted to the ids that survive top-k, top-p and min-p, summing to 1.
// Greedy gives the one-hot distribution of Argmax(logits). Filters break ties by the lower id.
void ProcessLogits(std::span<const float> logits, const SamplingParams& params,
                   std::vector<float>* probs);

// Exact draw from the distribution proportional to `weights` (non-negative, need not sum to 1):
// argmax over ids with weight > 0 of log(weight) + Gumbel(seed, position, purpose, id). Ties go to
// the lower id. Returns -1 when every weight is 0.
int32_t SampleGumbelMax(std::span<const float> weights, uint64_t seed, int64_t position,
                        RandomPurpose purpose);

}  // namespace specgen
