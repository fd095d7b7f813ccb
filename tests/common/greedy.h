// Test helper shared by the golden-logit tests: a greedy continuation through the KV cache (prefill,
// then one token a step, argmax with ties to the lower id). `prefill_chunk` splits the prefill into
// passes of at most that many tokens (the CUDA backend's small-batch path, as decoding uses it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen::testing {

inline std::vector<int32_t> GreedyContinuation(Transformer& lm, const std::vector<int32_t>& prompt, int n,
                                               size_t prefill_chunk = std::numeric_limits<size_t>::max()) {
  std::vector<float> logits;
  std::vector<int32_t> out;
  for (size_t b = 0; b < prompt.size(); b += prefill_chunk) {
    const auto part = std::span<const int32_t>(prompt).subspan(b, std::min(prefill_chunk, prompt.size() - b));
    EXPECT_TRUE(lm.Forward(part, &logits).ok());
  }
  const int64_t v = lm.vocab_size();
  for (int i = 0; i < n; ++i) {
    const float* last = logits.data() + logits.size() - v;
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + v) - last);
    out.push_back(next);
    if (i + 1 < n) {
      EXPECT_TRUE(lm.Forward(std::span(&next, 1), &logits).ok());
    }
  }
  return out;
}

}  // namespace specgen::testing
