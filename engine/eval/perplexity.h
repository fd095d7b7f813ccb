// Perplexity of a model over a text as llama.cpp's perplexity tool computes it: the tokens are cut into
// non-overlapping windows of the context length, each window is run from an empty cache (its first
// token replaced by BOS where the tokenizer adds one), and only the second half of each window is
// scored, so that every scored token sees at least half a window of context. The estimate's ± is
// llama.cpp's too: the standard error of the mean negative log-likelihood, carried through exp.
// KlStats gathers, position by position, how far a run's distributions are from a reference run's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/causal_lm.h"

namespace specgen {

// Which positions a text of n_tokens tokens is scored at with windows of `context` tokens.
struct WindowPlan {
  int64_t window = 0;     // tokens a window (the context, or the whole text when it is shorter)
  int64_t n_windows = 0;  // floor(n_tokens / window); a trailing partial window is not scored
  int64_t first = 0;      // positions j = first .. window − 2 of a window predict token j + 1
  int64_t scored_per_window() const { return window - 1 - first; }
  int64_t scored() const { return n_windows * scored_per_window(); }
};

// A text shorter than `context` is one window of the whole text. Fewer than 2 tokens, or context < 2,
// is an error (nothing to predict).
absl::StatusOr<WindowPlan> PlanWindows(int64_t n_tokens, int64_t context);

// One scored position: the logits [V] the model gave at window position j, and the token that follows.
struct ScoredPosition {
  int64_t window = 0;
  int64_t position = 0;  // j within the window
  std::span<const float> logits;
  int32_t next = 0;
};

// Runs `lm` over every window of `tokens` (`bos` >= 0: each window's first token becomes bos), in
// passes of at most `chunk` positions, and calls `visit` for each scored position in order. Logits that
// are not finite are an error naming the position.
absl::Status ScoreWindows(CausalLm& lm, std::span<const int32_t> tokens, const WindowPlan& plan, int32_t bos,
                          int64_t chunk, const std::function<absl::Status(const ScoredPosition&)>& visit);

// Mean negative log-likelihood and the perplexity exp(mean), with ± = ppl · sqrt(var(nll) / (n − 1)).
class PerplexityStats {
 public:
  void Add(double nll);
  int64_t count() const { return count_; }
  double mean_nll() const;
  double mean_nll_error() const;  // standard error of the mean, sqrt(var / (n − 1)); 0 below 2 samples
  double perplexity() const;
  double perplexity_error() const;  // 0 for fewer than 2 samples

 private:
  int64_t count_ = 0;
  double mean_ = 0.0, m2_ = 0.0;  // running mean and Σ (x − mean)²
};

// KL divergence of a run from its reference, position by position, and how often both rank the same
// token first.
class KlStats {
 public:
  void Add(double kl, bool same_top);
  int64_t count() const { return static_cast<int64_t>(kl_.size()); }
  double mean() const;
  double mean_error() const;  // standard error of the mean
  // The p-quantile (0 <= p <= 1) of the per-position values, linearly interpolated between ranks.
  double Quantile(double p) const;
  double max() const;
  double same_top() const;        // fraction of positions
  double same_top_error() const;  // its standard error, sqrt(f (1 − f) / (n − 1))

 private:
  std::vector<double> kl_;
  int64_t same_top_ = 0;
};

}  // namespace specgen
