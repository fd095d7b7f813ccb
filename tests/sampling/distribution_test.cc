// Logits processing (temperature, top-k, top-p, min-p) and keyed Gumbel-max draws.
#include "engine/sampling/distribution.h"

#include <cmath>
#include <numeric>

#include "gtest/gtest.h"
#include "tests/common/chi_square.h"

namespace specgen {
namespace {

using ::specgen::testing::ChiSquareTest;
using ::specgen::testing::kFalseFailureRate;

// Probabilities are softmaxes computed in double and stored as float: relative error ≤ a few float
// ulps (2^-24 ≈ 6e-8) per entry, so 1e-6 absolute is a generous, dtype-derived bound for V ≤ 16.
constexpr float kProbTol = 1e-6f;

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> w(logits.size());
  double m = *std::max_element(logits.begin(), logits.end()), s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += (w[i] = std::exp((logits[i] - m) / temperature));
  for (double& x : w) x /= s;
  return w;
}

TEST(ProcessLogits, GreedyIsOneHotAtTheLowestMaximalId) {
  std::vector<float> probs;
  ProcessLogits(std::vector<float>{1, 3, 3, 2}, SamplingParams::Greedy(), &probs);
  EXPECT_EQ(probs, (std::vector<float>{0, 1, 0, 0}));
}

TEST(ProcessLogits, TemperatureOnlyIsTheSoftmax) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f};
  std::vector<float> probs;
  ProcessLogits(logits, SamplingParams::Plain(0.7f, 0), &probs);
  const auto expected = Softmax(logits, 0.7);
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(probs[i], expected[i], kProbTol) << i;
}

TEST(ProcessLogits, TopKKeepsTheKLargestAndBreaksTiesByLowerId) {
  const std::vector<float> logits = {1, 2, 2, 0, 2};
  auto params = SamplingParams::Plain(1.0f, 0);
  params.top_k = 2;
  std::vector<float> probs;
  ProcessLogits(logits, params, &probs);
  EXPECT_NEAR(probs[1], 0.5f, kProbTol);
  EXPECT_NEAR(probs[2], 0.5f, kProbTol);
  EXPECT_EQ(probs[0] + probs[3] + probs[4], 0.0f);
}

TEST(ProcessLogits, TopPKeepsTheSmallestSetReachingP) {
  // Softmax at T=1 of log(0.5, 0.3, 0.15, 0.05): top_p 0.8 keeps {0, 1} (0.5 + 0.3 = 0.8).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto params = SamplingParams::Plain(1.0f, 0);
  params.top_p = 0.79f;
  std::vector<float> probs;
  ProcessLogits(logits, params, &probs);
  EXPECT_NEAR(probs[0], 0.625f, kProbTol);
  EXPECT_NEAR(probs[1], 0.375f, kProbTol);
  EXPECT_EQ(probs[2] + probs[3], 0.0f);
  params.top_p = 0.81f;  // now needs the third
  ProcessLogits(logits, params, &probs);
  EXPECT_NEAR(probs[2], 0.15f / 0.95f, kProbTol);
  EXPECT_EQ(probs[3], 0.0f);
}

TEST(ProcessLogits, MinPIsRelativeToTheMaximum) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto params = SamplingParams::Plain(1.0f, 0);
  params.min_p = 0.2f;  // keeps p >= 0.1
  std::vector<float> probs;
  ProcessLogits(logits, params, &probs);
  EXPECT_NEAR(probs[2], 0.15f / 0.95f, kProbTol);
  EXPECT_EQ(probs[3], 0.0f);
}

TEST(ProcessLogits, AllFiltersTogetherSumToOne) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.37f) * 3;
  SamplingParams params;  // defaults: every filter on
  std::vector<float> probs;
  ProcessLogits(logits, params, &probs);
  double sum = std::accumulate(probs.begin(), probs.end(), 0.0);
  EXPECT_NEAR(sum, 1.0, 100 * kProbTol);
  EXPECT_LE(std::count_if(probs.begin(), probs.end(), [](float p) { return p > 0; }), 40);
}

TEST(SampleGumbelMax, MatchesTheDistributionOverSeeds) {
  const std::vector<float> weights = {0.1f, 0.0f, 0.3f, 0.05f, 0.25f, 0.2f, 0.1f};  // sums to 1
  std::vector<int64_t> counts(weights.size(), 0);
  const int kTrials = 100000;
  for (int s = 0; s < kTrials; ++s) {
    ++counts[SampleGumbelMax(weights, s, 3, RandomPurpose::kTargetSample)];
  }
  const auto r = ChiSquareTest(counts, std::vector<double>(weights.begin(), weights.end()));
  EXPECT_GT(r.p_value, kFalseFailureRate) << "chi2 " << r.statistic << " dof " << r.dof;
}

TEST(SampleGumbelMax, AllZeroWeightsGiveMinusOne) {
  EXPECT_EQ(SampleGumbelMax(std::vector<float>{0, 0, 0}, 1, 2, RandomPurpose::kResidual), -1);
}

TEST(SamplingParams, ValidateNamesTheFlag) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(Validate(p).message().find("--top-p"), std::string::npos);
  p = SamplingParams();
  p.temperature = -1;
  EXPECT_NE(Validate(p).message().find("--temp"), std::string::npos);
}

}  // namespace
}  // namespace specgen
