// One position's next-token distribution, as perplexity and KL divergence need it: the log-likelihood
// of a token under fp32 logits (log-softmax in double), and the compact form a reference run stores
// for every vocabulary entry (docs/formats.md §9): log-probabilities within 16 nats of the top one,
// quantized to 16 bits, llama.cpp's encoding for its KL-divergence base files.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specgen {

// -log softmax(logits)[token], computed in double.
double NegLogLikelihood(std::span<const float> logits, int32_t token);

// The index of the largest logit; the lowest index on ties.
int32_t ArgMax(std::span<const float> logits);

// log p_i ≈ min_log_prob + scale · q[i] for every vocabulary entry i. Log-probabilities more than
// kLogProbRange below the largest one are stored as that floor.
struct EncodedLogProbs {
  float min_log_prob = 0.0f;
  float scale = 0.0f;
  std::vector<uint16_t> q;

  double LogProb(int64_t i) const { return static_cast<double>(min_log_prob) + static_cast<double>(scale) * q[i]; }
};
inline constexpr double kLogProbRange = 16.0;

// Encodes log softmax(logits) (computed in double) into `out` (q resized to logits.size()).
void EncodeLogProbs(std::span<const float> logits, EncodedLogProbs* out);

// KL(base ‖ current) = Σ_i p_base,i · (log p_base,i − log p_current,i) over the decoded values of two
// encodings of the same vocabulary size. Both sides go through the same encoding, so a run compared
// with itself gives 0 exactly.
double KlDivergence(const EncodedLogProbs& base, const EncodedLogProbs& current);

}  // namespace specgen
