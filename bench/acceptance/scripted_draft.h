// The acceptance regimes' script (docs/design.md §3.5; benchmarks only, never generate or chat): at
// depth j (0-based) of a step, the draft token at absolute position `position` is the target's own
// greedy token there with probability a_j, else a token the target does not pick. The decision is a
// counter-based hash of (seed, position, depth) through the keyed Philox (engine/sampling/
// keyed_random.h), so a run reproduces and the GPU kernel (kernels/scripted_draft.cuh) computes the
// same tokens. Header-only, CUDA-usable.
#pragma once

#include <cstdint>

#include "engine/sampling/keyed_random.h"

namespace specgen::bench {

// The token the script proposes: `target_token` when the keyed uniform of (seed, position, depth) is
// below `a`, else another token of the vocabulary, (target_token + 1 + r mod (vocab − 1)) mod vocab
// with r the block's second word (so a miss never repeats the target's token, whatever r).
SPECGEN_HD int32_t ScriptedDraftToken(uint64_t seed, int64_t position, int depth, double a,
                                      int32_t target_token, int32_t vocab) {
  const PhiloxCounter bits =
      KeyedBlock(seed, position, RandomPurpose::kScriptedDraft, static_cast<uint32_t>(depth));
  if (BitsToOpenUnit(bits.v[0]) < a || vocab < 2) return target_token;
  const uint32_t other = 1u + bits.v[1] % static_cast<uint32_t>(vocab - 1);
  return static_cast<int32_t>((static_cast<uint32_t>(target_token) + other) % static_cast<uint32_t>(vocab));
}

}  // namespace specgen::bench
