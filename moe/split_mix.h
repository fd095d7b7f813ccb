// SplitMix64: the small, seedable generator the routing generators draw from, the locality model here
// and the benchmarks' traces (bench/routing): one 64-bit state a stream, so each layer or trace keeps its
// own reproducible sequence.
#pragma once

#include <cstdint>

namespace specgen::moe {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace specgen::moe
