#include "engine/sampling/distribution.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status Validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument("--temp must be a finite number >= 0 (0 = greedy), got ", p.temperature);
  }
  if (p.top_k < 0) return InvalidArgument("--top-k must be >= 0 (0 = off), got ", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return InvalidArgument("--top-p must be in (0, 1] (1 = off), got ", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return InvalidArgument("--min-p must be in [0, 1] (0 = off), got ", p.min_p);
  }
  return absl::OkStatus();
}

std::string ToString(const SamplingParams& p) {
  if (p.greedy()) return "greedy";
  return Cat("temp=", p.temperature, " top_k=", p.top_k, " top_p=", p.top_p, " min_p=", p.min_p,
             " seed=", p.seed);
}

int32_t Argmax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

void ProcessLogits(std::span<const float> logits, const SamplingParams& params,
                   std::vector<float>* probs) {
  const size_t v = logits.size();
  probs->assign(v, 0.0f);
  if (v == 0) return;
  if (params.greedy()) {
    (*probs)[Argmax(logits)] = 1.0f;
    return;
  }
  // Softmax of logits / T in double (the max subtracted first); the kept set is then narrowed.
  const double inv_t = 1.0 / params.temperature;
  const float max_logit = logits[Argmax(logits)];
  std::vector<double> w(v);
  for (size_t i = 0; i < v; ++i) w[i] = std::exp((double(logits[i]) - max_logit) * inv_t);

  // Ids in order of decreasing probability, lower id first on ties: the order every filter uses.
  std::vector<int32_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  size_t kept = v;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < v) {
    kept = params.top_k;
    std::partial_sort(order.begin(), order.begin() + kept, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (size_t r = 0; r < kept; ++r) total += w[order[r]];
    // Smallest prefix whose renormalized mass reaches top_p (at least one id).
    const double target = double(params.top_p) * total;
    double acc = 0.0;
    size_t r = 0;
    while (r < kept) {
      acc += w[order[r++]];
      if (acc >= target) break;
    }
    kept = r;
  }
  if (params.min_p > 0.0f) {
    // Relative to the largest probability, which every earlier filter keeps.
    const double threshold = double(params.min_p) * w[order[0]];
    size_t r = 1;
    while (r < kept && w[order[r]] >= threshold) ++r;
    kept = r;
  }
  double total = 0.0;
  for (size_t r = 0; r < kept; ++r) total += w[order[r]];
  for (size_t r = 0; r < kept; ++r) (*probs)[order[r]] = static_cast<float>(w[order[r]] / total);
}

int32_t SampleGumbelMax(std::span<const float> weights, uint64_t seed, int64_t position,
                        RandomPurpose purpose) {
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  const size_t v = weights.size();
  for (size_t block = 0; block * 4 < v; ++block) {
    // Skip the Philox call for blocks with no candidate (filtered distributions are sparse).
    bool any = false;
    for (size_t j = block * 4; j < std::min(v, block * 4 + 4); ++j) any |= weights[j] > 0.0f;
    if (!any) continue;
    const PhiloxCounter bits = KeyedBlock(seed, position, purpose, static_cast<uint32_t>(block));
    for (size_t j = block * 4; j < std::min(v, block * 4 + 4); ++j) {
      if (!(weights[j] > 0.0f)) continue;
      const double score = std::log(double(weights[j])) + GumbelFromBits(bits.v[j & 3]);
      if (score > best_score) {
        best_score = score;
        best = static_cast<int32_t>(j);
      }
    }
  }
  return best;
}

}  // namespace specgen
