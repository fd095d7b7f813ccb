// A GGUF whose weights mix the types llama-quantize puts into K-quant files of small models (Q5_0,
// Q5_1, Q4_1 where a row is not a multiple of 256; Q2_K, Q3_K) loads and runs: its logits equal, bit
// for bit, those of the same file with those tensors stored as the f32 values they dequantize to.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"
#include "tests/common/cpu_lm.h"

namespace specgen {
namespace {

// Byte offsets of each type's f16 scale fields within a block (formats.md §2).
std::vector<size_t> ScaleOffsets(DType t) {
  switch (t) {
    case DType::kQ4_1: case DType::kQ5_1: return {0, 2};
    case DType::kQ5_0: return {0};
    case DType::kQ2_K: return {80, 82};
    default: return {108};  // Q3_K
  }
}

// Random codes with small scales, so that the products stay in a sane range.
std::vector<uint8_t> RandomBlocks(DType t, int64_t row, int64_t rows, std::mt19937& rng) {
  const size_t bytes = *TensorBytes(t, row, rows);
  std::vector<uint8_t> out(bytes);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const size_t block = static_cast<size_t>(Info(t).block_bytes);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (size_t at = 0; at < bytes; at += block) {
    for (size_t off : ScaleOffsets(t)) {
      const uint16_t h = F32ToF16(scale(rng));
      std::memcpy(&out[at + off], &h, 2);
    }
  }
  return out;
}

std::vector<float> Logits(const std::string& path, const std::vector<int32_t>& tokens) {
  CpuBackend be(2);
  std::unique_ptr<Transformer> lm = testing::LoadCpuLm(path, &be, 0);
  std::vector<float> logits;
  if (lm == nullptr) return logits;
  const absl::Status s = lm->Forward(tokens, &logits);
  EXPECT_TRUE(s.ok()) << path << ": " << s;
  return logits;
}

TEST(QuantExtraModel, MixedLegacyAndLowKQuantFileRuns) {
  ModelSpec spec = SynthSpec("tiny-dense").value();
  spec.hidden = 256;  // rows of 256 for the K-quants; q is 4 x 16 = 64 wide, the FFN 128
  auto src = SynthWeights(spec, DType::kF32, 11, 1);
  ASSERT_TRUE(src.ok()) << src.status();
  const std::string dir = ::testing::TempDir();
  const std::string f32_path = dir + "/extra_f32.gguf";
  ASSERT_TRUE(ExportGguf(spec, (*src)->weights, f32_path, GgufExportOptions{}).ok());
  auto f32 = GgufFile::Open(f32_path);
  ASSERT_TRUE(f32.ok()) << f32.status();

  const std::vector<std::pair<std::string, DType>> plan = {
      {"blk.0.attn_q.weight", DType::kQ2_K},      {"blk.0.attn_k.weight", DType::kQ3_K},
      {"blk.0.attn_v.weight", DType::kQ5_0},      {"blk.0.ffn_down.weight", DType::kQ5_1},
      {"blk.1.ffn_gate.weight", DType::kQ4_1},    {"blk.1.attn_output.weight", DType::kQ5_0},
      {"blk.1.ffn_up.weight", DType::kQ3_K},      {"blk.1.attn_q.weight", DType::kQ2_K}};
  std::mt19937 rng(5);
  GgufWriter quant, dequant;
  for (const auto& [k, v] : (*f32)->metadata()) {
    quant.Set(k, v);
    dequant.Set(k, v);
  }
  std::deque<std::vector<uint8_t>> keep;  // tensor bytes alive (and in place) until both writes
  for (const GgufTensorInfo& t : (*f32)->tensors()) {
    DType type = DType::kF32;
    for (const auto& [name, pt] : plan) {
      if (name == t.name) type = pt;
    }
    if (type == DType::kF32) {
      ASSERT_TRUE(quant.AddTensor(t.name, t.ne, t.dtype, (*f32)->TensorData(t), t.bytes).ok());
      ASSERT_TRUE(dequant.AddTensor(t.name, t.ne, t.dtype, (*f32)->TensorData(t), t.bytes).ok());
      continue;
    }
    ASSERT_EQ(t.ne.size(), 2u) << t.name;
    keep.push_back(RandomBlocks(type, t.ne[0], t.ne[1], rng));
    const std::vector<uint8_t>& q = keep.back();
    std::vector<uint8_t> f(static_cast<size_t>(t.ne[0] * t.ne[1]) * sizeof(float));
    ASSERT_TRUE(DequantizeRows(type, q.data(), t.ne[1], t.ne[0], reinterpret_cast<float*>(f.data())).ok());
    keep.push_back(std::move(f));
    ASSERT_TRUE(quant.AddTensor(t.name, t.ne, type, q.data(), q.size()).ok()) << t.name;
    ASSERT_TRUE(dequant.AddTensor(t.name, t.ne, DType::kF32, keep.back().data(), keep.back().size()).ok());
  }
  const std::string q_path = dir + "/extra_q.gguf", d_path = dir + "/extra_dq.gguf";
  ASSERT_TRUE(quant.Write(q_path).ok());
  ASSERT_TRUE(dequant.Write(d_path).ok());

  // The file really holds the new types (the comparison below would pass on two f32 files).
  auto loaded = LoadModel(q_path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->weights.Get({Role::kAttnQ, 0})->dtype, DType::kQ2_K);
  EXPECT_EQ((*loaded)->weights.Get({Role::kAttnK, 0})->dtype, DType::kQ3_K);
  EXPECT_EQ((*loaded)->weights.Get({Role::kFfnDown, 0})->dtype, DType::kQ5_1);
  EXPECT_EQ((*loaded)->weights.Get({Role::kFfnGate, 1})->dtype, DType::kQ4_1);

  const std::vector<int32_t> tokens = {3, 141, 59, 26, 5, 35, 89, 79};
  const std::vector<float> got = Logits(q_path, tokens);
  const std::vector<float> want = Logits(d_path, tokens);
  ASSERT_EQ(got.size(), tokens.size() * static_cast<size_t>(spec.vocab_size));
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  EXPECT_EQ(got, want);
  for (const std::string& p : {f32_path, q_path, d_path}) std::remove(p.c_str());
}

}  // namespace
}  // namespace specgen
