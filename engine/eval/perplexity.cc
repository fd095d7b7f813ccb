#include "engine/eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status_macros.h"

namespace specgen {

absl::StatusOr<WindowPlan> PlanWindows(int64_t n_tokens, int64_t context) {
  if (context < 2) return InvalidArgument("the context must hold at least 2 tokens, got ", context);
  if (n_tokens < 2) {
    return InvalidArgument("the text has ", n_tokens, " token", n_tokens == 1 ? "" : "s",
                           "; perplexity needs at least 2 (one to predict from, one to predict)");
  }
  WindowPlan plan;
  plan.window = std::min(context, n_tokens);
  plan.n_windows = n_tokens / plan.window;
  // llama.cpp's first = n_ctx / 2; a window of 2 scores its first position (else it would score none).
  plan.first = std::min(plan.window / 2, plan.window - 2);
  return plan;
}

absl::Status ScoreWindows(CausalLm& lm, std::span<const int32_t> tokens, const WindowPlan& plan, int32_t bos,
                          int64_t chunk, const std::function<absl::Status(const ScoredPosition&)>& visit) {
  if (plan.window > lm.max_context()) {
    return InvalidArgument("a window of ", plan.window, " tokens exceeds the model's context of ",
                           lm.max_context());
  }
  if (plan.n_windows * plan.window > static_cast<int64_t>(tokens.size())) {
    return InvalidArgument(plan.n_windows, " windows of ", plan.window, " tokens need more than the ",
                           tokens.size(), " tokens given");
  }
  chunk = std::max<int64_t>(1, chunk);
  const int64_t vocab = lm.vocab_size();
  std::vector<int32_t> window;
  std::vector<float> logits;
  for (int64_t w = 0; w < plan.n_windows; ++w) {
    window.assign(tokens.begin() + w * plan.window, tokens.begin() + (w + 1) * plan.window);
    if (bos >= 0) window[0] = bos;
    RETURN_IF_ERROR(lm.Truncate(0));
    // Positions past window − 2 predict nothing inside the window: the last token is never fed.
    const int64_t fed = plan.window - 1;
    for (int64_t begin = 0; begin < fed; begin += chunk) {
      const int64_t n = std::min(chunk, fed - begin);
      RETURN_IF_ERROR(lm.Forward(std::span<const int32_t>(window).subspan(begin, n), &logits));
      if (static_cast<int64_t>(logits.size()) != n * vocab) {
        return absl::InternalError(Cat("the model returned ", logits.size(), " logits for ", n,
                                       " positions of a vocabulary of ", vocab));
      }
      for (int64_t i = std::max<int64_t>(0, plan.first - begin); i < n; ++i) {
        ScoredPosition p;
        p.window = w;
        p.position = begin + i;
        p.logits = std::span<const float>(logits).subspan(i * vocab, vocab);
        p.next = window[p.position + 1];
        for (float l : p.logits) {
          if (!std::isfinite(l)) {
            return absl::DataLossError(Cat("window ", w, " position ", p.position, " (token ",
                                           w * plan.window + p.position, " of the text): the logits are not finite"));
          }
        }
        RETURN_IF_ERROR(visit(p));
      }
    }
  }
  return lm.Truncate(0);
}

// Welford's update: the variance without the cancellation of Σx² − n·mean², which leaves noise where
// every sample is the same.
void PerplexityStats::Add(double nll) {
  ++count_;
  const double delta = nll - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (nll - mean_);
}

double PerplexityStats::mean_nll() const { return mean_; }

double PerplexityStats::perplexity() const { return std::exp(mean_nll()); }

double PerplexityStats::mean_nll_error() const {
  if (count_ < 2) return 0.0;
  const double var = m2_ / static_cast<double>(count_);  // llama.cpp's: the population variance
  return std::sqrt(var / static_cast<double>(count_ - 1));
}

// d exp(m) = exp(m) dm: the error of the mean carried through exp, as llama.cpp reports it.
double PerplexityStats::perplexity_error() const { return perplexity() * mean_nll_error(); }

void KlStats::Add(double kl, bool same_top) {
  kl_.push_back(kl);
  same_top_ += same_top ? 1 : 0;
}

double KlStats::mean() const {
  double sum = 0.0;
  for (double v : kl_) sum += v;
  return kl_.empty() ? 0.0 : sum / static_cast<double>(kl_.size());
}

double KlStats::mean_error() const {
  if (kl_.size() < 2) return 0.0;
  const double m = mean();
  double ss = 0.0;
  for (double v : kl_) ss += (v - m) * (v - m);
  const double n = static_cast<double>(kl_.size());
  return std::sqrt(ss / (n - 1) / n);
}

double KlStats::Quantile(double p) const {
  if (kl_.empty()) return 0.0;
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  const double rank = std::clamp(p, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double KlStats::max() const { return kl_.empty() ? 0.0 : *std::max_element(kl_.begin(), kl_.end()); }

double KlStats::same_top() const {
  return kl_.empty() ? 0.0 : static_cast<double>(same_top_) / static_cast<double>(kl_.size());
}

double KlStats::same_top_error() const {
  if (kl_.size() < 2) return 0.0;
  const double f = same_top();
  return std::sqrt(f * (1.0 - f) / static_cast<double>(kl_.size() - 1));
}

}  // namespace specgen
