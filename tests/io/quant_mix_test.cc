// The per-tensor types of convert/synth --type, against llama-quantize's rules (llama-quant.cpp,
// llama_tensor_get_type) worked out by hand for published shapes.
#include "engine/io/quant_mix.h"

#include <vector>

#include "engine/io/synth.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

ExportType Type(const char* name) { return *ParseExportType(name); }

DType Chosen(const char* type, const ModelSpec& spec, Role role, int layer, int expert = -1) {
  int64_t row = spec.hidden;
  if (role == Role::kFfnDown) row = spec.ffn_dim;
  if (role == Role::kExpertDown) row = spec.expert_ffn_dim;
  if (role == Role::kAttnOut) row = spec.n_heads * spec.head_dim;
  return ChooseTensorType(Type(type), spec, {role, layer, expert}, row).dtype;
}

std::vector<int> LayersIn(const char* type, const ModelSpec& spec, Role role, DType want) {
  std::vector<int> out;
  for (int l = 0; l < spec.n_layers; ++l) {
    if (Chosen(type, spec, role, l, role == Role::kExpertDown ? 5 : -1) == want) out.push_back(l);
  }
  return out;
}

// use_more_bits for 48 layers: l < 6, l >= 42, or (l - 6) % 3 == 2.
const std::vector<int> kMoreBits48 = {0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42,
                                      43, 44, 45, 46, 47};

TEST(QuantMix, UseMoreBitsPicksEndsAndEveryThirdLayer) {
  std::vector<int> got;
  for (int l = 0; l < 48; ++l) {
    if (UseMoreBits(l, 48)) got.push_back(l);
  }
  EXPECT_EQ(got, kMoreBits48);
  // 28 layers (Qwen3-0.6B/1.7B): l < 3, l >= 24, or (l - 3) % 3 == 2.
  got.clear();
  for (int l = 0; l < 28; ++l) {
    if (UseMoreBits(l, 28)) got.push_back(l);
  }
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}));
}

TEST(QuantMix, Qwen3MoeQ4_K_M) {
  const ModelSpec spec = *SynthSpec("qwen3-30b-a3b");  // 48 layers, 128 experts, untied head
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kAttnV, DType::kQ6_K), kMoreBits48);
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kExpertDown, DType::kQ6_K), kMoreBits48);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kAttnV, 6), DType::kQ4_K);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kExpertDown, 7, 100), DType::kQ4_K);
  // Everything else in the base type; the head in Q6_K; norms and routers f32.
  for (Role r : {Role::kAttnQ, Role::kAttnK, Role::kAttnOut, Role::kExpertGate, Role::kExpertUp}) {
    EXPECT_TRUE(LayersIn("q4_k_m", spec, r, DType::kQ4_K).size() == 48u) << RoleName(r);
  }
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kOutput, -1), DType::kQ6_K);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kTokenEmbd, -1), DType::kQ4_K);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kAttnNorm, 3), DType::kF32);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kRouter, 3), DType::kF32);
  // q5_k_m: the same layers in Q6_K over a Q5_K base.
  EXPECT_EQ(LayersIn("q5_k_m", spec, Role::kExpertDown, DType::kQ6_K), kMoreBits48);
  EXPECT_EQ(Chosen("q5_k_m", spec, Role::kAttnQ, 0), DType::kQ5_K);
  // q6_k and q8_0: one type (the head of q8_0 stays q8_0).
  EXPECT_EQ(LayersIn("q6_k", spec, Role::kExpertDown, DType::kQ6_K).size(), 48u);
  EXPECT_EQ(Chosen("q6_k", spec, Role::kOutput, -1), DType::kQ6_K);
  EXPECT_EQ(Chosen("q8_0", spec, Role::kOutput, -1), DType::kQ8_0);
  EXPECT_EQ(Chosen("q8_0", spec, Role::kAttnV, 0), DType::kQ8_0);
}

TEST(QuantMix, TiedEmbeddingIsTheHead) {
  const ModelSpec spec = *SynthSpec("qwen3-0.6b");  // tied: token_embd is the output head
  ASSERT_TRUE(spec.tied_embeddings);
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kTokenEmbd, -1), DType::kQ6_K);
  EXPECT_EQ(Chosen("q5_k_m", spec, Role::kTokenEmbd, -1), DType::kQ6_K);
  EXPECT_EQ(Chosen("q8_0", spec, Role::kTokenEmbd, -1), DType::kQ8_0);
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kFfnDown, DType::kQ6_K),
            (std::vector<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}));
}

TEST(QuantMix, EightExpertModels) {
  const ModelSpec spec = *SynthSpec("mixtral-8x7b");  // 8 experts: attn_v/attn_k in Q8_0
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kAttnV, DType::kQ8_0).size(), 32u);
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kAttnK, DType::kQ8_0).size(), 32u);
  EXPECT_EQ(LayersIn("q6_k", spec, Role::kAttnV, DType::kQ8_0).size(), 32u);
  EXPECT_EQ(LayersIn("q4_k_m", spec, Role::kAttnOut, DType::kQ5_K).size(), 32u);
  EXPECT_EQ(LayersIn("q5_k_m", spec, Role::kAttnOut, DType::kQ5_K).size(), 32u);  // its base
  EXPECT_EQ(Chosen("q4_k_m", spec, Role::kAttnQ, 0), DType::kQ4_K);
}

TEST(QuantMix, RowsTheBlockDoesNotDivideFallBack) {
  const ModelSpec spec = *SynthSpec("qwen3-30b-a3b");
  auto pick = [&](const char* type, Role role, int layer, int64_t row) {
    return ChooseTensorType(Type(type), spec, {role, layer, role == Role::kExpertDown ? 0 : -1}, row);
  };
  EXPECT_EQ(pick("q4_k_m", Role::kAttnQ, 6, 64).dtype, DType::kQ5_0);
  EXPECT_EQ(pick("q5_k_m", Role::kAttnQ, 6, 64).dtype, DType::kQ5_1);
  EXPECT_EQ(pick("q4_k_m", Role::kExpertDown, 0, 64).dtype, DType::kQ8_0);  // Q6_K → Q8_0
  const TensorTypeChoice odd = pick("q4_k_m", Role::kAttnQ, 6, 48);  // 48 is no multiple of 32
  EXPECT_EQ(odd.dtype, DType::kF16);
  EXPECT_TRUE(odd.fell_back);
  EXPECT_EQ(odd.wanted, DType::kQ4_K);
  EXPECT_EQ(pick("q4_k_m", Role::kOutput, -1, 64).dtype, DType::kQ8_0);  // head of an odd width
  EXPECT_EQ(pick("q4_k", Role::kAttnQ, 6, 64).dtype, DType::kF16);       // plain types: f16
  EXPECT_FALSE(pick("q4_k_m", Role::kAttnQ, 6, 256).fell_back);
}

TEST(QuantMix, ParseNamesAndFileTypes) {
  EXPECT_EQ(Type("Q4_K_M").llama_ftype, 15);
  EXPECT_EQ(Type("q5_k_m").llama_ftype, 17);
  EXPECT_EQ(Type("q6_k").llama_ftype, 18);
  EXPECT_EQ(Type("q8_0").llama_ftype, 7);
  EXPECT_EQ(Type("q4_k").mix, QuantMix::kPure);
  absl::StatusOr<ExportType> bad = ParseExportType("q3_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("q4_k_m"), std::string_view::npos);
}

}  // namespace
}  // namespace specgen
