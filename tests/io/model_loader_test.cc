// LoadModel from hand-built Hugging Face directories (per-expert and fused transformers-5 experts,
// tied embeddings), synth: paths, and errors that name the missing or mis-shaped tensor.
#include "engine/io/model_loader.h"

#include <map>
#include <string>

#include "engine/core/str_cat.h"
#include "engine/io/hf_config.h"
#include "engine/io/synth.h"
#include "gtest/gtest.h"
#include "tests/io/model_test_util.h"

namespace specgen {
namespace {

using specgen::testing::StTensor;
using specgen::testing::TempDir;
using specgen::testing::WriteSafetensors;
using specgen::testing::WriteText;

// Value of element i of the tensor with key k: distinct per tensor and element, exact in f32.
float ValueOf(const WeightKey& k, int64_t i) {
  return static_cast<float>(static_cast<int>(k.role) * 1000 + (k.layer + 1) * 100 + (k.expert + 1)) +
         static_cast<float>(i % 97) / 128.0f;
}

std::vector<float> Values(const WeightKey& k, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = ValueOf(k, i);
  return v;
}

// A tiny qwen3moe as config.json + model.safetensors. `fused` writes transformers-5 fused experts;
// `drop` omits a tensor; `reshape` gives one tensor a wrong shape.
nlohmann::json TinyMoeConfig() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 40}, {"hidden_size", 8},
          {"intermediate_size", 12}, {"moe_intermediate_size", 6}, {"num_hidden_layers", 2},
          {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 4}, {"num_experts", 3},
          {"num_experts_per_tok", 2}, {"norm_topk_prob", true}, {"bos_token_id", 1}, {"eos_token_id", 2}};
}

void WriteHfDir(const TempDir& dir, const nlohmann::json& config, bool fused, const std::string& drop = "",
                const std::string& reshape = "") {
  WriteText(dir.Path("config.json"), config.dump());
  absl::StatusOr<ModelSpec> spec = ModelSpecFromHfConfig(dir.Path());
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<StTensor> tensors;
  std::map<std::string, StTensor> fused_tensors;
  for (const ExpectedTensor& e : ExpectedTensors(*spec)) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    const bool expert = e.key.expert >= 0;
    if (expert && fused) {
      const bool down = e.key.role == Role::kExpertDown;
      const std::string name = Cat("model.layers.", e.key.layer, ".mlp.experts.", down ? "down_proj" : "gate_up_proj");
      StTensor& t = fused_tensors[name];
      t.name = name;
      const int64_t E = spec->n_experts, F = spec->expert_ffn_dim, D = spec->hidden;
      t.shape = down ? std::vector<int64_t>{E, D, F} : std::vector<int64_t>{E, 2 * F, D};
      t.values.resize(E * D * F * (down ? 1 : 2));
      // Expert x's slab: gate rows then up rows ([2F, D]), or down [D, F].
      const int64_t slab = down ? D * F : 2 * D * F;
      const int64_t at = e.key.expert * slab + (e.key.role == Role::kExpertUp ? F * D : 0);
      std::vector<float> v = Values(e.key, n);
      std::copy(v.begin(), v.end(), t.values.begin() + at);
      continue;
    }
    StTensor t{HfTensorName(*spec, e.key), e.shape, Values(e.key, n)};
    if (t.name == drop) continue;
    if (t.name == reshape) t.shape = {n};
    tensors.push_back(std::move(t));
  }
  for (auto& [name, t] : fused_tensors) tensors.push_back(std::move(t));
  WriteSafetensors(dir.Path("model.safetensors"), tensors);
}

void ExpectValues(const LoadedModel& m) {
  for (const ExpectedTensor& e : ExpectedTensors(m.spec)) {
    absl::StatusOr<TensorView> v = m.weights.Get(e.key);
    ASSERT_TRUE(v.ok()) << v.status();
    ASSERT_EQ(v->dtype, DType::kF32);
    const auto* f = static_cast<const float*>(v->data);
    for (int64_t i = 0; i < v->numel(); ++i) {
      ASSERT_EQ(f[i], ValueOf(e.key, i)) << KeyString(e.key) << " element " << i;
    }
  }
}

TEST(LoadHf, PerExpertNames) {
  TempDir dir;
  WriteHfDir(dir, TinyMoeConfig(), /*fused=*/false);
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->spec.arch, Arch::kQwen3Moe);
  EXPECT_EQ((*m)->weights.SourceName({Role::kExpertUp, 1, 2}), "model.layers.1.mlp.experts.2.up_proj.weight");
  ExpectValues(**m);
}

TEST(LoadHf, FusedTransformers5Experts) {
  TempDir dir;
  WriteHfDir(dir, TinyMoeConfig(), /*fused=*/true);
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_TRUE(m.ok()) << m.status();
  ExpectValues(**m);
}

TEST(LoadHf, TiedEmbeddingsNeedNoLmHead) {
  TempDir dir;
  nlohmann::json c = TinyMoeConfig();
  c["tie_word_embeddings"] = true;
  WriteHfDir(dir, c, false);
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->weights.Has({Role::kOutput}));
}

TEST(LoadHf, MissingTensorIsNamed) {
  TempDir dir;
  WriteHfDir(dir, TinyMoeConfig(), false, "model.layers.1.self_attn.k_norm.weight");
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.1.self_attn.k_norm.weight"), absl::string_view::npos)
      << m.status();
  EXPECT_NE(m.status().message().find(dir.Path()), absl::string_view::npos) << m.status();
}

TEST(LoadHf, UntiedWithoutLmHeadIsAnError) {
  TempDir dir;
  WriteHfDir(dir, TinyMoeConfig(), false, "lm_head.weight");
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("lm_head.weight"), absl::string_view::npos) << m.status();
}

TEST(LoadHf, WrongShapeIsNamed) {
  TempDir dir;
  WriteHfDir(dir, TinyMoeConfig(), false, "", "model.layers.0.mlp.experts.1.down_proj.weight");
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.0.mlp.experts.1.down_proj.weight"), absl::string_view::npos)
      << m.status();
  EXPECT_NE(m.status().message().find("[8, 6]"), absl::string_view::npos) << m.status();
}

TEST(WeightSet, ValidateNamesMissingKey) {
  ModelSpec spec = *SynthSpec("tiny-dense");
  WeightSet ws;
  absl::Status s = ws.Validate(spec, "somewhere");
  EXPECT_NE(s.message().find("token_embd"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("somewhere"), absl::string_view::npos) << s;
  EXPECT_EQ(KeyString({Role::kExpertGate, 3, 17}), "blk.3.expert.17.gate");
  EXPECT_EQ(KeyString({Role::kTokenEmbd}), "token_embd");
}

TEST(LoadSynth, PathWithTypeAndSeed) {
  absl::StatusOr<std::unique_ptr<LoadedModel>> a = LoadModel("synth:tiny-moe:bf16:7");
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<TensorView> q = (*a)->weights.Get({Role::kAttnQ, 0});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->dtype, DType::kBF16);
  EXPECT_TRUE((*a)->weights.Validate((*a)->spec, "synth").ok());
  EXPECT_FALSE(LoadModel("synth:tiny-moe:q9").ok());
  EXPECT_FALSE(LoadModel("synth:nope").ok());
  absl::StatusOr<ModelSpec> big = LoadModelSpec("synth:qwen3-235b-a22b");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->n_layers, 94);
}

// The generator's bytes do not depend on the thread count.
TEST(SynthWeights, DeterministicAcrossThreadCounts) {
  ModelSpec spec = *SynthSpec("tiny-moe");
  for (DType t : {DType::kF32, DType::kQ8_0}) {
    absl::StatusOr<std::unique_ptr<LoadedModel>> one = SynthWeights(spec, t, 42, 1);
    absl::StatusOr<std::unique_ptr<LoadedModel>> many = SynthWeights(spec, t, 42, 7);
    absl::StatusOr<std::unique_ptr<LoadedModel>> other_seed = SynthWeights(spec, t, 43, 7);
    ASSERT_TRUE(one.ok() && many.ok() && other_seed.ok());
    for (const auto& [key, v] : (*one)->weights.tensors()) {
      const TensorView w = *(*many)->weights.Get(key);
      ASSERT_EQ(v.bytes, w.bytes);
      EXPECT_EQ(std::memcmp(v.data, w.data, v.bytes), 0) << KeyString(key);
      if (key.role == Role::kAttnQ) {
        EXPECT_NE(std::memcmp(v.data, (*other_seed)->weights.Get(key)->data, v.bytes), 0);
      }
    }
  }
}

TEST(SynthWeights, ScalesAreSane) {
  ModelSpec spec = *SynthSpec("tiny-moe");
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = SynthWeights(spec, DType::kF32, 1);
  ASSERT_TRUE(m.ok());
  const TensorView norm = *(*m)->weights.Get({Role::kAttnNorm, 0});
  const TensorView q = *(*m)->weights.Get({Role::kAttnQ, 0});
  for (int64_t i = 0; i < norm.numel(); ++i) {
    const float x = static_cast<const float*>(norm.data)[i];
    EXPECT_TRUE(x >= 0.95f && x <= 1.05f) << x;
  }
  double sum2 = 0;
  for (int64_t i = 0; i < q.numel(); ++i) {
    const float x = static_cast<const float*>(q.data)[i];
    ASSERT_LE(std::abs(x), 1.0f / 8.0f);  // ±1/sqrt(64)
    sum2 += x * x;
  }
  // Uniform ±a has mean square a²/3 = 1/192 with relative sd 0.89 per sample: 1.4% over 4096 samples,
  // so 10% is 7 sigma.
  EXPECT_NEAR(sum2 / q.numel(), 1.0 / 192, 0.1 / 192);
}

}  // namespace
}  // namespace specgen
