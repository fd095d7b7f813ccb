// Random draws keyed by (seed, absolute position, purpose[, vocab id]) through Philox, never by step,
// batch row or call count: a token's randomness is the same whichever pass, draft length or batch
// computes it. This is what makes `coupled` acceptance reproduce plain decoding per seed, and what a
// GPU kernel must reproduce (header-only, CUDA-usable).
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/sampling/philox.h"

namespace specgen {

// Distinct streams of randomness for one position. The values are part of the format: a GPU kernel
// keyed the same way draws the same numbers.
enum class RandomPurpose : uint32_t {
  kTargetSample = 1,  // Gumbel noise for sampling the target's token (plain decoding, bonus token,
                      // and the shared noise of `coupled` acceptance)
  kDraftSample = 2,   // Gumbel noise the draft samples with in `rejection` mode
  kAcceptUniform = 3, // u of the min(1, p/q) test
  kResidual = 4,      // Gumbel noise for the resample from norm(max(0, p - q))
  kScriptedDraft = 5, // the benchmarks' scripted draft (bench/acceptance): block = draft depth
};

// Counter layout: v[0] = vocab block (ids 4b..4b+3 share one Philox call), v[1..2] = position (64 bit),
// v[3] = purpose. Key = the 64-bit seed.
SPECGEN_HD PhiloxCounter KeyedBlock(uint64_t seed, int64_t position, RandomPurpose purpose,
                                    uint32_t block) {
  const uint64_t pos = static_cast<uint64_t>(position);
  PhiloxCounter c{{block, static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                   static_cast<uint32_t>(purpose)}};
  PhiloxKey k{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  return Philox4x32x10(c, k);
}

// Maps 32 random bits to the open interval (0, 1): (x + 1/2) / 2^32, exact in double, never 0 or 1
// (so log(u) and log(-log(u)) are finite).
SPECGEN_HD double BitsToOpenUnit(uint32_t x) { return (static_cast<double>(x) + 0.5) * 0x1p-32; }

// One uniform per (seed, position, purpose).
SPECGEN_HD double KeyedUniform(uint64_t seed, int64_t position, RandomPurpose purpose) {
  return BitsToOpenUnit(KeyedBlock(seed, position, purpose, 0).v[0]);
}

// Standard Gumbel noise -log(-log(u)) for one vocab id.
SPECGEN_HD double GumbelFromBits(uint32_t x) { return -std::log(-std::log(BitsToOpenUnit(x))); }

SPECGEN_HD double KeyedGumbel(uint64_t seed, int64_t position, RandomPurpose purpose, uint32_t id) {
  return GumbelFromBits(KeyedBlock(seed, position, purpose, id >> 2).v[id & 3]);
}

}  // namespace specgen
