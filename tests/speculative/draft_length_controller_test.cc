#include "engine/speculative/draft_length_controller.h"

#include <random>

#include "gtest/gtest.h"

namespace specgen {
namespace {

// Feeds the controller a synthetic world: per-token acceptance alpha, draft cost per token, and a
// verify cost of a + b·n; returns the k it settles on.
int Settle(double alpha, double t_draft, double a, double b, int k_max = 8) {
  DraftLengthController c(k_max);
  std::mt19937 rng(1);
  std::bernoulli_distribution accept(alpha);
  int k = 0;
  for (int pass = 0; pass < 400; ++pass) {
    k = c.Choose();
    int n = 0;
    while (n < k && accept(rng)) ++n;
    c.ObserveAcceptance(k, n);
    c.ObserveDraftTime(k, k * t_draft);
    c.ObserveVerifyTime(k + 1, a + b * (k + 1));
  }
  return k;
}

TEST(DraftLengthController, ExpectedTokensIsTheGeometricSum) {
  EXPECT_DOUBLE_EQ(DraftLengthController::ExpectedTokens(0.8, 4), (1 - std::pow(0.8, 5)) / 0.2);
  EXPECT_DOUBLE_EQ(DraftLengthController::ExpectedTokens(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(DraftLengthController::ExpectedTokens(0.5, 0), 1.0);
}

TEST(DraftLengthController, LongDraftsWhenVerifyIsFlatAndDraftsAreCheap) {
  // Offload regime: a pass costs the same for 1..9 positions; drafting is 1% of it.
  EXPECT_GE(Settle(0.9, 0.01, 1.0, 0.0), 6);
}

TEST(DraftLengthController, NoSpeculationWhenAcceptanceIsLow) {
  // Compute-bound verify (cost ∝ n) and a draft at 30% of a step: α = 0.1 never pays.
  EXPECT_EQ(Settle(0.1, 0.3, 0.0, 1.0), 0);
}

TEST(DraftLengthController, ModerateDraftsInBetween) {
  const int k = Settle(0.7, 0.05, 1.0, 0.1);
  EXPECT_GE(k, 2);
  EXPECT_LE(k, 6);
}

TEST(DraftLengthController, AlphaLeavesThePriorWithinAPass) {
  // Until 1 / alpha_weight = 20 tokens were tested, α is the running mean of the prior (0.6, one
  // observation) and the tests: a pass of 15 accepted drafts takes it to (0.6 + 15) / 16 (a plain EWMA
  // of weight 0.05 left it at 1 - 0.4 * 0.95^15 = 0.81), a rejected first draft to 0.6 / 2.
  DraftLengthController all(15);
  all.ObserveAcceptance(15, 15);
  EXPECT_NEAR(all.alpha(), 15.6 / 16, 1e-12);
  DraftLengthController none(4);
  none.ObserveAcceptance(4, 0);
  EXPECT_NEAR(none.alpha(), 0.3, 1e-12);
  // Past the window the weight is alpha_weight again: 20 hits, then one miss moves α by 5% of it.
  DraftLengthController c(4);
  for (int i = 0; i < 5; ++i) c.ObserveAcceptance(4, 4);  // 20 tested, all accepted
  const double before = c.alpha();
  c.ObserveAcceptance(4, 0);
  EXPECT_NEAR(c.alpha(), before - 0.05 * before, 1e-12);
}

TEST(DraftLengthController, EstimatesAlpha) {
  DraftLengthController c(4);
  std::mt19937 rng(3);
  std::bernoulli_distribution accept(0.75);
  for (int pass = 0; pass < 2000; ++pass) {
    int n = 0;
    while (n < 4 && accept(rng)) ++n;
    c.ObserveAcceptance(4, n);
  }
  // EWMA with weight 0.05 per tested token: sd ≈ √(0.05/2 · 0.75·0.25) ≈ 0.07; 4 sd = 0.27 is loose,
  // what matters is that censoring after the first rejection does not bias it.
  EXPECT_NEAR(c.alpha(), 0.75, 0.27);
}

}  // namespace
}  // namespace specgen
