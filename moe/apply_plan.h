// The one place a run plan (run_plan.h) meets the models: every caller that places a target under a
// VRAM budget (generate, chat, specgen_bench, the benchmarks) sets its TransformerOptions here, so all
// of them place a model the same way.
#pragma once

#include "engine/model/transformer.h"
#include "moe/run_plan.h"

namespace specgen::moe {

// The TransformerOptions fields a plan sets: expert_cache_slots, prefill_chunk, streamed_dense_layers
// and dense_ring_layers.
void ApplyRunPlan(const RunPlan& plan, TransformerOptions* options);

}  // namespace specgen::moe
