// What `specgen plan` predicts for a specgen_bench run (moe/speed_prediction.h), recorded beside the
// measurement so that the two compare, and the step costs a run of the bytes-aware draft-length policy
// ("modelled" in draft_lengths) hands its controller (moe/step_cost_model.h).
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "bench/runner/pairing_run.h"
#include "engine/speculative/stats.h"
#include "moe/acceptance_profile.h"
#include "moe/step_cost_model.h"

namespace specgen::bench {

struct RunPrediction {
  int k_uniform = 0, k_locality = 0;  // the run's k; for an adaptive run, the best under the model
  double tokens_per_second_uniform = 0, tokens_per_second_locality = 0;
  // Over the target alone under its own plan (no draft in VRAM), as the run's speedup is measured.
  double speedup_uniform = 0, speedup_locality = 0;
};

// The prediction for `spec` under `profile` with the run's placement: the pairing's models, longest
// draft length and context, the CLI's KV type, and `vram_budget` (0: every weight resident, as on the
// CPU, where the rates, an H200's, do not describe the machine). An error where the plan cannot be made
// or the draft length is past what the prediction covers (15).
absl::StatusOr<RunPrediction> PredictRun(const RunSpec& spec, size_t vram_budget,
                                         const moe::AcceptanceProfile& profile);

// A modelled run's step costs: the plan's prediction with the draft in VRAM at every k, under the
// locality routing model (the trained model's reuse the regime stands for).
absl::StatusOr<moe::StepCostModel> ModelledStepCosts(const RunSpec& spec, size_t vram_budget);

// The acceptance a run measured at each depth, as a profile named "measured": α_i = accepted at depth i
// over the passes that tested it (accepted depth i − 1 and drafted depth i), exact at a fixed k.
moe::AcceptanceProfile MeasuredAcceptance(const SpeculativeStats& stats);

}  // namespace specgen::bench
