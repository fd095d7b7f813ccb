// Per-token log-probabilities for --n-probs and the server's `logprobs`: the emitted token's
// log-probability and the N most probable tokens at its position, as llama.cpp's n_probs and
// OpenAI's top_logprobs report them. They are the model's own distribution at that position, the
// softmax of its raw logits: not the sampling distribution (temperature, top-k/p, min-p), so that a
// figure means the same whatever the sampling flags, as in both of those APIs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specgen {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;  // natural log; -inf where the probability underflows to 0
};

struct TokenLogprobs {
  TokenLogprob chosen;            // the token emitted at this position
  std::vector<TokenLogprob> top;  // the n most probable, most probable first; ties: lower id first
};

// log_softmax of `logits` (one row over the vocabulary) at `chosen` and its `n` largest entries
// (n is clamped to the vocabulary). Sums run in double so that a 150k-token vocabulary's normaliser
// costs no precision the float logprob could show.
TokenLogprobs TopLogprobs(std::span<const float> logits, int32_t chosen, int n);

}  // namespace specgen
