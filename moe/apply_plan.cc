#include "moe/apply_plan.h"

namespace specgen::moe {

void ApplyRunPlan(const RunPlan& plan, TransformerOptions* options) {
  options->expert_cache_slots = plan.expert_cache_slots;
  if (plan.prefill_chunk > 0) options->prefill_chunk = plan.prefill_chunk;
  options->streamed_dense_layers = plan.streamed_dense_layers;
  if (!plan.streamed_dense_layers.empty()) options->dense_ring_layers = plan.dense_ring_layers;
}

}  // namespace specgen::moe
