#include "moe/step_cost_model.h"

#include <algorithm>

namespace specgen::moe {

StepCostModel::StepCostModel(const SpeedPrediction& prediction, RoutingModel routing)
    : expert_seconds_(prediction.expert_bytes / prediction.rates.link_bytes_per_second),
      draft_token_seconds_(prediction.draft_token_seconds) {
  for (const SpeedRow& r : prediction.rows) {
    const bool uniform = routing == RoutingModel::kUniform;
    seconds_.push_back(uniform ? r.seconds_uniform : r.seconds_locality);
    distinct_.push_back(uniform ? r.distinct_uniform : r.distinct_locality);
    miss_.push_back(1.0 - (uniform ? r.hit_rate_uniform : r.hit_rate_locality));
  }
}

double StepCostModel::Seconds(int k) const {
  if (seconds_.empty()) return 1.0;
  const int row = std::clamp(k, 0, k_max());
  return seconds_[static_cast<size_t>(row)] + (k - row) * draft_token_seconds_;
}

double StepCostModel::Seconds(int k, double miss_rate) const {
  if (seconds_.empty()) return 1.0;
  const size_t row = static_cast<size_t>(std::clamp(k, 0, k_max()));
  const double copies = distinct_[row] * (std::clamp(miss_rate, 0.0, 1.0) - miss_[row]) * expert_seconds_;
  return std::max(Seconds(k) + copies, 1e-9);
}

}  // namespace specgen::moe
