#include "moe/speed_prediction.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace specgen::moe {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

ModelBytes Read(const std::string& path) {
  absl::StatusOr<ModelBytes> b = ReadModelBytes(path);
  EXPECT_TRUE(b.ok()) << b.status();
  return *b;
}

TEST(SpeedPredictionTest, AcceptanceProfiles) {
  absl::StatusOr<AcceptanceProfile> typical = ParseAcceptance("typical");
  ASSERT_TRUE(typical.ok());
  EXPECT_DOUBLE_EQ(typical->at(0), 0.8);
  EXPECT_DOUBLE_EQ(typical->at(4), 0.6);
  EXPECT_DOUBLE_EQ(typical->at(5), 0.55);
  EXPECT_DOUBLE_EQ(typical->at(12), 0.55);
  // 1 + 0.8 + 0.8·0.75 = 2.4 tokens at k = 2.
  EXPECT_NEAR(TokensPerPass(*typical, 2), 2.4, 1e-12);
  EXPECT_DOUBLE_EQ(TokensPerPass(*typical, 0), 1.0);
  absl::StatusOr<AcceptanceProfile> flat = ParseAcceptance("0.9");
  ASSERT_TRUE(flat.ok());
  // Geometric: (1 − 0.9^5) / (1 − 0.9) at k = 4.
  EXPECT_NEAR(TokensPerPass(*flat, 4), (1 - std::pow(0.9, 5)) / 0.1, 1e-12);
  EXPECT_NEAR(TokensPerPass(*ParseAcceptance("1"), 7), 8.0, 1e-12);
  for (const char* bad : {"0", "-0.5", "1.5", "nan", "inf", "often", ""}) {
    absl::StatusOr<AcceptanceProfile> a = ParseAcceptance(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(std::string(a.status().message()).find("--acceptance"), std::string::npos) << a.status();
  }
}

// The prediction against specgen's own H200 measurements of the configuration its rates come from
// (bench/RESULTS.md, BM_StreamedGeneration: synth qwen3-30b-a3b q4_k_m, target alone, at 4, 8 and 16 GiB,
// uniform and locality routing). The rates were fitted to the resident run, one-position streamed
// passes and the 8 GiB warm passes, not to these six runs; the model adds compute and copies that the
// GPU partly overlaps and samples its own locality trace, so it is held to 10% of each (the fit at
// the time of writing: within 8%).
TEST(SpeedPredictionTest, MatchesTheH200MeasurementsItsRatesComeFrom) {
  const ModelBytes target = Read("synth:qwen3-30b-a3b:q4_k_m");
  const ModelBytes draft = Read("synth:qwen3-0.6b:q8_0");
  struct Measured {
    size_t budget_gib;
    double uniform, locality;  // tokens/s, target alone
  };
  for (const Measured& m : {Measured{4, 42.5, 84.6}, Measured{8, 53.8, 153.2}, Measured{16, 119.0, 200.9}}) {
    PlanOptions o;
    o.vram_budget = m.budget_gib * kGiB;
    o.draft_max = 4;
    absl::StatusOr<Plan> plan = MakePlan(target, &draft, o);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The measured target-alone runs had no draft in VRAM: row 0 comes from the plan without it.
    o.draft_max = 0;
    absl::StatusOr<Plan> alone_plan = MakePlan(target, nullptr, o);
    ASSERT_TRUE(alone_plan.ok()) << alone_plan.status();
    absl::StatusOr<SpeedPrediction> s =
        PredictSpeed(*plan, target, &draft, 4, *ParseAcceptance("typical"), {}, &*alone_plan);
    ASSERT_TRUE(s.ok()) << s.status();
    std::printf("%zu GiB alone: uniform %.1f (measured %.1f), locality %.1f (measured %.1f), hits %.3f / %.3f\n",
                m.budget_gib, s->rows[0].tokens_per_second_uniform(), m.uniform,
                s->rows[0].tokens_per_second_locality(), m.locality, s->rows[0].hit_rate_uniform,
                s->rows[0].hit_rate_locality);
    const SpeedRow& alone = s->rows[0];
    EXPECT_NEAR(alone.tokens_per_second_uniform() / m.uniform, 1.0, 0.10) << m.budget_gib << " GiB, uniform";
    EXPECT_NEAR(alone.tokens_per_second_locality() / m.locality, 1.0, 0.10) << m.budget_gib << " GiB, locality";
  }
}

TEST(SpeedPredictionTest, RowsFollowTheDraftLengthAndTheBudget) {
  const ModelBytes target = Read("synth:qwen3-30b-a3b:q4_k_m");
  const ModelBytes draft = Read("synth:qwen3-0.6b:q8_0");
  PlanOptions o;
  o.vram_budget = 8 * kGiB;
  o.draft_max = 6;
  const Plan plan = *MakePlan(target, &draft, o);
  const SpeedPrediction s = *PredictSpeed(plan, target, &draft, 6, *ParseAcceptance("0.9"));
  ASSERT_EQ(s.rows.size(), 7u);
  for (const SpeedRow& r : s.rows) {
    // Locality is the better regime: more hits and never more time.
    EXPECT_GE(r.hit_rate_locality, r.hit_rate_uniform) << r.k;
    EXPECT_LE(r.seconds_locality, r.seconds_uniform) << r.k;
    EXPECT_GT(r.hit_rate_uniform, 0.0);
    EXPECT_LT(r.hit_rate_uniform, 1.0);
    if (r.k > 0) {
      EXPECT_GT(r.seconds_uniform, s.rows[r.k - 1].seconds_uniform) << r.k;
    }
  }
  // The locality hit rate of one token under the 8 GiB cache: streamed_bench measured 0.91-0.93 on the
  // same generator through the GPU's cache; the host LRU model of it must agree within 0.05.
  EXPECT_NEAR(s.rows[0].hit_rate_locality, 0.92, 0.05);
  // Uniform: the cache holds a random share of each layer's experts.
  EXPECT_NEAR(s.rows[0].hit_rate_uniform, plan.slot_share, 1e-9);
  // Without a draft: one row.
  const SpeedPrediction alone = *PredictSpeed(plan, target, nullptr, 6, *ParseAcceptance("typical"));
  EXPECT_EQ(alone.rows.size(), 1u);
  EXPECT_EQ(alone.draft_token_seconds, 0.0);
  // The draft token: 28 layers at 20.4 us (its bytes would take less).
  EXPECT_NEAR(s.draft_token_seconds, 28 * 20.4e-6, 1e-12);
  // Everything resident: nothing streams, so both regimes predict the same.
  o.vram_budget = 80 * kGiB;
  const Plan resident = *MakePlan(target, &draft, o);
  const SpeedPrediction r = *PredictSpeed(resident, target, &draft, 6, *ParseAcceptance("typical"));
  for (const SpeedRow& row : r.rows) {
    EXPECT_DOUBLE_EQ(row.seconds_uniform, row.seconds_locality);
    EXPECT_EQ(row.hit_rate_uniform, 1.0);
  }
  // 236 tokens/s resident on the H200 is what pass_bytes_per_second was fitted to (within 2%).
  EXPECT_NEAR(r.rows[0].tokens_per_second_uniform() / 236.0, 1.0, 0.02);
}

}  // namespace
}  // namespace specgen::moe
