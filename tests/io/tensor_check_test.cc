// The load-time check for non-finite weights: for every packed type it reads the block's f16 scales
// at the offsets the dequantizer uses (a NaN planted there must make the dequantized block non-finite,
// so a wrong offset fails here), every value of the plain float types, and over a WeightSet it finds
// a planted NaN whichever thread scans it, naming the tensor, the block and the row.
#include "engine/io/tensor_check.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

constexpr uint16_t kF16NaN = 0x7e00, kF16Inf = 0x7c00, kF16NegInf = 0xfc00;

// One valid block of `t`: quantized from random values where the type has a quantizer, else random
// bytes with every f16 scale set to 1.0 by the caller's poisoning loop below.
std::vector<uint8_t> ValidBlock(DType t, std::mt19937& rng) {
  const DTypeInfo& info = Info(t);
  std::vector<uint8_t> block(static_cast<size_t>(info.block_bytes));
  if (info.from_f32 != nullptr) {
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<size_t>(info.block_elems));
    for (float& v : x) v = normal(rng);
    info.from_f32(x.data(), info.block_elems, block.data());
  } else {
    for (uint8_t& b : block) b = static_cast<uint8_t>(rng());
  }
  return block;
}

bool DequantizesFinite(DType t, const std::vector<uint8_t>& block) {
  std::vector<float> y(static_cast<size_t>(Info(t).block_elems));
  Info(t).to_f32(block.data(), Info(t).block_elems, y.data());
  for (float v : y) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

TEST(FindNonFinite, ReadsEveryPackedTypesScalesWhereTheDequantizerDoes) {
  std::mt19937 rng(7);
  int types = 0;
  for (DType t : AllDTypes()) {
    const DTypeInfo& info = Info(t);
    if (!info.quantized) continue;
    ++types;
    // Every 16-bit position of the block: poisoned with NaN, the dequantized block is non-finite
    // exactly where the check reports a scale (integers elsewhere cannot be non-finite).
    int scales = 0;
    for (int64_t at = 0; at + 2 <= info.block_bytes; at += 2) {
      std::vector<uint8_t> block = ValidBlock(t, rng);
      // Random bytes may already hold a non-finite scale (q4_1, q2_k, q3_k have no quantizer here).
      if (FindNonFinite(t, block.data(), 0, 1)) {
        for (int64_t o = 0; o + 2 <= info.block_bytes; o += 2) {
          const uint16_t one = 0x3c00;
          if (FindNonFinite(t, block.data(), 0, 1)) std::memcpy(block.data() + o, &one, 2);
        }
      }
      ASSERT_FALSE(FindNonFinite(t, block.data(), 0, 1)) << info.name;
      ASSERT_TRUE(DequantizesFinite(t, block)) << info.name << ": the valid block";
      std::memcpy(block.data() + at, &kF16NaN, 2);
      const auto found = FindNonFinite(t, block.data(), 0, 1);
      EXPECT_EQ(found.has_value(), !DequantizesFinite(t, block)) << info.name << " offset " << at;
      if (found) {
        ++scales;
        EXPECT_TRUE(std::isnan(found->value)) << info.name;
        EXPECT_TRUE(found->field == "d" || found->field == "dmin" || found->field == "m") << found->field;
      }
    }
    // MXFP4's scale is an E8M0 byte, a power of two finite for every value: no 16-bit field to poison.
    if (t != DType::kMXFP4) EXPECT_GE(scales, 1) << info.name << ": no scale found";
  }
  EXPECT_GE(types, 10);
}

TEST(FindNonFinite, PlainFloatsEveryValueAndTheFirstBlockInTheRange) {
  std::vector<float> f32(100, 1.0f);
  f32[37] = std::numeric_limits<float>::infinity();
  f32[60] = std::nanf("");
  auto bad = FindNonFinite(DType::kF32, reinterpret_cast<const uint8_t*>(f32.data()), 0, 100);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->block, 37);
  EXPECT_EQ(bad->field, "value");
  bad = FindNonFinite(DType::kF32, reinterpret_cast<const uint8_t*>(f32.data()), 38, 62);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->block, 60);
  EXPECT_FALSE(FindNonFinite(DType::kF32, reinterpret_cast<const uint8_t*>(f32.data()), 0, 37));
  // The largest finite values and subnormals pass; each 16-bit type's infinity does not.
  const std::vector<uint16_t> f16 = {0x7bff, 0x0001, 0xfbff, kF16NegInf};
  bad = FindNonFinite(DType::kF16, reinterpret_cast<const uint8_t*>(f16.data()), 0, 4);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->block, 3);
  const std::vector<uint16_t> bf16 = {0x7f7f, 0x0001, F32ToBf16(-3.0f), 0x7f80};
  bad = FindNonFinite(DType::kBF16, reinterpret_cast<const uint8_t*>(bf16.data()), 0, 4);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->block, 3);
  EXPECT_TRUE(std::isinf(bad->value));
}

// A WeightSet of several tensors, one large enough to span many chunks, checked on 4 threads.
TEST(CheckTensorsFinite, NamesTheTensorBlockAndRowAndReportsProgress) {
  const int64_t rows = 4096, cols = 256;  // q8_0: 8 blocks a row, 34 B a block: 1.06 MiB
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * cols / 32 * 34), 0);
  std::mt19937 rng(3);
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    const std::vector<uint8_t> block = ValidBlock(DType::kQ8_0, rng);
    std::memcpy(bytes->data() + b * 34, block.data(), 34);
  }
  auto small = std::make_shared<std::vector<float>>(64, 0.5f);
  auto build = [&] {
    WeightSet ws;
    TensorView big{DType::kQ8_0, 2, {rows, cols}, Location::kHost, bytes->data(), bytes->size()};
    TensorView norm{DType::kF32, 1, {64}, Location::kHost, small->data(), small->size() * 4};
    ws.Add({Role::kTokenEmbd}, big, "token_embd.weight");
    ws.Add({Role::kOutputNorm}, norm, "output_norm.weight");
    return ws;
  };
  std::atomic<size_t> last{0}, total_seen{0};
  TensorCheckOptions options;
  options.threads = 4;
  options.chunk_bytes = 4096;  // 120 blocks a chunk: 274 chunks over the threads
  options.progress = [&](size_t done, size_t total) {
    size_t prev = last.load();
    while (done > prev && !last.compare_exchange_weak(prev, done)) {
    }
    total_seen = total;
  };
  EXPECT_TRUE(CheckTensorsFinite(build(), "m.gguf", options).ok());
  EXPECT_EQ(last.load(), bytes->size() + small->size() * 4);
  EXPECT_EQ(total_seen.load(), last.load());

  // Row 4000, its block 5: block 32005.
  std::memcpy(bytes->data() + 32005 * 34, &kF16Inf, 2);
  absl::Status status = CheckTensorsFinite(build(), "m.gguf", options);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("m.gguf: tensor token_embd.weight (token_embd, q8_0 [4096, 256]): block 32005 (row 4000) "
                        "has scale d = inf"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("--no-check-tensors"));
  // A second, earlier one wins, whichever thread meets it first.
  std::memcpy(bytes->data() + 7 * 34, &kF16NaN, 2);
  status = CheckTensorsFinite(build(), "m.gguf", options);
  EXPECT_THAT(std::string(status.message()), HasSubstr("block 7 (row 0) has scale d = nan"));

  (*small)[9] = -std::numeric_limits<float>::infinity();
  std::memset(bytes->data(), 0, bytes->size());  // all-zero q8_0 blocks: scale 0, finite
  status = CheckTensorsFinite(build(), "m.gguf", options);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("tensor output_norm.weight (output_norm, f32 [64]): element 9 (row 0, column 9) is -inf"));
}

}  // namespace
}  // namespace specgen
