#include "engine/speculative/draft_length_controller.h"

#include <algorithm>
#include <cmath>

#include "engine/speculative/draft_length_choice.h"

namespace specgen {

DraftLengthController::DraftLengthController(int k_max, Options options)
    : k_max_(std::max(0, k_max)),
      options_(options),
      alpha_(k_max_ + 1, options.alpha_prior),
      tested_(k_max_ + 1, 0),
      t_step_(k_max_ + 1, 0.0),
      step_measured_(k_max_ + 1, false) {}

double DraftLengthController::ExpectedTokens(double alpha, int k) {
  double sum = 0.0, term = 1.0;
  for (int i = 0; i <= k; ++i, term *= alpha) sum += term;
  return sum;
}

double DraftLengthController::alpha(int depth) const {
  depth = std::clamp(depth, 1, std::max(1, k_max_));
  // An untested depth inherits from the nearest tested one above it (the geometric assumption).
  while (depth > 1 && tested_[depth] == 0) --depth;
  return k_max_ == 0 ? options_.alpha_prior : alpha_[depth];
}

double DraftLengthController::ExpectedTokens(int k) const {
  std::vector<double> alpha(static_cast<size_t>(std::max(k, 0)));
  for (int j = 1; j <= k; ++j) alpha[static_cast<size_t>(j - 1)] = this->alpha(j);
  return ExpectedTokensPerStep(alpha, k);
}

int DraftLengthController::NearestMeasured(int from, int step) const {
  for (int i = step < 0 ? std::min(from, k_max_) : std::max(from, 0); i >= 0 && i <= k_max_; i += step) {
    if (step_measured_[i]) return i;
  }
  return -1;
}

double DraftLengthController::PredictedStepSeconds(int k) const {
  if (options_.modelled_step_seconds) return std::max(options_.modelled_step_seconds(k), 1e-9);
  if (k >= 0 && k <= k_max_ && step_measured_[k]) return t_step_[k];
  // The measured lengths nearest to k: below and above it, or the two nearest on one side. So a
  // prediction rests on the lengths next to it, which the exploration around the chosen k keeps
  // fresh, not on far ones measured once during the warm-up (a least-squares line through every
  // length let those weigh as much), and it follows a cost that is not one line in k (tensor-core
  // tiles, a second wave of blocks).
  const int below = NearestMeasured(k - 1, -1), above = NearestMeasured(k + 1, 1);
  int a = 0, b = 0;
  if (below >= 0 && above >= 0) {
    a = below, b = above;
  } else if (below >= 0 && NearestMeasured(below - 1, -1) >= 0) {
    a = NearestMeasured(below - 1, -1), b = below;
  } else if (above >= 0 && NearestMeasured(above + 1, 1) >= 0) {
    a = above, b = NearestMeasured(above + 1, 1);
  } else if (below >= 0 || above >= 0) {
    return t_step_[below >= 0 ? below : above];
  } else {
    return 1.0;
  }
  // A cost that falls with longer drafts is noise: no negative slope.
  const double slope = std::max(0.0, (t_step_[b] - t_step_[a]) / (b - a));
  return std::max(t_step_[a] + slope * (k - a), 1e-9);
}

double DraftLengthController::Rate(int k) const {
  return ExpectedTokens(k) / std::max(PredictedStepSeconds(k), 1e-12);
}

int DraftLengthController::Best() const {
  std::vector<double> alpha(static_cast<size_t>(k_max_));
  for (int j = 1; j <= k_max_; ++j) alpha[static_cast<size_t>(j - 1)] = this->alpha(j);
  return BestDraftLength(alpha, [this](int k) { return PredictedStepSeconds(k); }, k_max_);
}

int DraftLengthController::Choose() {
  if (k_max_ == 0) return 0;
  // Warm-up: measure the longest step and the plain step once, so the costs have two ends (a
  // modelled cost needs none).
  if (!options_.modelled_step_seconds) {
    if (!step_measured_[k_max_]) return k_max_;
    if (!step_measured_[0]) return 0;
  }
  explored_ = -1;
  if (repeat_ >= 0) {
    const int k = repeat_;
    repeat_ = -1;
    return k;
  }
  const int best = Best();
  if (++since_explore_ < options_.explore_every) return best;
  since_explore_ = 0;
  const bool longer = best == 0 || (explore_longer_ && best < k_max_);
  explore_longer_ = !explore_longer_;
  explored_ = longer ? std::min(best + 1, k_max_) : best - 1;
  return explored_;
}

void DraftLengthController::ObserveUntimed() {
  repeat_ = explored_;
  explored_ = -1;
}

void DraftLengthController::ObserveAcceptance(int k, int n_accepted) {
  if (k <= 0) return;
  k = std::min(k, k_max_);
  n_accepted = std::clamp(n_accepted, 0, k);
  const int tested = n_accepted + (n_accepted < k ? 1 : 0);
  for (int depth = 1; depth <= tested; ++depth) {
    if (tested_[depth] == 0) alpha_[depth] = alpha(depth);  // starts from what it inherited
    const double hit = depth <= n_accepted ? 1.0 : 0.0;
    const double weight =
        std::max(options_.alpha_weight, 1.0 / static_cast<double>(tested_[depth] + 2));
    alpha_[depth] += weight * (hit - alpha_[depth]);
    ++tested_[depth];
  }
}

void DraftLengthController::ObserveStepTime(int k, double seconds) {
  if (k < 0 || k > k_max_ || options_.modelled_step_seconds) return;
  t_step_[k] = step_measured_[k] ? t_step_[k] + options_.time_weight * (seconds - t_step_[k]) : seconds;
  step_measured_[k] = true;
}

}  // namespace specgen
