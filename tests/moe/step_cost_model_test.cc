// The step cost model of the bytes-aware draft length (step_cost_model.h) on the plan of synth
// qwen3-30b-a3b q4_k_m with a qwen3-0.6b q8_0 draft, and the draft-length choice over it: a good draft
// pays at a long k, a poor one is turned off, and a longer pass costs more where experts stream.
#include "moe/step_cost_model.h"

#include <vector>

#include "engine/speculative/draft_length_choice.h"
#include "gtest/gtest.h"
#include "moe/planner.h"

namespace specgen::moe {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

SpeedPrediction Predict(size_t budget, int k_max) {
  absl::StatusOr<ModelBytes> target = ReadModelBytes("synth:qwen3-30b-a3b:q4_k_m");
  absl::StatusOr<ModelBytes> draft = ReadModelBytes("synth:qwen3-0.6b:q8_0");
  EXPECT_TRUE(target.ok() && draft.ok());
  PlanOptions o;
  o.vram_budget = budget;
  o.draft_max = k_max;
  absl::StatusOr<Plan> plan = MakePlan(*target, &*draft, o);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<SpeedPrediction> s = PredictSpeed(*plan, *target, &*draft, k_max, TypicalAcceptance());
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

int Best(const StepCostModel& m, double alpha) {
  const std::vector<double> a = {alpha};
  return BestDraftLength(a, [&](int k) { return m.Seconds(k); }, m.k_max());
}

TEST(StepCostModelTest, TakesThePredictionsStepsAndTheCacheState) {
  const SpeedPrediction s = Predict(8 * kGiB, 8);
  const StepCostModel uniform(s, RoutingModel::kUniform), locality(s, RoutingModel::kLocality);
  ASSERT_EQ(uniform.k_max(), 8);
  for (const SpeedRow& r : s.rows) {
    EXPECT_DOUBLE_EQ(uniform.Seconds(r.k), r.seconds_uniform);
    EXPECT_DOUBLE_EQ(locality.Seconds(r.k), r.seconds_locality);
    // At the predicted miss rate the cache state changes nothing; every further miss adds its copies:
    // distinct experts a layer x one expert of every layer over the link.
    EXPECT_NEAR(uniform.Seconds(r.k, 1 - r.hit_rate_uniform), r.seconds_uniform, 1e-12);
    EXPECT_NEAR(uniform.Seconds(r.k, 1.0) - uniform.Seconds(r.k, 0.0),
                r.distinct_uniform * s.expert_bytes / s.rates.link_bytes_per_second, 1e-12);
  }
  // Past k_max: the last pass and more draft tokens.
  EXPECT_NEAR(uniform.Seconds(10), uniform.Seconds(8) + 2 * s.draft_token_seconds, 1e-12);
  // Where experts stream, a longer pass routes to more of them and misses more: a step's cost grows
  // faster with k than resident, where only compute and the draft grow.
  const StepCostModel resident(Predict(80 * kGiB, 8), RoutingModel::kUniform);
  EXPECT_GT(uniform.Seconds(8) - uniform.Seconds(0), 2 * (resident.Seconds(8) - resident.Seconds(0)));
}

TEST(StepCostModelTest, ChoosesALongDraftWhenItPaysAndNoneWhenNothingDoes) {
  for (const size_t budget : {8 * kGiB, 80 * kGiB}) {
    const SpeedPrediction s = Predict(budget, 8);
    for (const RoutingModel routing : {RoutingModel::kUniform, RoutingModel::kLocality}) {
      const StepCostModel m(s, routing);
      // A draft that is always right pays, and longer than one token.
      const int good = Best(m, 0.95);
      EXPECT_GE(good, 2) << budget / kGiB << " GiB";
      // One that is right one time in twenty never pays: E(1) = 1.05 for a pass and a draft token.
      EXPECT_EQ(Best(m, 0.05), 0) << budget / kGiB << " GiB";
      // The choice is the best of every length.
      const std::vector<double> a = {0.95};
      for (int k = 0; k <= m.k_max(); ++k) {
        EXPECT_GE(ExpectedTokensPerStep(a, good) / m.Seconds(good), ExpectedTokensPerStep(a, k) / m.Seconds(k));
      }
    }
  }
}

}  // namespace
}  // namespace specgen::moe
