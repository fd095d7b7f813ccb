#include "engine/sampling/top_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace specgen {

TokenLogprobs TopLogprobs(std::span<const float> logits, int32_t chosen, int n) {
  TokenLogprobs out;
  if (logits.empty()) return out;
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  auto logprob = [&](int32_t id) { return static_cast<float>(static_cast<double>(logits[id]) - log_z); };
  const int32_t vocab = static_cast<int32_t>(logits.size());
  out.chosen = {chosen, chosen >= 0 && chosen < vocab ? logprob(chosen) : -std::numeric_limits<float>::infinity()};
  const int top = std::clamp(n, 0, static_cast<int>(vocab));
  if (top == 0) return out;
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
  // Larger logit first, the lower id on a tie (greedy's rule): the first entry is greedy's token.
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  out.top.reserve(static_cast<size_t>(top));
  for (int i = 0; i < top; ++i) out.top.push_back({ids[static_cast<size_t>(i)], logprob(ids[static_cast<size_t>(i)])});
  return out;
}

}  // namespace specgen
