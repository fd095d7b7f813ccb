// The pure draft-length choice (draft_length_choice.h) on hand-worked cost models, and the controller's
// bytes-aware policy (a modelled C(k) instead of measured times).
#include "engine/speculative/draft_length_choice.h"

#include <vector>

#include "engine/speculative/draft_length_controller.h"
#include "gtest/gtest.h"

namespace specgen {
namespace {

TEST(DraftLengthChoiceTest, ExpectedTokensPerDepth) {
  const std::vector<double> alpha = {0.8, 0.5};
  EXPECT_DOUBLE_EQ(ExpectedTokensPerStep(alpha, 0), 1.0);
  // 1 + 0.8 + 0.8·0.5 + 0.8·0.5·0.5 = 2.4: the last α holds deeper.
  EXPECT_NEAR(ExpectedTokensPerStep(alpha, 3), 2.4, 1e-12);
  EXPECT_DOUBLE_EQ(ExpectedTokensPerStep({}, 4), 1.0);
}

TEST(DraftLengthChoiceTest, PicksTheBestLength) {
  // α = 0.9 everywhere: E(k) = 1, 1.9, 2.71, 3.439, 4.0951. Costs that rise slowly to k = 3, then jump
  // (a pass whose union no longer fits a cached layer): rates 1, 1.727, 2.258, 2.645, 2.048.
  const std::vector<double> alpha = {0.9};
  const std::vector<double> cost = {1.0, 1.1, 1.2, 1.3, 2.0};
  EXPECT_EQ(BestDraftLength(alpha, [&](int k) { return cost[k]; }, 4), 3);
  // Bounded by k_max.
  EXPECT_EQ(BestDraftLength(alpha, [&](int k) { return cost[k]; }, 2), 2);
  // Decaying acceptance (0.9, 0.5, 0.2): E = 1, 1.9, 2.35, 2.44, 2.458 over the same costs gives
  // 1, 1.727, 1.958, 1.877, 1.229: the shorter k = 2.
  const std::vector<double> decaying = {0.9, 0.5, 0.2};
  EXPECT_EQ(BestDraftLength(decaying, [&](int k) { return cost[k]; }, 4), 2);
}

TEST(DraftLengthChoiceTest, TurnsTheDraftOffWhenNothingPays) {
  // α = 0.3 and a draft token costing half a pass: E(1) / C(1) = 1.3 / 1.5 < 1, and deeper is worse.
  const std::vector<double> alpha = {0.3};
  EXPECT_EQ(BestDraftLength(alpha, [](int k) { return 1.0 + 0.5 * k; }, 8), 0);
  // A tie with plain decoding keeps the draft off: E(1) = 1.5 at cost 1.5.
  EXPECT_EQ(BestDraftLength(std::vector<double>{0.5}, [](int k) { return 1.0 + 0.5 * k; }, 1), 0);
  // The same α pays when drafting is cheap: 1.3 / 1.05 > 1.
  EXPECT_GT(BestDraftLength(alpha, [](int k) { return 1.0 + 0.05 * k; }, 8), 0);
}

TEST(DraftLengthChoiceTest, ControllerTakesTheModelledCostsWithoutAWarmUp) {
  DraftLengthController::Options o;
  // A step costs 1 + 0.1·k: with α near 1 the longest pays, with α near 0 none does.
  o.modelled_step_seconds = [](int k) { return 1.0 + 0.1 * k; };
  DraftLengthController c(6, o);
  // The prior α = 0.6: E(k) / C(k) peaks at k = 3 (2.176 / 1.3 = 1.674; k = 2 1.633, k = 4 1.647).
  EXPECT_EQ(c.Choose(), 3);
  EXPECT_DOUBLE_EQ(c.PredictedStepSeconds(4), 1.4);
  c.ObserveStepTime(4, 100.0);  // measured times do not move a modelled cost
  EXPECT_DOUBLE_EQ(c.PredictedStepSeconds(4), 1.4);
  DraftLengthController accepting(6, o), rejecting(6, o);
  for (int i = 0; i < 200; ++i) {
    accepting.ObserveAcceptance(6, 6);
    rejecting.ObserveAcceptance(1, 0);
  }
  EXPECT_EQ(accepting.Choose(), 6);
  EXPECT_EQ(rejecting.Choose(), 0);
}

}  // namespace
}  // namespace specgen
