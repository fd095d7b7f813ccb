#include "engine/speculative/draft_length_choice.h"

#include <algorithm>

namespace specgen {

double ExpectedTokensPerStep(std::span<const double> alpha, int k) {
  double sum = 1.0, reach = 1.0;  // reach: the chance that drafts 1..j are all accepted
  for (int j = 1; j <= k; ++j) {
    reach *= alpha.empty() ? 0.0 : alpha[std::min<size_t>(static_cast<size_t>(j - 1), alpha.size() - 1)];
    sum += reach;
  }
  return sum;
}

int BestDraftLength(std::span<const double> alpha, const std::function<double(int k)>& step_seconds, int k_max) {
  int best = 0;
  double best_rate = ExpectedTokensPerStep(alpha, 0) / std::max(step_seconds(0), 1e-12);
  for (int k = 1; k <= k_max; ++k) {
    const double rate = ExpectedTokensPerStep(alpha, k) / std::max(step_seconds(k), 1e-12);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

}  // namespace specgen
