// Adaptive draft length (DESIGN §3): from an EWMA estimate of the per-token acceptance α and the
// measured costs of drafting one token and of verifying n positions, choose the k in [0, k_max] that
// maximizes expected tokens per second, E(k) / (k·t_draft + t_verify(k+1)) with
// E(k) = (1 − α^(k+1)) / (1 − α); k = 0 (plain decoding) when speculation does not pay.
#pragma once

#include <cstdint>
#include <vector>

namespace specgen {

class DraftLengthController {
 public:
  struct Options {
    double alpha_prior = 0.6;     // before any draft was tested
    // EWMA weight of one tested draft token; until 1 / alpha_weight tokens were tested, α is their
    // running mean with the prior as one observation (so a first pass moves it, where a weight of
    // 0.05 from the start kept a pair whose drafts all pass below 0.9 for 27 tokens).
    double alpha_weight = 0.05;
    double time_weight = 0.2;     // EWMA weight of one timing sample
    int explore_every = 16;       // while k = 0 wins, try k = 1 this often to keep α and t_draft fresh
  };
  explicit DraftLengthController(int k_max) : DraftLengthController(k_max, Options()) {}
  DraftLengthController(int k_max, Options options);

  // The draft length for the next pass.
  int Choose();

  // After a pass that drafted k and kept n_accepted: tested tokens are the accepted ones plus the
  // first rejected one (later drafts were never tested, so they say nothing about α).
  void ObserveAcceptance(int k, int n_accepted);
  void ObserveDraftTime(int k, double seconds);              // total for proposing k tokens
  void ObserveVerifyTime(int n_positions, double seconds);   // one target pass over n positions

  double alpha() const { return alpha_; }
  static double ExpectedTokens(double alpha, int k);  // Σ_{i=0..k} α^i
  double PredictedVerifySeconds(int n_positions) const;
  double PredictedDraftSeconds() const { return t_draft_; }
  // Expected tokens per second of draft length k under the current estimates.
  double Rate(int k) const;

 private:
  int k_max_;
  Options options_;
  double alpha_;
  int64_t tested_ = 0;    // draft tokens tested so far
  double t_draft_ = 0.0;  // per drafted token; 0 until measured
  bool draft_measured_ = false;
  std::vector<double> t_verify_;   // [n] EWMA, index 1..k_max+1
  std::vector<bool> verify_measured_;
  int passes_ = 0;
  int zero_streak_ = 0;
};

}  // namespace specgen
