// TopLogprobs: the raw-logit log-softmax at the chosen token and the N most probable tokens.
#include "engine/sampling/top_logprobs.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace specgen {
namespace {

// Reference values are log-softmaxes in double; the result is stored as float, whose rounding at
// |logprob| < 8 is below 2^-21 ≈ 5e-7. 1e-6 bounds it with room.
constexpr float kLogprobTol = 1e-6f;

double RefLogprob(const std::vector<float>& logits, size_t i) {
  double m = logits[0], s = 0;
  for (const float x : logits) m = std::max<double>(m, x);
  for (const float x : logits) s += std::exp(x - m);
  return logits[i] - m - std::log(s);
}

TEST(TopLogprobs, ChosenAndTopAreTheLogSoftmaxInOrder) {
  const std::vector<float> logits = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f};
  const TokenLogprobs t = TopLogprobs(logits, 3, 3);
  EXPECT_EQ(t.chosen.token, 3);
  EXPECT_NEAR(t.chosen.logprob, RefLogprob(logits, 3), kLogprobTol);
  ASSERT_EQ(t.top.size(), 3u);
  const int32_t expected_ids[] = {2, 4, 0};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.top[i].token, expected_ids[i]) << i;
    EXPECT_NEAR(t.top[i].logprob, RefLogprob(logits, static_cast<size_t>(expected_ids[i])), kLogprobTol) << i;
  }
}

TEST(TopLogprobs, TiesGoToTheLowerIdAndNIsClampedToTheVocabulary) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  const TokenLogprobs t = TopLogprobs(logits, 1, 10);
  ASSERT_EQ(t.top.size(), 4u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_EQ(t.top[1].token, 2);
  EXPECT_EQ(t.top[2].token, 3);
  EXPECT_EQ(t.top[3].token, 0);
  // Exactly equal logits give exactly equal log-probabilities, and the row's probabilities sum to 1.
  EXPECT_EQ(t.top[0].logprob, t.top[1].logprob);
  double sum = 0;
  for (const TokenLogprob& e : t.top) sum += std::exp(double{e.logprob});
  EXPECT_NEAR(sum, 1.0, 4 * kLogprobTol);
}

TEST(TopLogprobs, ZeroNGivesOnlyTheChosenToken) {
  const TokenLogprobs t = TopLogprobs(std::vector<float>{0.0f, 0.0f}, 0, 0);
  EXPECT_TRUE(t.top.empty());
  EXPECT_NEAR(t.chosen.logprob, std::log(0.5), kLogprobTol);
}

TEST(TopLogprobs, LargeLogitsDoNotOverflow) {
  // exp(1000) overflows a double; the max-shift keeps the sum finite.
  const TokenLogprobs t = TopLogprobs(std::vector<float>{1000.0f, 999.0f, -1000.0f}, 2, 1);
  EXPECT_NEAR(t.top[0].logprob, -std::log1p(std::exp(-1.0)), kLogprobTol);
  EXPECT_TRUE(std::isfinite(t.chosen.logprob));
  EXPECT_LT(t.chosen.logprob, -1999.0f);
}

}  // namespace
}  // namespace specgen
