#include "engine/eval/log_probs.h"

#include <algorithm>
#include <cmath>

namespace specgen {
namespace {

// max and log Σ exp(l_i − max) of a row, in double.
struct LogSumExp {
  double max = 0.0;
  double log_sum = 0.0;  // log Σ exp(l_i − max)
};

LogSumExp ComputeLogSumExp(std::span<const float> logits) {
  LogSumExp r;
  r.max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - r.max);
  r.log_sum = std::log(sum);
  return r;
}

}  // namespace

double NegLogLikelihood(std::span<const float> logits, int32_t token) {
  const LogSumExp lse = ComputeLogSumExp(logits);
  return (lse.max - static_cast<double>(logits[token])) + lse.log_sum;
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void EncodeLogProbs(std::span<const float> logits, EncodedLogProbs* out) {
  const LogSumExp lse = ComputeLogSumExp(logits);
  const double min_logit = *std::min_element(logits.begin(), logits.end());
  // log p_i = (l_i − max) − log_sum; the top one is −log_sum.
  const double top = -lse.log_sum;
  const double floor = std::max(min_logit - lse.max, -kLogProbRange) - lse.log_sum;
  out->min_log_prob = static_cast<float>(floor);
  out->scale = static_cast<float>((top - floor) / 65535.0);
  out->q.resize(logits.size());
  const double min_lp = out->min_log_prob, scale = out->scale;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double lp = (static_cast<double>(logits[i]) - lse.max) - lse.log_sum;
    const double v = scale > 0 ? std::nearbyint((lp - min_lp) / scale) : 0.0;
    out->q[i] = static_cast<uint16_t>(std::clamp(v, 0.0, 65535.0));
  }
}

double KlDivergence(const EncodedLogProbs& base, const EncodedLogProbs& current) {
  double kl = 0.0;
  for (size_t i = 0; i < base.q.size(); ++i) {
    const double lb = base.LogProb(static_cast<int64_t>(i));
    kl += std::exp(lb) * (lb - current.LogProb(static_cast<int64_t>(i)));
  }
  return kl;
}

}  // namespace specgen
