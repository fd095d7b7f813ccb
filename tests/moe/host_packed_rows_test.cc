// The host kernels of the packed product (moe/host/packed_rows.h) against the one definition
// (engine/core/packed_product.h, the scalar code the GPU is tested against): equal bit for bit (memcmp,
// so the sign of zero counts; a NaN must meet a NaN, of any payload: where two NaNs meet in a product,
// which one survives is the compiler's operand order, on the host as on the GPU, and the GPU tests
// accept any NaN likewise) for every packed type, n = 1..16 tokens, every ISA this
// CPU runs, rows whose block count has vector tails, activations with NaN, Inf, all-zero and extreme
// blocks, and weights with edge scales (f16 max, subnormal, ±0, Inf, NaN; MXFP4's E8M0 bytes 0, 1, 2,
// 254, 255).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/packed_product.h"
#include "gtest/gtest.h"
#include "moe/host/packed_rows.h"
#include "tests/common/random_blocks.h"

namespace specgen::moe_host {
namespace {

std::string Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", b);
  return s;
}

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

// Activations for n tokens: normal values of mixed binades, and per token some special blocks.
std::vector<float> Tokens(std::mt19937_64& rng, int64_t n, int64_t k) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> binade(-20, 20);
  std::vector<float> x(static_cast<size_t>(n * k));
  for (auto& v : x) v = std::ldexp(normal(rng), binade(rng));
  const int64_t nb = k / 32;
  std::uniform_int_distribution<int64_t> block(0, nb - 1);
  for (int64_t t = 0; t < n; ++t) {
    float* xt = x.data() + t * k;
    switch (t % 5) {
      case 0: xt[block(rng) * 32 + 5] = std::numeric_limits<float>::quiet_NaN(); break;
      case 1: xt[block(rng) * 32 + 31] = -std::numeric_limits<float>::infinity(); break;
      case 2: std::fill_n(xt + block(rng) * 32, 32, 0.f); break;
      case 3: std::fill_n(xt + block(rng) * 32, 32, std::numeric_limits<float>::max()); break;
      default: xt[block(rng) * 32] = std::numeric_limits<float>::denorm_min(); break;
    }
  }
  return x;
}

// Overwrites some blocks' f16 scales with edge values (MXFP4: its E8M0 byte; 254 and 255, 2^126 and
// 2^127, overflow a term to ±Inf, so they come with the non-finite edges).
void EdgeScales(std::mt19937_64& rng, DType t, std::vector<uint8_t>* w, bool non_finite) {
  const int64_t block_bytes = Info(t).block_bytes, blocks = static_cast<int64_t>(w->size()) / block_bytes;
  if (t == DType::kMXFP4) {
    std::vector<uint8_t> edges = {0, 1, 2, 3, 127, 128};
    if (non_finite) edges.insert(edges.end(), {254, 255});
    std::uniform_int_distribution<size_t> pick(0, edges.size() - 1);
    std::bernoulli_distribution often(0.2);
    for (int64_t b = 0; b < blocks; ++b) {
      if (often(rng)) (*w)[b * block_bytes] = edges[pick(rng)];
    }
    return;
  }
  std::vector<uint16_t> edges = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x8000, 0x0400};
  if (non_finite) edges.insert(edges.end(), {0x7c00, 0xfc00, 0x7e00, 0x7d13});
  std::uniform_int_distribution<size_t> pick(0, edges.size() - 1);
  std::bernoulli_distribution often(0.2);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int off : testing::BlockHalfOffsets(t)) {
      if (often(rng)) std::memcpy(w->data() + b * block_bytes + off, &edges[pick(rng)], 2);
    }
  }
}

TEST(HostPackedRows, EveryIsaEqualsTheDefinitionBitForBit) {
  std::mt19937_64 rng(44);
  const auto isas = SupportedIsas();
  ASSERT_EQ(isas.front(), Isa::kScalar);
  std::printf("ISAs on this CPU:");
  for (Isa isa : isas) std::printf(" %s", std::string(IsaName(isa)).c_str());
  std::printf("\n");
  const int64_t rows = 19;
  for (DType t : kTypes) {
    // 256: 8 blocks (slices of 0 or 1); 768: 24 (the Qwen3-30B-A3B down rows); 2304: 72 (vector tails);
    // 512, 1024, 2048: sixteen equal slices of 1, 2, 4 blocks.
    for (int64_t k : {256, 768, 2304, 512, 1024, 2048}) {
      for (bool non_finite : {false, true}) {
        auto wbytes = testing::RandomBlocks(rng, t, rows, k);
        EdgeScales(rng, t, &wbytes, non_finite);
        const PackedMatrix w{t, wbytes.data(), rows, k};
        ASSERT_TRUE(CheckPacked(w, "w").ok());
        for (int64_t n = 1; n <= 16; ++n) {
          const auto x = Tokens(rng, n, k);
          QuantizedTokens qx;
          qx.Quantize(x.data(), n, k);
          // The definition, row by row.
          std::vector<float> want(static_cast<size_t>(n * rows));
          const int64_t nb = k / 32;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < n; ++i) {
              want[i * rows + r] = packed_product::RowProduct(t, wbytes.data() + r * PackedRowBytes(w), k,
                                                              qx.q.data() + i * k, qx.d.data() + i * nb,
                                                              qx.sum.data() + i * nb);
            }
          }
          std::vector<uint8_t> scratch(RowsScratchBytes(k) + 64);
          uint8_t* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
          for (Isa isa : isas) {
            std::vector<float> got(want.size(), -1.f);
            // Two calls splitting the rows unevenly: a split never changes a row.
            PackedRows(isa, w, 0, 7, qx, got.data(), rows, aligned);
            PackedRows(isa, w, 7, rows, qx, got.data(), rows, aligned);
            for (size_t i = 0; i < want.size(); ++i) {
              if (std::isnan(want[i]) && std::isnan(got[i])) continue;
              ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
                  << IsaName(isa) << " " << Name(t) << " k=" << k << " n=" << n << " token " << i / rows
                  << " row " << i % rows << ": " << Bits(got[i]) << " vs the definition's " << Bits(want[i]);
            }
          }
        }
      }
    }
  }
}

TEST(HostPackedRows, RefusesTypesAndShapesTheDefinitionDoesNotCover) {
  uint8_t byte = 0;
  EXPECT_NE(CheckPacked({DType::kF16, &byte, 4, 64}, "gate").message().find("gate: type f16"), std::string::npos);
  EXPECT_NE(CheckPacked({DType::kQ4_K, &byte, 4, 64}, "up").message().find("not whole q4_k blocks of 256"),
            std::string::npos);
  EXPECT_NE(CheckPacked({DType::kQ8_0, nullptr, 4, 64}, "down").message().find("down: no data"), std::string::npos);
}

TEST(HostPackedRows, IsaNamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) EXPECT_EQ(*ParseIsa(IsaName(isa)), isa);
  EXPECT_FALSE(ParseIsa("sse9").ok());
}

}  // namespace
}  // namespace specgen::moe_host
