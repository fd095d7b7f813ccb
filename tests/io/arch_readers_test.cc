// The readers of GLM-4.5 (glm4moe) and gpt-oss: both config.json spellings (transformers 4.x
// rope_scaling, 5.x rope_parameters) give one spec, GGUF files as llama.cpp names them load, and bad
// input (an unknown rope type, a group count that does not divide the experts, a missing sink or bias
// tensor) gives an error naming what is wrong.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/gguf_export.h"
#include "engine/model/transformer.h"
#include "engine/io/hf_config.h"
#include "engine/io/model_loader.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

namespace fs = std::filesystem;

fs::path Fixture(const std::string& name) { return fs::path(SPECGEN_SOURCE_DIR) / "tests" / "data" / "models" / name; }

std::string ReadText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Contains(const absl::Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

void ExpectSameSpec(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(Describe(a.rope_scaling), Describe(b.rope_scaling));
  EXPECT_EQ(a.layer_is_moe, b.layer_is_moe);
  EXPECT_EQ(a.layer_is_swa, b.layer_is_swa);
  EXPECT_EQ(RequiredFeatures(a), RequiredFeatures(b));
}

TEST(ArchReaders, Glm4MoeConfigBothSpellings) {
  const fs::path dir = Fixture("glm4moe-tiny");
  auto v5 = ModelSpecFromHfConfigText(ReadText(dir / "config.json"), "config.json");
  auto v4 = ModelSpecFromHfConfigText(ReadText(dir / "config.v4.json"), "config.v4.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  ASSERT_TRUE(v4.ok()) << v4.status();
  ExpectSameSpec(*v5, *v4);
  const ModelSpec& s = *v5;
  EXPECT_EQ(s.arch, Arch::kGlm4Moe);
  EXPECT_EQ(s.rotary_dim(), 8);  // partial_rotary_factor 0.5 of head_dim 16
  EXPECT_EQ(s.rope_scaling.kind, RopeScalingKind::kYarn);
  EXPECT_EQ(s.rope_scaling.factor, 4.0f);
  EXPECT_EQ(s.rope_scaling.original_context_length, 64);
  EXPECT_TRUE(s.rope_scaling.truncate);
  EXPECT_TRUE(s.attn_qkv_bias);
  EXPECT_FALSE(s.attn_out_bias);
  EXPECT_TRUE(s.qk_norm);
  EXPECT_EQ(s.layer_is_moe, (std::vector<bool>{false, true, true}));  // first_k_dense_replace 1
  EXPECT_EQ(s.shared_expert_ffn_dim, 16);
  EXPECT_EQ(s.router_norm, RouterNorm::kSigmoidTopKRenormalize);
  EXPECT_TRUE(s.expert_selection_bias);
  EXPECT_EQ(s.n_expert_groups, 2);
  EXPECT_EQ(s.n_groups_used, 1);
  EXPECT_EQ(s.routed_scale, 2.5f);
}

TEST(ArchReaders, GptOssConfigBothSpellings) {
  const fs::path dir = Fixture("gptoss-tiny");
  auto v5 = ModelSpecFromHfConfigText(ReadText(dir / "config.json"), "config.json");
  auto v4 = ModelSpecFromHfConfigText(ReadText(dir / "config.v4.json"), "config.v4.json");
  ASSERT_TRUE(v5.ok()) << v5.status();
  ASSERT_TRUE(v4.ok()) << v4.status();
  ExpectSameSpec(*v5, *v4);
  const ModelSpec& s = *v5;
  EXPECT_EQ(s.arch, Arch::kGptOss);
  EXPECT_TRUE(s.attn_qkv_bias && s.attn_out_bias && s.attn_sinks);
  EXPECT_EQ(s.sliding_window, 8);
  EXPECT_EQ(s.layer_is_swa, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(s.rope_scaling.kind, RopeScalingKind::kYarn);
  EXPECT_FALSE(s.rope_scaling.truncate);
  EXPECT_EQ(s.router_norm, RouterNorm::kTopKThenSoftmax);
  EXPECT_TRUE(s.router_bias && s.expert_bias);
  EXPECT_EQ(s.expert_act, FfnActivation::kSwiGluClamped);
  EXPECT_EQ(s.swiglu_limit, 7.0f);
}

TEST(ArchReaders, UnknownRopeTypeIsNamed) {
  std::string text = ReadText(Fixture("gptoss-tiny") / "config.json");
  const size_t at = text.find("\"yarn\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 6, "\"warp\"");
  auto s = ModelSpecFromHfConfigText(text, "gpt/config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status(), "gpt/config.json")) << s.status();
  EXPECT_TRUE(Contains(s.status(), "rope_type\" = \"warp\"")) << s.status();
}

TEST(ArchReaders, GroupCountNotDividingTheExpertsIsNamed) {
  std::string text = ReadText(Fixture("glm4moe-tiny") / "config.json");
  const size_t at = text.find("\"n_group\": 2");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 12, "\"n_group\": 3");
  auto s = ModelSpecFromHfConfigText(text, "glm/config.json");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.status(), "glm/config.json")) << s.status();
  EXPECT_TRUE(Contains(s.status(), "n_expert_groups = 3")) << s.status();
  EXPECT_TRUE(Contains(s.status(), "n_group")) << s.status();
}

// A GGUF of the fixture (exported as llama.cpp names the tensors) with one tensor's name changed in
// place (same length), so the file lacks it.
class GgufWithout : public ::testing::Test {
 protected:
  std::string Export(const std::string& model, const std::string& drop, const std::string& replacement) {
    auto m = LoadModel(Fixture(model).string());
    EXPECT_TRUE(m.ok()) << m.status();
    const std::string path = ::testing::TempDir() + "/arch_readers_" + model + ".gguf";
    GgufExportOptions opt;
    opt.dtype = DType::kF32;
    EXPECT_TRUE(ExportGguf((*m)->spec, (*m)->weights, path, opt).ok());
    if (!drop.empty()) {
      std::string bytes = ReadText(path);
      const size_t at = bytes.find(drop);
      EXPECT_NE(at, std::string::npos) << drop;
      EXPECT_EQ(drop.size(), replacement.size());
      bytes.replace(at, drop.size(), replacement);
      std::ofstream(path, std::ios::binary) << bytes;
    }
    return path;
  }
};

TEST_F(GgufWithout, NothingMissingLoadsBothArchitectures) {
  for (const char* model : {"glm4moe-tiny", "gptoss-tiny"}) {
    auto g = LoadModel(Export(model, "", ""));
    ASSERT_TRUE(g.ok()) << model << ": " << g.status();
    auto hf = LoadModelSpec(Fixture(model).string());
    ASSERT_TRUE(hf.ok());
    ExpectSameSpec((*g)->spec, *hf);
    EXPECT_EQ((*g)->spec.qk_norm, hf->qk_norm);
    EXPECT_EQ((*g)->spec.expert_selection_bias, hf->expert_selection_bias);
    EXPECT_EQ((*g)->spec.shared_expert_ffn_dim, hf->shared_expert_ffn_dim);
    EXPECT_EQ((*g)->spec.sliding_window, hf->sliding_window);
  }
}

TEST_F(GgufWithout, MissingSinkIsNamed) {
  auto g = LoadModel(Export("gptoss-tiny", "blk.1.attn_sinks.weight", "blk.1.attn_sinkz.weight"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status(), "missing tensor blk.1.attn_sinks.weight")) << g.status();
}

TEST_F(GgufWithout, MissingBiasesAreNamed) {
  auto g = LoadModel(Export("gptoss-tiny", "blk.0.attn_q.bias", "blk.0.attn_q.biaz"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status(), "missing tensor blk.0.attn_q.bias")) << g.status();
  g = LoadModel(Export("gptoss-tiny", "blk.2.ffn_down_exps.bias", "blk.2.ffn_down_exps.biaz"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status(), "missing tensor blk.2.ffn_down_exps.bias")) << g.status();
  g = LoadModel(Export("glm4moe-tiny", "blk.2.exp_probs_b.bias", "blk.2.exp_probs_b.biaz"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(Contains(g.status(), "missing tensor blk.2.exp_probs_b.bias")) << g.status();
}

}  // namespace
}  // namespace specgen

namespace specgen {
namespace {

// The synth presets in the published shapes: parameter counts against the model cards (gpt-oss:
// 116.8B total / 5.1B active and 20.9B / 3.6B; GLM-4.5-Air 106B / 12B; GLM-4.5 355B / 32B). The cards
// count active parameters without the input embedding (a lookup). GLM's published totals include its
// next-token-prediction layer (one more MoE layer, ~1-2% of the total), which the presets leave out,
// and its cards round (12B, 32B): GLM gets 4% below on totals and 8% on active counts, gpt-oss 1% and
// 2%; a wrong width or count is off by far more.
TEST(SynthPresets, PublishedSizes) {
  struct Want {
    const char* preset;
    double total, active, total_tol, active_tol;
  };
  for (const Want& w : {Want{"gpt-oss-120b", 116.8e9, 5.1e9, 0.01, 0.02},
                        Want{"gpt-oss-20b", 20.9e9, 3.6e9, 0.01, 0.02},
                        Want{"glm-4.5-air", 106e9, 12e9, 0.04, 0.08}, Want{"glm-4.5", 355e9, 32e9, 0.04, 0.08}}) {
    auto spec = SynthSpec(w.preset);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(Validate(*spec, w.preset).ok()) << Validate(*spec, w.preset);
    const ParamCounts c = CountParams(*spec);
    const double active = static_cast<double>(c.active - spec->vocab_size * spec->hidden);
    std::printf("  %s: %.2fB total, %.2fB active without the input embedding\n", w.preset, c.total / 1e9,
                active / 1e9);
    EXPECT_NEAR(c.total, w.total, w.total * w.total_tol) << w.preset;
    EXPECT_NEAR(active, w.active, w.active * w.active_tol) << w.preset;
  }
}

// Under a quantized type synth's gpt-oss experts are MXFP4 (as published); biases and sinks, like
// norms and routers, stay f32 under every type; float types keep floats.
TEST(SynthPresets, GptOssExpertsAreMxfp4UnderQuantizedTypes) {
  const ModelSpec spec = SynthSpec("gpt-oss-20b").value();
  const ExportType q8 = PureExportType(DType::kQ8_0);
  EXPECT_EQ(SynthTensorType(q8, spec, {Role::kExpertUp, 3, 5}, 2880), DType::kMXFP4);
  EXPECT_EQ(SynthTensorType(q8, spec, {Role::kAttnQ, 3}, 2880), DType::kQ8_0);
  EXPECT_EQ(SynthTensorType(q8, spec, {Role::kExpertUpBias, 3, 5}, 2880), DType::kF32);
  EXPECT_EQ(SynthTensorType(q8, spec, {Role::kAttnSinks, 3}, 64), DType::kF32);
  EXPECT_EQ(SynthTensorType(ParseExportType("q4_k_m").value(), spec, {Role::kExpertDown, 0, 0}, 2880), DType::kMXFP4);
  EXPECT_EQ(SynthTensorType(PureExportType(DType::kBF16), spec, {Role::kExpertUp, 0, 0}, 2880), DType::kBF16);
  // convert keeps the type asked for; other architectures' experts are not MXFP4.
  EXPECT_EQ(ChooseTensorType(q8, spec, {Role::kExpertUp, 3, 5}, 2880).dtype, DType::kQ8_0);
  EXPECT_EQ(ChooseTensorType(q8, spec, {Role::kAttnQBias, 3}, 4096).dtype, DType::kF32);
  const ModelSpec glm = SynthSpec("glm-4.5-air").value();
  EXPECT_EQ(SynthTensorType(q8, glm, {Role::kExpertUp, 3, 5}, 4096), DType::kQ8_0);
}

// synth writes gpt-oss experts MXFP4 and a quantized export keeps them so (requantizing 4-bit values
// only loses); the file's other matrices take the type asked for.
TEST_F(GgufWithout, SynthGptOssExpertsStayMxfp4InAQuantizedFile) {
  const ModelSpec spec = SynthSpec("tiny-gptoss").value();
  auto w = SynthWeights(spec, PureExportType(DType::kQ8_0), 3, 1);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ((*w)->weights.Get({Role::kExpertUp, 0, 1})->dtype, DType::kMXFP4);
  const std::string path = ::testing::TempDir() + "/arch_synth_gptoss.gguf";
  GgufExportOptions opt;
  opt.dtype = DType::kQ8_0;
  ASSERT_TRUE(ExportGguf(spec, (*w)->weights, path, opt).ok());
  auto g = LoadModel(path);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->weights.Get({Role::kExpertUp, 2, 3})->dtype, DType::kMXFP4);
  EXPECT_EQ((*g)->weights.Get({Role::kAttnQ, 2})->dtype, DType::kQ8_0);
  EXPECT_EQ((*g)->weights.Get({Role::kAttnSinks, 2})->dtype, DType::kF32);
  std::remove(path.c_str());
}

// A GGUF whose matrices are MXFP4 gives the logits of its f32 copy (the same file converted to f32:
// every MXFP4 value dequantized exactly) within the packed product's activation rounding: each MXFP4
// product quantizes its input to int8 per 32-block (engine/core/packed_product.h), a relative error of
// about 0.7% a product (tests/model/packed_weights_test.cc derives it). This model chains 13 of them
// from embedding to logit (3 layers of q/k/v, o, gate/up, down, then the head; the router is f32), so
// adding their errors linearly bounds the logits' relative RMS error by about 9%: 0.1 holds it, while a
// misread block or scale errs by order 1.
TEST_F(GgufWithout, Mxfp4FileGivesTheLogitsOfItsF32Copy) {
  auto m = LoadModel(Fixture("gptoss-tiny").string());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string packed = ::testing::TempDir() + "/arch_mxfp4.gguf";
  const std::string copy = ::testing::TempDir() + "/arch_mxfp4_f32.gguf";
  GgufExportOptions opt;
  opt.dtype = DType::kMXFP4;
  ASSERT_TRUE(ExportGguf((*m)->spec, (*m)->weights, packed, opt).ok());
  std::shared_ptr<const LoadedModel> q = std::move(LoadModel(packed)).value();
  ASSERT_EQ(q->weights.Get({Role::kExpertGate, 1, 2})->dtype, DType::kMXFP4);
  ASSERT_EQ(q->weights.Get({Role::kExpertDownBias, 1, 2})->dtype, DType::kF32);
  opt.dtype = DType::kF32;
  ASSERT_TRUE(ExportGguf(q->spec, q->weights, copy, opt).ok());
  std::shared_ptr<const LoadedModel> f = std::move(LoadModel(copy)).value();
  ASSERT_EQ(f->weights.Get({Role::kExpertGate, 1, 2})->dtype, DType::kF32);
  CpuBackend be(2);
  std::vector<int32_t> ids(24);
  for (int i = 0; i < 24; ++i) ids[i] = (i * 37 + 5) % 509;
  std::vector<float> a, b;
  ASSERT_TRUE(Transformer::Create(q, &be).value()->Forward(ids, &a).ok());
  ASSERT_TRUE(Transformer::Create(f, &be).value()->Forward(ids, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(b[i]) * b[i];
  }
  ASSERT_GT(ref, 0.0);
  EXPECT_LT(std::sqrt(err / ref), 0.1);
  std::remove(packed.c_str());
  std::remove(copy.c_str());
}

}  // namespace
}  // namespace specgen
