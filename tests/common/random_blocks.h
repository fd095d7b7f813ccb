// Random rows of a GGUF block type for the packed-weight tests: every byte random except the f16 scale
// fields, which get finite values of random sign over a range of binades (subnormal f16 now and then),
// so that every quant, sub-block scale and min is exercised without NaN or Inf scales, and MXFP4's E8M0
// scale bytes, which get e in 100..140 (scales 2^-28 .. 2^12: products far from fp32's range; the
// dedicated tests add the extremes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/half.h"

namespace specgen::testing {

// Offsets of a block's f16 fields (docs/formats.md §2).
inline std::vector<int> BlockHalfOffsets(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0: return {0};
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

// `rows` rows of `cols` elements of `t` (cols a whole number of blocks).
inline std::vector<uint8_t> RandomBlocks(std::mt19937_64& rng, DType t, int64_t rows, int64_t cols) {
  const int64_t block_bytes = Info(t).block_bytes;
  const int64_t bytes = rows * (cols / Info(t).block_elems) * block_bytes;
  std::vector<uint8_t> b(static_cast<size_t>(bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : b) v = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> exponent(-18.f, -4.f);
  std::bernoulli_distribution negative(0.3);
  for (int64_t i = 0; i < bytes / block_bytes; ++i) {
    for (int off : BlockHalfOffsets(t)) {
      const uint16_t h = F32ToF16(std::exp2(exponent(rng)) * (negative(rng) ? -1.f : 1.f));
      std::memcpy(&b[static_cast<size_t>(i * block_bytes + off)], &h, 2);
    }
  }
  if (t == DType::kMXFP4) {
    std::uniform_int_distribution<int> e(100, 140);
    for (int64_t i = 0; i < bytes / block_bytes; ++i) {
      b[static_cast<size_t>(i * block_bytes)] = static_cast<uint8_t>(e(rng));
    }
  }
  return b;
}

}  // namespace specgen::testing
