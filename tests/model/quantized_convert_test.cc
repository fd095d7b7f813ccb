// A model converted to llama.cpp's file types (q8_0, q6_k, q4_k_m): the file holds the mix
// quant_mix.h chooses, each tensor's bytes are the quantizer's bytes of the f32 weights, and the CPU
// logits stay within a tolerance derived from the types' step sizes of the f32 model's.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/quant.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"
#include "tests/common/cpu_lm.h"

namespace specgen {
namespace {

// tiny-dense widened so that most rows are K-quant blocks: hidden 256, FFN 512, 4 layers (so q4_k_m
// gives layers 2 and 3 more bits), heads of 16 (attn_output rows of 64 take the 32-block fallbacks).
ModelSpec Spec() {
  ModelSpec s = *SynthSpec("tiny-dense");
  s.hidden = 256;
  s.ffn_dim = 512;
  s.n_layers = 4;
  s.layer_is_moe.assign(4, false);
  return s;
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

std::string Export(const LoadedModel& src, const std::string& name, const char* type) {
  const std::string path = ::testing::TempDir() + "/qconv_" + name + ".gguf";
  GgufExportOptions opt;
  opt.type = *ParseExportType(type);
  absl::Status s = ExportGguf(src.spec, src.weights, path, opt);
  EXPECT_TRUE(s.ok()) << s;
  return path;
}

double RelRms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantizedConvert, MixPerTensorAndBytesOfTheQuantizers) {
  const ModelSpec spec = Spec();
  auto src = SynthWeights(spec, DType::kF32, 21, 1);
  ASSERT_TRUE(src.ok()) << src.status();
  const std::string path = Export(**src, "mix", "q4_k_m");
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto type_of = [&](const std::string& name) {
    const GgufTensorInfo* t = (*file)->FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->dtype : DType::kF32;
  };
  EXPECT_EQ(type_of("token_embd.weight"), DType::kQ6_K);  // tied: the head
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(type_of("blk.1.ffn_down.weight"), DType::kQ4_K);
  EXPECT_EQ(type_of("blk.2.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(type_of("blk.3.ffn_down.weight"), DType::kQ6_K);
  EXPECT_EQ(type_of("blk.3.attn_v.weight"), DType::kQ6_K);
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), DType::kQ4_K);
  EXPECT_EQ(type_of("blk.0.attn_output.weight"), DType::kQ5_0);  // rows of 64
  EXPECT_EQ(type_of("blk.0.attn_norm.weight"), DType::kF32);
  const GgufValue* ftype = (*file)->Find("general.file_type");
  ASSERT_NE(ftype, nullptr);
  EXPECT_EQ(ftype->AsInt().value_or(0), 15);

  // blk.2.ffn_down's bytes are QuantizeRow(Q6_K) of the f32 rows.
  const TensorView w = *(*src)->weights.Get({Role::kFfnDown, 2});
  std::vector<uint8_t> want(*TensorBytes(DType::kQ6_K, w.cols(), w.rows()));
  ASSERT_EQ(w.dtype, DType::kF32);
  for (int64_t r = 0; r < w.rows(); ++r) {
    ASSERT_TRUE(QuantizeRow(DType::kQ6_K, static_cast<const float*>(w.data) + r * w.cols(), w.cols(),
                            want.data() + r * *RowBytes(DType::kQ6_K, w.cols()))
                    .ok());
  }
  const GgufTensorInfo* t = (*file)->FindTensor("blk.2.ffn_down.weight");
  ASSERT_EQ(t->bytes, want.size());
  EXPECT_EQ(std::memcmp((*file)->TensorData(*t), want.data(), want.size()), 0);
}

// Tolerance. Weights are uniform in ±a; a type whose grid has `levels` steps over a block's range 2a
// rounds with an RMS error of (2a / levels) / sqrt(12) against the weights' RMS a / sqrt(3), a
// relative error e = 1 / levels (Q8_0: 254 steps, Q6_K: 64, Q4_K: 15). Each of the M = 7 products
// of a layer and the head adds such an error, independently, so the logits move by about
// e · sqrt(M · n_layers + 1) relative; the test allows twice that (random weights route some errors
// through larger activations), which a broken quantizer (relative errors near 1) far exceeds.
TEST(QuantizedConvert, CpuLogitsWithinTheTypesStep) {
  const ModelSpec spec = Spec();
  auto src = SynthWeights(spec, DType::kF32, 22, 1);
  ASSERT_TRUE(src.ok()) << src.status();
  const std::vector<int32_t> tokens = {1, 17, 42, 99, 150, 7, 255, 3};
  const std::vector<float> ref = Logits(Export(**src, "f32", "f32"), tokens);
  ASSERT_EQ(ref.size(), tokens.size() * spec.vocab_size);
  const double paths = std::sqrt(7.0 * spec.n_layers + 1);
  struct Case {
    const char* type;
    double levels;  // of the coarsest type the mix uses for most weights
  };
  for (const Case& c : {Case{"q8_0", 254}, Case{"q6_k", 64}, Case{"q4_k_m", 15}}) {
    const std::vector<float> got = Logits(Export(**src, c.type, c.type), tokens);
    ASSERT_EQ(got.size(), ref.size());
    const double err = RelRms(got, ref), bound = 2.0 * paths / c.levels;
    EXPECT_LE(err, bound) << c.type;
    EXPECT_GT(err, 0.0) << c.type << ": quantized logits equal the f32 ones exactly";
    std::printf("%s: relative RMS logit error %.5f (bound %.5f)\n", c.type, err, bound);
  }
}

}  // namespace
}  // namespace specgen
