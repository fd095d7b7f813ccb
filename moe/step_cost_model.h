// The cost of a speculative step at each draft length, from the bytes its pass reads and streams
// (docs/design.md §3.4): k draft tokens, the verification pass's compute over k + 1 positions, and the
// experts it misses in the cache, copied over the link. A longer pass routes to more distinct experts
// (the routing model's growth: uniform, or the locality generator's) and so, under a budget, misses more.
// The rates and the per-pass bytes are speed_prediction's; what the adaptive controller's bytes-aware
// policy takes as C(k) (SpeculativeOptions::modelled_step_seconds).
#pragma once

#include <vector>

#include "moe/speed_prediction.h"

namespace specgen::moe {

enum class RoutingModel { kUniform, kLocality };

class StepCostModel {
 public:
  // Rows 0..k_max of `prediction` (made without an alone_plan: a run with a draft keeps the draft in
  // VRAM at every k, k = 0 included).
  StepCostModel(const SpeedPrediction& prediction, RoutingModel routing);

  int k_max() const { return static_cast<int>(seconds_.size()) - 1; }
  // A step of draft length k at the cache's predicted hit rate for a pass of k + 1 positions; k past
  // k_max costs k_max's pass plus the extra draft tokens (the controller never asks for it).
  double Seconds(int k) const;
  // The same when a share `miss_rate` of the pass's distinct experts is not cached (the cache's state
  // as measured): the copies change by distinct(k + 1) · (miss_rate − predicted) experts a layer.
  double Seconds(int k, double miss_rate) const;

 private:
  std::vector<double> seconds_, distinct_, miss_;
  double expert_seconds_ = 0;  // one expert of every MoE layer over the link
  double draft_token_seconds_ = 0;
};

}  // namespace specgen::moe
