// SamplingParams: how logits become the distribution a token is drawn from. The same parameters
// shape the target's p and the draft's q (docs/design.md §6.5), so acceptance compares like with like.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace specgen {

struct SamplingParams {
  float temperature = 0.8f;  // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 40;        // keep the k most probable ids; 0 = off
  float top_p = 0.95f;       // keep the smallest most-probable set with mass >= top_p; 1 = off
  float min_p = 0.05f;       // keep ids with p >= min_p * max p; 0 = off
  uint64_t seed = 0;         // keys every random draw with the absolute position (keyed_random.h)

  bool greedy() const { return temperature <= 0.0f; }
  static SamplingParams Greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  static SamplingParams Plain(float temperature, uint64_t seed) {  // no filtering
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
  }
};

// Checks ranges; the error names the flag (--temp, --top-k, --top-p, --min-p).
absl::Status Validate(const SamplingParams& params);
std::string ToString(const SamplingParams& params);

}  // namespace specgen
