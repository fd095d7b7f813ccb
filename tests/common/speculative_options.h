// SpeculativeOptions from the handful of fields the speculative tests vary (one place instead of a
// field-by-field copy in each test).
#pragma once

#include <cstdint>

#include "engine/sampling/sampling_params.h"
#include "engine/speculative/speculative_decoder.h"

namespace specgen::testing {

inline SpeculativeOptions MakeSpeculativeOptions(SamplingParams sampling, int draft_max, bool adaptive,
                                                 AcceptMode mode, int64_t max_new_tokens) {
  SpeculativeOptions o;
  o.sampling = sampling;
  o.draft_max = draft_max;
  o.adaptive = adaptive;
  o.accept = mode;
  o.max_new_tokens = max_new_tokens;
  return o;
}

}  // namespace specgen::testing
