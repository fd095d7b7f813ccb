// How fast a plan should run: predicted tokens/s of the target alone and with its draft at each draft
// length, under the two routing regimes that bound a real model (uniform routing, the worst case for
// the expert cache, and the temporal locality of a trained MoE), from the plan's bytes, assumed rates
// and an assumed acceptance profile. `specgen plan` prints it; the rates are named with their source.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "moe/acceptance_profile.h"
#include "moe/model_bytes.h"
#include "moe/planner.h"

namespace specgen::moe {

// The rates the prediction assumes. The defaults are specgen's own measurements on one NVIDIA H200;
// bench/RESULTS.md ("Rates `specgen plan` assumes") gives the runs and the arithmetic behind each.
struct SpeedRates {
  // Host→GPU copies of missed experts and streamed dense layers, as a pass achieves them beside its
  // compute: below the link's peak, since the copies share the pass's time with its kernels.
  double link_bytes_per_second = 50e9;
  // A one-position pass reads its weights (non-expert weights + the top-k experts of every MoE layer)
  // at this effective rate: a resident pass is bound by its bytes, not its arithmetic.
  double pass_bytes_per_second = 453e9;
  // Each further position of a pass adds this share of a one-position pass: positions share the
  // weights they read, not their compute.
  double extra_position_share = 0.57;
  // One draft token: its kernels run one after another, so a small draft costs a fixed time a layer
  // whatever its bytes; a larger draft is held by its bytes instead, read at the rate that bf16
  // decode reached.
  double draft_layer_seconds = 20.4e-6;
  double draft_bytes_per_second = 2.08e12;
  std::string source = "measured by specgen on an NVIDIA H200 (bench/RESULTS.md)";
};

// AcceptanceProfile, ParseAcceptance and TokensPerPass: moe/acceptance_profile.h.

struct SpeedRow {
  int k = 0;                  // draft length (0: the target alone)
  double tokens_per_pass = 1;
  double seconds_uniform = 0;   // one pass plus k draft tokens, uniform routing
  double seconds_locality = 0;  // the same, locality routing
  double hit_rate_uniform = 1;  // expert-cache hits among the pass's distinct experts
  double hit_rate_locality = 1;
  // Distinct experts a MoE layer per pass under each routing (0 when no expert streams).
  double distinct_uniform = 0, distinct_locality = 0;
  double tokens_per_second_uniform() const { return tokens_per_pass / seconds_uniform; }
  double tokens_per_second_locality() const { return tokens_per_pass / seconds_locality; }
};

struct SpeedPrediction {
  SpeedRates rates;
  AcceptanceProfile acceptance;
  double draft_token_seconds = 0;  // 0 without a draft
  double expert_bytes = 0;         // one expert of every MoE layer together (what a miss a layer costs)
  std::vector<SpeedRow> rows;      // k = 0..draft_max (k = 0 only without a draft)
  // The draft lengths (>= 1) of the most tokens/s with the draft; 0 without a draft. Row 0 may still be
  // faster: a draft does not always pay.
  int best_k_uniform = 0, best_k_locality = 0;
};

// `draft` may be null (rows for k = 0 only); draft_max <= kMaxPredictedPositions - 1. `alone_plan`, when
// given, is the target's plan without the draft (more room for the expert cache), which row 0 uses.
// Locality hit rates come from LocalityRouting (its calibrated defaults, a fixed seed) through an LRU
// cache of the plan's slots shared by every MoE layer, as the GPU's cache replaces them.
absl::StatusOr<SpeedPrediction> PredictSpeed(const Plan& plan, const ModelBytes& target, const ModelBytes* draft,
                                             int draft_max, const AcceptanceProfile& acceptance,
                                             const SpeedRates& rates = {}, const Plan* alone_plan = nullptr);

}  // namespace specgen::moe
