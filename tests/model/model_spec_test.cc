// Parameter counts of the synthetic presets against the published model-card totals, and ModelSpec
// validation.
#include "engine/model/model_spec.h"

#include "engine/io/synth.h"
#include "engine/io/weight_set.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

ParamCounts Count(const char* preset) {
  absl::StatusOr<ModelSpec> spec = SynthSpec(preset);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return CountParams(*spec);
}

// Published totals (model cards) must match within 1%; the exact figures are the ones computed from
// the shapes in docs/formats.md §7, which pins the counting convention.
TEST(ParamCounts, Qwen3_30B_A3B) {
  const ParamCounts c = Count("qwen3-30b-a3b");
  EXPECT_NEAR(c.total, 30.5e9, 0.01 * 30.5e9);
  EXPECT_NEAR(c.active, 3.3e9, 0.02 * 3.3e9);  // card rounds 3.35B to "3.3B": 1.6% off
  EXPECT_EQ(c.total, 30'532'122'624);
  EXPECT_EQ(c.active, 3'353'032'704);
  EXPECT_EQ(c.per_expert, 4'718'592);
}

TEST(ParamCounts, Mixtral8x7B) {
  const ParamCounts c = Count("mixtral-8x7b");
  EXPECT_NEAR(c.total, 46.7e9, 0.01 * 46.7e9);
  EXPECT_NEAR(c.active, 12.9e9, 0.01 * 12.9e9);
  EXPECT_EQ(c.total, 46'702'792'704);
  EXPECT_EQ(c.active, 12'879'925'248);
}

TEST(ParamCounts, Qwen3_235B_A22B) {
  const ParamCounts c = Count("qwen3-235b-a22b");
  EXPECT_NEAR(c.total, 235e9, 0.01 * 235e9);
  EXPECT_NEAR(c.active, 22e9, 0.01 * 22e9);
  EXPECT_EQ(c.total, 235'093'634'560);
  EXPECT_EQ(c.active, 22'190'763'520);
}

TEST(ParamCounts, OlmoeShapedAsQwen3Moe) {
  // Real OLMoE: 6,919,161,856; our per-head q/k norms have 16 layers * 2 * (2048 - 128) fewer.
  const ParamCounts c = Count("olmoe-1b-7b");
  EXPECT_EQ(c.total, 6'919'161'856 - 16 * 2 * (2048 - 128));
}

TEST(ParamCounts, CountsEqualExpectedTensorElements) {
  for (const SynthPresetInfo& p : SynthPresets()) {
    absl::StatusOr<ModelSpec> spec = SynthSpec(p.name);
    ASSERT_TRUE(spec.ok());
    int64_t total = 0;
    for (const ExpectedTensor& e : ExpectedTensors(*spec)) {
      int64_t n = 1;
      for (int64_t d : e.shape) n *= d;
      total += n;
    }
    EXPECT_EQ(CountParams(*spec).total, total) << p.name;
    EXPECT_TRUE(Validate(*spec, p.name).ok()) << p.name;
  }
}

TEST(ParamCounts, DenseLayersCountDenseFfn) {
  ModelSpec s = *SynthSpec("tiny-moe");
  const ParamCounts all_moe = CountParams(s);
  s.layer_is_moe[1] = false;
  const ParamCounts mixed = CountParams(s);
  const int64_t moe_ffn = s.n_experts * s.hidden + s.n_experts * 3 * s.expert_ffn_dim * s.hidden;
  EXPECT_EQ(mixed.total, all_moe.total - moe_ffn + 3 * s.ffn_dim * s.hidden);
}

TEST(Validate, NamesTheField) {
  ModelSpec s = *SynthSpec("tiny-moe");
  s.n_kv_heads = 3;
  absl::Status st = Validate(s, "cfg.json");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cfg.json"), absl::string_view::npos);
  EXPECT_NE(st.message().find("n_heads"), absl::string_view::npos);

  s = *SynthSpec("tiny-moe");
  s.n_experts_used = 9;
  st = Validate(s, "x");
  EXPECT_NE(st.message().find("n_experts_used"), absl::string_view::npos) << st;

  s = *SynthSpec("tiny-moe");
  s.layer_is_moe.pop_back();
  EXPECT_FALSE(Validate(s, "x").ok());

  s = *SynthSpec("tiny-dense");
  s.hidden = 0;
  st = Validate(s, "x");
  EXPECT_NE(st.message().find("hidden"), absl::string_view::npos) << st;
}

TEST(SynthSpec, UnknownPresetListsPresets) {
  absl::StatusOr<ModelSpec> s = SynthSpec("qwen9");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("qwen3-30b-a3b"), absl::string_view::npos);
}

}  // namespace
}  // namespace specgen
