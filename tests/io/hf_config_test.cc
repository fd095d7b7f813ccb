// config.json parsing: transformers 4.x and 5.x spellings of the same models give the same spec, and
// bad configs give errors naming the file and the key.
#include "engine/io/hf_config.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/io/model_test_util.h"

namespace specgen {
namespace {

using specgen::testing::TempDir;
using specgen::testing::WriteText;

// Qwen3-30B-A3B's config.json as published (transformers 4.x spellings).
constexpr char kQwen3MoeV4[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
  "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": null,
  "max_position_embeddings": 40960, "tie_word_embeddings": false, "bos_token_id": 151643,
  "eos_token_id": 151645})";

// The same model as transformers 5.x writes it: rope_parameters, eos as a list.
constexpr char kQwen3MoeV5[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
  "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
  "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
  "max_position_embeddings": 40960, "tie_word_embeddings": false, "bos_token_id": 151643,
  "eos_token_id": [151645, 151643]})";

// Mixtral-8x7B with num_local_experts and head_dim null.
constexpr char kMixtral[] = R"({
  "architectures": ["MixtralForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "head_dim": null, "num_local_experts": 8, "num_experts_per_tok": 2,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "max_position_embeddings": 32768,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})";

TEST(HfConfig, Qwen3MoeBothSpellingsAgree) {
  absl::StatusOr<ModelSpec> a = ModelSpecFromHfConfigText(kQwen3MoeV4, "v4/config.json");
  absl::StatusOr<ModelSpec> b = ModelSpecFromHfConfigText(kQwen3MoeV5, "v5/config.json");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (const ModelSpec* s : {&*a, &*b}) {
    EXPECT_EQ(s->arch, Arch::kQwen3Moe);
    EXPECT_EQ(s->hidden, 2048);
    EXPECT_EQ(s->n_layers, 48);
    EXPECT_EQ(s->n_heads, 32);
    EXPECT_EQ(s->n_kv_heads, 4);
    EXPECT_EQ(s->head_dim, 128);
    EXPECT_EQ(s->n_experts, 128);
    EXPECT_EQ(s->n_experts_used, 8);
    EXPECT_EQ(s->expert_ffn_dim, 768);
    EXPECT_EQ(s->router_norm, RouterNorm::kSoftmaxTopKRenormalize);
    EXPECT_FLOAT_EQ(s->rope_theta, 1e6f);
    EXPECT_EQ(s->rope_style, RopeStyle::kRotateHalf);
    EXPECT_TRUE(s->qk_norm);
    EXPECT_FALSE(s->tied_embeddings);
    EXPECT_EQ(s->eos_token_id, 151645);
    EXPECT_EQ(s->layer_is_moe, std::vector<bool>(48, true));
  }
}

TEST(HfConfig, MixtralLocalExpertsAndNullHeadDim) {
  absl::StatusOr<ModelSpec> s = ModelSpecFromHfConfigText(kMixtral, "config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->arch, Arch::kMixtral);
  EXPECT_EQ(s->head_dim, 128);  // 4096 / 32
  EXPECT_EQ(s->n_experts, 8);
  EXPECT_EQ(s->expert_ffn_dim, 14336);
  EXPECT_EQ(s->router_norm, RouterNorm::kTopKThenSoftmax);
  EXPECT_EQ(s->rope_style, RopeStyle::kRotateHalf);  // HF weights are never permuted
  EXPECT_FALSE(s->qk_norm);
  EXPECT_FLOAT_EQ(s->rms_eps, 1e-5f);
}

TEST(HfConfig, SparseStepAndMlpOnlyLayers) {
  nlohmann::json j = nlohmann::json::parse(kQwen3MoeV4);
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["norm_topk_prob"] = false;
  absl::StatusOr<ModelSpec> s = ModelSpecFromHfConfigText(j.dump(), "config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  // MoE iff i not in mlp_only_layers and (i+1) % 2 == 0: layers 1 and 5 (3 is mlp-only).
  EXPECT_EQ(s->layer_is_moe, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_EQ(s->router_norm, RouterNorm::kSoftmaxThenTopK);
}

TEST(HfConfig, DenseQwen3TiedAndHeadDimAbsent) {
  nlohmann::json j = {{"architectures", {"Qwen3ForCausalLM"}}, {"vocab_size", 300}, {"hidden_size", 64},
                      {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"tie_word_embeddings", true}};
  absl::StatusOr<ModelSpec> s = ModelSpecFromHfConfigText(j.dump(), "config.json");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->arch, Arch::kQwen3);
  EXPECT_EQ(s->head_dim, 16);
  EXPECT_TRUE(s->tied_embeddings);
  EXPECT_FALSE(s->is_moe());
  EXPECT_EQ(s->bos_token_id, -1);
}

TEST(HfConfig, ReadsFileFromDirectory) {
  TempDir dir;
  WriteText(dir.Path("config.json"), kMixtral);
  absl::StatusOr<ModelSpec> s = ModelSpecFromHfConfig(dir.Path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->n_layers, 32);
}

void ExpectError(const std::string& text, const std::string& must_contain) {
  absl::StatusOr<ModelSpec> s = ModelSpecFromHfConfigText(text, "dir/config.json");
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_NE(s.status().message().find("dir/config.json"), absl::string_view::npos) << s.status();
  EXPECT_NE(s.status().message().find(must_contain), absl::string_view::npos) << s.status();
}

TEST(HfConfig, BadConfigsNameFileAndKey) {
  ExpectError("{not json", "not valid JSON");
  ExpectError("[1, 2]", "JSON object");
  nlohmann::json j = nlohmann::json::parse(kMixtral);
  j.erase("hidden_size");
  ExpectError(j.dump(), "hidden_size");
  j = nlohmann::json::parse(kMixtral);
  j["num_hidden_layers"] = "32";
  ExpectError(j.dump(), "num_hidden_layers");
  j = nlohmann::json::parse(kMixtral);
  j["architectures"] = {"GPT2LMHeadModel"};
  ExpectError(j.dump(), "GPT2LMHeadModel");
  j = nlohmann::json::parse(kQwen3MoeV4);
  j.erase("moe_intermediate_size");
  ExpectError(j.dump(), "moe_intermediate_size");
  j = nlohmann::json::parse(kQwen3MoeV4);
  j["num_experts_per_tok"] = 200;
  ExpectError(j.dump(), "n_experts_used");
  j = nlohmann::json::parse(kQwen3MoeV4);
  j["tie_word_embeddings"] = 1;
  ExpectError(j.dump(), "tie_word_embeddings");
  absl::StatusOr<ModelSpec> missing = ModelSpecFromHfConfig("/nonexistent/dir/config.json");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace specgen
