// Adaptive draft length (docs/design.md §3): from EWMA estimates of the acceptance at each draft depth and of
// the measured cost of a whole step at each k, choose the k in [0, k_max] that maximizes expected
// tokens per second, E(k) / C(k) with E(k) = 1 + Σ_{j=1..k} Π_{i=1..j} α_i, where α_i is the
// probability that draft i is accepted given that drafts 1..i-1 were; k = 0 (plain decoding) when
// speculation does not pay.
//
// Acceptance is kept per depth because real pairs are not geometric: once a draft agrees with the
// target it tends to keep agreeing (copied code, a fixed phrase), so α_2, α_3 run above α_1. One α
// for all depths, learnt mostly from the first draft, undervalues longer drafts (docs/experiments.md).
// A depth not tested yet takes the estimate of the depth above.
//
// The cost is a step's as the loop measures it, not k·t_draft + t_verify(k + 1): a step also feeds the
// draft the previous step's bonus token (a cost per step, not per draft), and on the GPU the device's
// drafting is waited for with the verification: a split into a per-token draft cost and a verify cost
// charges those parts to whichever k they were measured at, and mis-predicts the other lengths
// (docs/experiments.md).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace specgen {

class DraftLengthController {
 public:
  struct Options {
    double alpha_prior = 0.6;     // α_1 before any draft was tested
    // EWMA weight of one tested draft token at a depth; until 1 / alpha_weight tokens were tested
    // there, its α is their running mean with its starting value as one observation (so a first pass
    // moves it, where a weight of 0.05 from the start kept a pair whose drafts all pass below 0.9 for
    // 27 tokens).
    double alpha_weight = 0.05;
    double time_weight = 0.2;     // EWMA weight of one timing sample
    // Every this many passes, try a neighbour of the best k instead of it, alternately one longer
    // (tests the next depth's α and the next pass size's cost; k = 1 when the best is 0) and one
    // shorter (refreshes the cost below): estimates of a k that is never chosen would otherwise stay
    // as they were first measured.
    int explore_every = 16;
    // The bytes-aware policy (docs/design.md §3.4): when set, a step's cost at each k is this model's
    // (moe/step_cost_model.h: the draft's tokens, the pass's compute and the experts it misses and
    // streams) instead of the measured times, so no warm-up measures the ends and timings are ignored;
    // acceptance is still learnt per depth, and explorations still test the next depth.
    std::function<double(int k)> modelled_step_seconds;
  };
  explicit DraftLengthController(int k_max) : DraftLengthController(k_max, Options()) {}
  DraftLengthController(int k_max, Options options);

  // The draft length for the next pass.
  int Choose();

  // After a pass that drafted k and kept n_accepted: depths 1..n_accepted were accepted and depth
  // n_accepted + 1 (when <= k) rejected; deeper drafts were never tested, so they say nothing.
  void ObserveAcceptance(int k, int n_accepted);
  // The wall time of a step that drafted k: proposing, verifying and accepting.
  void ObserveStepTime(int k, double seconds);
  // Instead of the above, for a step whose time is not what a step of its k costs (a graph was
  // captured during it, or the draft first caught up on the tokens of steps made without it): an
  // exploration is then tried once more, so that it is measured.
  void ObserveUntimed();

  // α at draft depth i (1-based; depth 1 for i < 1).
  double alpha(int depth = 1) const;
  static double ExpectedTokens(double alpha, int k);  // Σ_{i=0..k} α^i (one α at every depth)
  double ExpectedTokens(int k) const;                 // E(k) from the per-depth estimates
  // C(k): the model's when Options::modelled_step_seconds is set; else the EWMA where k was measured, else the line through the nearest measured lengths around k
  // (or the two nearest on one side), a constant with one measured length, 1 with none.
  double PredictedStepSeconds(int k) const;
  // Expected tokens per second of draft length k under the current estimates.
  double Rate(int k) const;

 private:
  int Best() const;
  // The measured length nearest to `from` (itself included) going by `step` (-1 or +1); -1 if none.
  int NearestMeasured(int from, int step) const;

  int k_max_;
  Options options_;
  std::vector<double> alpha_;     // [depth], 1..k_max
  std::vector<int64_t> tested_;   // draft tokens tested at each depth
  std::vector<double> t_step_;    // [k] EWMA, 0..k_max
  std::vector<bool> step_measured_;
  int since_explore_ = 0;
  bool explore_longer_ = true;    // which neighbour the next exploration tries
  int explored_ = -1;             // the k of the last Choose when it was an exploration, else -1
  int repeat_ = -1;               // an untimed exploration's k, for the next Choose
};

}  // namespace specgen
