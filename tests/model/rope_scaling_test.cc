// RoPE scaling: the per-pair inverse frequencies of linear and llama3 scaling and of rope_freqs.weight,
// their reading from config.json and GGUF (YaRN and unknown types refused naming the file and key),
// their writing by ExportGguf, and the forward pass applying them (or a backend refusing them).
#include "engine/model/rope_scaling.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_export.h"
#include "engine/io/hf_config.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

using ::testing::HasSubstr;

// Llama 3.1's published parameters (config.json of Llama-3.1-8B).
RopeScaling Llama31() {
  RopeScaling s;
  s.kind = RopeScalingKind::kLlama3;
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_context_length = 8192;
  return s;
}

// The llama3 remap as published (transformers' _compute_llama3_parameters), in double, written from
// the formula: wavelengths below original/high_freq_factor keep their frequency, those above
// original/low_freq_factor are divided by factor, and between them
// inv' = (1 − smooth)·inv/factor + smooth·inv with smooth = (original/wavelen − low)/(high − low).
std::vector<double> Llama3Reference(double theta, int d, double factor, double low, double high, double original) {
  std::vector<double> out;
  for (int j = 0; j < d / 2; ++j) {
    const double inv = 1.0 / std::pow(theta, 2.0 * j / d);
    const double wavelen = 2.0 * std::numbers::pi / inv;
    if (wavelen < original / high) {
      out.push_back(inv);
    } else if (wavelen > original / low) {
      out.push_back(inv / factor);
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      out.push_back((1.0 - smooth) * inv / factor + smooth * inv);
    }
  }
  return out;
}

// fp32 against the double reference: theta^(2j/d) in fp32 carries a relative error up to about
// ln(theta)·2^-24 from the rounded exponent (13.1·6e-8 ≈ 8e-7 at theta = 5e5) plus a few roundings of
// the remap: 3e-6 relative.
constexpr double kRelTol = 3e-6;

TEST(RopeScaling, Llama3InverseFrequenciesMatchThePublishedFormula) {
  const RopeScaling s = Llama31();
  const std::vector<float> got = RopeInverseFrequencies(500000.0f, 128, s);
  const std::vector<double> want = Llama3Reference(500000.0, 128, 8.0, 1.0, 4.0, 8192.0);
  ASSERT_EQ(got.size(), want.size());
  int kept = 0, divided = 0, ramp = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_NEAR(got[j], want[j], kRelTol * want[j]) << "pair " << j;
    const double inv = 1.0 / std::pow(500000.0, 2.0 * j / 128);
    const double ratio = inv / want[j];
    kept += ratio == 1.0;
    divided += std::abs(ratio - 8.0) < 1e-12;
    ramp += ratio > 1.0 && ratio < 8.0 && std::abs(ratio - 8.0) >= 1e-12;
  }
  // All three bands occur at these parameters (wavelengths from 2π to ~3e6 against 2048 and 8192).
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(ramp, 0);
  EXPECT_EQ(kept + divided + ramp, 64);
}

TEST(RopeScaling, LinearAndFreqFactorsDivideTheUnscaledFrequencies) {
  const std::vector<float> base = RopeInverseFrequencies(10000.0f, 16, RopeScaling{});
  for (int j = 0; j < 8; ++j) EXPECT_EQ(base[j], 1.0f / std::pow(10000.0f, 2.0f * j / 16.0f)) << j;
  RopeScaling linear;
  linear.kind = RopeScalingKind::kLinear;
  linear.factor = 4.0f;
  RopeScaling ff;
  ff.freq_factors = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> l = RopeInverseFrequencies(10000.0f, 16, linear);
  const std::vector<float> f = RopeInverseFrequencies(10000.0f, 16, ff);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(l[j], base[j] / 4.0f) << j;
    EXPECT_EQ(f[j], base[j] / static_cast<float>(j + 1)) << j;
  }
}

// llama.cpp's converter writes llama3 as divisors in rope_freqs.weight; dividing by them gives the
// same frequencies as the remap, up to fp32 rounding.
TEST(RopeScaling, Llama3AsFreqFactorsGivesTheSameFrequencies) {
  const RopeScaling s = Llama31();
  RopeScaling as_factors;
  as_factors.freq_factors = Llama3FreqFactors(500000.0f, 128, s);
  const std::vector<float> direct = RopeInverseFrequencies(500000.0f, 128, s);
  const std::vector<float> via = RopeInverseFrequencies(500000.0f, 128, as_factors);
  for (size_t j = 0; j < direct.size(); ++j) EXPECT_NEAR(via[j], direct[j], kRelTol * direct[j]) << j;
  EXPECT_EQ(as_factors.freq_factors.front(), 1.0f);  // the highest frequency is kept
  EXPECT_EQ(as_factors.freq_factors.back(), 8.0f);   // the lowest is divided by factor
}

TEST(RopeScaling, ValidationNamesTheFault) {
  RopeScaling s = Llama31();
  s.high_freq_factor = 1.0f;
  EXPECT_THAT(std::string(ValidateRopeScaling(s, 128, "m").message()), HasSubstr("low_freq_factor < high_freq_factor"));
  RopeScaling ff;
  ff.freq_factors = {1, 2, 3};
  EXPECT_THAT(std::string(ValidateRopeScaling(ff, 128, "m").message()), HasSubstr("rope_freqs has 3 factors"));
  RopeScaling zero;
  zero.kind = RopeScalingKind::kLinear;
  zero.factor = 0.0f;
  EXPECT_FALSE(ValidateRopeScaling(zero, 128, "m").ok());
  EXPECT_TRUE(ValidateRopeScaling(Llama31(), 128, "m").ok());
}

// ---- config.json -----------------------------------------------------------------------------------

std::string LlamaConfig(const std::string& rope) {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "max_position_embeddings": 131072, )" + rope + "}";
}

TEST(RopeScalingConfig, Llama3AndLinearAndTheV5Spelling) {
  auto llama3 = ModelSpecFromHfConfigText(
      LlamaConfig(R"("rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"})"),
      "cfg.json");
  ASSERT_TRUE(llama3.ok()) << llama3.status();
  EXPECT_EQ(llama3->rope_scaling.kind, RopeScalingKind::kLlama3);
  EXPECT_EQ(llama3->rope_scaling.factor, 8.0f);
  EXPECT_EQ(llama3->rope_scaling.original_context_length, 8192);

  auto v5 = ModelSpecFromHfConfigText(
      LlamaConfig(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                   "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
      "cfg.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  EXPECT_EQ(v5->rope_scaling.kind, RopeScalingKind::kLlama3);
  EXPECT_EQ(v5->rope_scaling.factor, 32.0f);

  auto linear = ModelSpecFromHfConfigText(LlamaConfig(R"("rope_scaling": {"type": "linear", "factor": 2.0})"),
                                          "cfg.json");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->rope_scaling.kind, RopeScalingKind::kLinear);
  EXPECT_EQ(linear->rope_scaling.factor, 2.0f);

  auto plain = ModelSpecFromHfConfigText(LlamaConfig(R"("rope_scaling": null)"), "cfg.json");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->rope_scaling.active());
}

// YaRN is read (its math: tests/backend_cpu/arch_ops_test.cc); other unknown types are refused.
TEST(RopeScalingConfig, YarnIsReadAndUnknownTypesAreRefusedNamingFileAndKey) {
  auto yarn = ModelSpecFromHfConfigText(
      LlamaConfig(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                   "original_max_position_embeddings": 32768})"),
      "models/q/config.json");
  ASSERT_TRUE(yarn.ok()) << yarn.status();
  EXPECT_EQ(yarn->rope_scaling.kind, RopeScalingKind::kYarn);
  EXPECT_EQ(yarn->rope_scaling.factor, 4.0f);
  EXPECT_EQ(yarn->rope_scaling.original_context_length, 32768);
  EXPECT_TRUE(yarn->rope_scaling.truncate);
  auto warp = ModelSpecFromHfConfigText(LlamaConfig(R"("rope_scaling": {"rope_type": "warp", "factor": 4.0})"),
                                        "models/q/config.json");
  ASSERT_FALSE(warp.ok());
  EXPECT_THAT(std::string(warp.status().message()),
              HasSubstr("models/q/config.json: key \"rope_scaling.rope_type\" = \"warp\""));
  auto dynamic = ModelSpecFromHfConfigText(LlamaConfig(R"("rope_scaling": {"type": "dynamic", "factor": 2.0})"),
                                           "c.json");
  ASSERT_FALSE(dynamic.ok());
  EXPECT_THAT(std::string(dynamic.status().message()), HasSubstr("\"rope_scaling.type\" = \"dynamic\""));
  auto no_factor = ModelSpecFromHfConfigText(LlamaConfig(R"("rope_scaling": {"rope_type": "linear"})"), "c.json");
  ASSERT_FALSE(no_factor.ok());
  EXPECT_THAT(std::string(no_factor.status().message()), HasSubstr("no \"factor\""));
}

// ---- GGUF ------------------------------------------------------------------------------------------

std::unique_ptr<LoadedModel> Synth(const ModelSpec& spec) {
  auto m = SynthWeights(spec, DType::kF32, 9, 1);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

ModelSpec TinyDense() { return SynthSpec("tiny-dense").value(); }

// llama3 → rope_freqs.weight → the same frequencies read back; linear → rope.scaling.type/factor.
TEST(RopeScalingGguf, ExportWritesWhatTheReaderApplies) {
  ModelSpec spec = TinyDense();
  spec.rope_scaling = Llama31();
  spec.rope_scaling.original_context_length = 64;  // so that head_dim 16 spans all three bands
  const std::string path = ::testing::TempDir() + "/rope_llama3.gguf";
  ASSERT_TRUE(ExportGguf(spec, Synth(spec)->weights, path, GgufExportOptions{}).ok());
  auto file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensorInfo* t = (*file)->FindTensor("rope_freqs.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ne, std::vector<int64_t>{8});
  EXPECT_EQ(t->dtype, DType::kF32);
  auto back = LoadModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ((*back)->spec.rope_scaling.freq_factors.size(), 8u);
  const std::vector<float> want = RopeInverseFrequencies(spec.rope_theta, 16, spec.rope_scaling);
  const std::vector<float> got = RopeInverseFrequencies((*back)->spec.rope_theta, 16, (*back)->spec.rope_scaling);
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(got[j], want[j], kRelTol * want[j]) << j;

  ModelSpec lin = TinyDense();
  lin.rope_scaling.kind = RopeScalingKind::kLinear;
  lin.rope_scaling.factor = 4.0f;
  const std::string lin_path = ::testing::TempDir() + "/rope_linear.gguf";
  ASSERT_TRUE(ExportGguf(lin, Synth(lin)->weights, lin_path, GgufExportOptions{}).ok());
  auto lin_back = LoadModel(lin_path);
  ASSERT_TRUE(lin_back.ok()) << lin_back.status();
  EXPECT_EQ((*lin_back)->spec.rope_scaling.kind, RopeScalingKind::kLinear);
  EXPECT_EQ((*lin_back)->spec.rope_scaling.factor, 4.0f);
  EXPECT_TRUE((*lin_back)->spec.rope_scaling.freq_factors.empty());
  std::remove(path.c_str());
  std::remove(lin_path.c_str());
}

// A GGUF's rope.scaling keys as llama.cpp reads them: a factor without a type is linear, "none" is
// no scaling whatever the factor, yarn is refused naming the key.
TEST(RopeScalingGguf, ScalingKeysAsLlamaCppReadsThem) {
  const ModelSpec spec = TinyDense();
  auto export_with = [&](const std::string& name, std::vector<std::pair<std::string, GgufValue>> kv) {
    GgufExportOptions opt;
    for (auto& [k, v] : kv) opt.extra_metadata.emplace_back(k, v);
    const std::string path = ::testing::TempDir() + "/" + name;
    EXPECT_TRUE(ExportGguf(spec, Synth(spec)->weights, path, opt).ok());
    return path;
  };
  GgufValue factor2;
  factor2.type = GgufType::kF32;
  factor2.v = 2.0;
  GgufValue yarn;
  yarn.type = GgufType::kString;
  yarn.v = std::string("yarn");
  GgufValue none = yarn;
  none.v = std::string("none");

  auto bare_factor = LoadModel(export_with("rope_f.gguf", {{"qwen3.rope.scaling.factor", factor2}}));
  ASSERT_TRUE(bare_factor.ok()) << bare_factor.status();
  EXPECT_EQ((*bare_factor)->spec.rope_scaling.kind, RopeScalingKind::kLinear);
  EXPECT_EQ((*bare_factor)->spec.rope_scaling.factor, 2.0f);

  auto typed_none = LoadModel(export_with(
      "rope_none.gguf", {{"qwen3.rope.scaling.type", none}, {"qwen3.rope.scaling.factor", factor2}}));
  ASSERT_TRUE(typed_none.ok()) << typed_none.status();
  EXPECT_FALSE((*typed_none)->spec.rope_scaling.active());

  // YaRN needs its original context (llama.cpp's key); without it the error names the key.
  const std::string yarn_path = export_with("rope_yarn.gguf", {{"qwen3.rope.scaling.type", yarn}});
  auto refused = LoadModel(yarn_path);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(yarn_path + ": yarn RoPE scaling needs metadata key qwen3.rope.scaling.original_context_length"));
}

// ---- The forward pass ------------------------------------------------------------------------------

std::shared_ptr<const LoadedModel> Build(const ModelSpec& spec) {
  std::shared_ptr<LoadedModel> m = Synth(spec);
  m->source = "synth:" + spec.name;
  return m;
}

std::vector<float> Logits(const ModelSpec& spec, Backend* be, const std::vector<int32_t>& tokens,
                          const std::vector<int32_t>& positions) {
  auto lm = Transformer::Create(Build(spec), be);
  EXPECT_TRUE(lm.ok()) << lm.status();
  std::vector<float> logits;
  absl::Status s = (*lm)->ForwardMasked(tokens, positions, {}, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

// Halving every frequency's period (linear factor 1/2, or rope_freqs all 1/2) turns position p's angles
// into position 2p's exactly (a power-of-two scale), so the scaled model at positions 0, 1, 2, … gives
// the unscaled model's logits at positions 0, 2, 4, … bit for bit: the table reaches every layer.
TEST(RopeScalingForward, ScaledFrequenciesAreApplied) {
  CpuBackend be(2);
  const ModelSpec plain = TinyDense();
  const std::vector<int32_t> tokens = {5, 17, 42, 99, 7, 250};
  std::vector<int32_t> pos, doubled;
  for (int i = 0; i < 6; ++i) {
    pos.push_back(i);
    doubled.push_back(2 * i);
  }
  const std::vector<float> want = Logits(plain, &be, tokens, doubled);
  ModelSpec linear = plain;
  linear.rope_scaling.kind = RopeScalingKind::kLinear;
  linear.rope_scaling.factor = 0.5f;
  EXPECT_EQ(Logits(linear, &be, tokens, pos), want);
  ModelSpec factors = plain;
  factors.rope_scaling.freq_factors.assign(8, 0.5f);
  EXPECT_EQ(Logits(factors, &be, tokens, pos), want);
  // And an unscaled run at the same positions differs (the comparison can fail).
  EXPECT_NE(Logits(plain, &be, tokens, pos), want);
}

// A backend whose RoPE cannot take a frequency table (the CUDA backend today) refuses a scaled model
// at creation instead of running it with theta's frequencies.
class NoFrequencyBackend : public CpuBackend {
 public:
  NoFrequencyBackend() : CpuBackend(1) {}
  bool SupportsRopeFrequencies() const override { return false; }
};

TEST(RopeScalingForward, BackendWithoutFrequencyTablesRefusesAScaledModel) {
  NoFrequencyBackend be;
  ModelSpec spec = TinyDense();
  spec.rope_scaling = Llama31();
  auto lm = Transformer::Create(Build(spec), &be);
  ASSERT_FALSE(lm.ok());
  EXPECT_THAT(std::string(lm.status().message()), HasSubstr("RoPE scaling llama3 (factor 8"));
  EXPECT_THAT(std::string(lm.status().message()), HasSubstr("not supported on the"));
  EXPECT_TRUE(Transformer::Create(Build(TinyDense()), &be).ok());  // unscaled runs
}

}  // namespace
}  // namespace specgen
