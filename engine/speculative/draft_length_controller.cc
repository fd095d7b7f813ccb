#include "engine/speculative/draft_length_controller.h"

#include <algorithm>
#include <cmath>

namespace specgen {

DraftLengthController::DraftLengthController(int k_max, Options options)
    : k_max_(std::max(0, k_max)),
      options_(options),
      alpha_(options.alpha_prior),
      t_verify_(k_max_ + 2, 0.0),
      verify_measured_(k_max_ + 2, false) {}

double DraftLengthController::ExpectedTokens(double alpha, int k) {
  double sum = 0.0, term = 1.0;
  for (int i = 0; i <= k; ++i, term *= alpha) sum += term;
  return sum;
}

double DraftLengthController::PredictedVerifySeconds(int n) const {
  if (verify_measured_[n]) return t_verify_[n];
  // Least-squares line through the measured (n, t) points; one point: constant; none: unit cost.
  double sn = 0, st = 0, snn = 0, snt = 0;
  int m = 0;
  for (int i = 1; i <= k_max_ + 1; ++i) {
    if (!verify_measured_[i]) continue;
    ++m;
    sn += i;
    st += t_verify_[i];
    snn += double(i) * i;
    snt += i * t_verify_[i];
  }
  if (m == 0) return 1.0;
  const double det = m * snn - sn * sn;
  if (m == 1 || det <= 0) return st / m;
  const double slope = std::max(0.0, (m * snt - sn * st) / det);
  const double intercept = (st - slope * sn) / m;
  return std::max(intercept + slope * n, 1e-9);
}

double DraftLengthController::Rate(int k) const {
  const double t = k * t_draft_ + PredictedVerifySeconds(k + 1);
  return ExpectedTokens(alpha_, k) / std::max(t, 1e-12);
}

int DraftLengthController::Choose() {
  ++passes_;
  if (k_max_ == 0) return 0;
  // Warm-up: measure the longest pass and the plain pass once, so the verify-cost line has two ends.
  if (!draft_measured_ || !verify_measured_[k_max_ + 1]) return k_max_;
  if (!verify_measured_[1]) return 0;
  int best = 0;
  for (int k = 1; k <= k_max_; ++k) {
    if (Rate(k) > Rate(best)) best = k;
  }
  if (best == 0) {
    if (++zero_streak_ >= options_.explore_every) {
      zero_streak_ = 0;
      return 1;
    }
  } else {
    zero_streak_ = 0;
  }
  return best;
}

void DraftLengthController::ObserveAcceptance(int k, int n_accepted) {
  if (k <= 0) return;
  const int tested = n_accepted + (n_accepted < k ? 1 : 0);
  for (int i = 0; i < tested; ++i) {
    const double hit = i < n_accepted ? 1.0 : 0.0;
    const double weight = std::max(options_.alpha_weight, 1.0 / static_cast<double>(tested_ + 2));
    alpha_ += weight * (hit - alpha_);
    ++tested_;
  }
}

void DraftLengthController::ObserveDraftTime(int k, double seconds) {
  if (k <= 0) return;
  const double per_token = seconds / k;
  t_draft_ = draft_measured_ ? t_draft_ + options_.time_weight * (per_token - t_draft_) : per_token;
  draft_measured_ = true;
}

void DraftLengthController::ObserveVerifyTime(int n, double seconds) {
  if (n < 1 || n > k_max_ + 1) return;
  t_verify_[n] = verify_measured_[n] ? t_verify_[n] + options_.time_weight * (seconds - t_verify_[n])
                                     : seconds;
  verify_measured_[n] = true;
}

}  // namespace specgen
