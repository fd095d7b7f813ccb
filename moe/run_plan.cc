#include "moe/run_plan.h"

#include <memory>

#include "engine/core/host_memory.h"
#include "engine/core/status_macros.h"
#include "moe/planner.h"

namespace specgen::moe {

absl::StatusOr<RunPlan> PlanRun(const OffloadRequest& request) {
  ASSIGN_OR_RETURN(const ModelBytes target, ReadModelBytes(request.target));
  std::unique_ptr<ModelBytes> draft;
  if (!request.draft.empty()) {
    ASSIGN_OR_RETURN(ModelBytes d, ReadModelBytes(request.draft));
    draft = std::make_unique<ModelBytes>(std::move(d));
  }
  PlanOptions options;
  options.context = request.context;
  options.draft_max = request.draft.empty() ? 0 : request.draft_max;
  options.kv_element_bytes = request.kv_element_bytes;
  options.vram_budget = request.vram_budget;
  options.host_available = request.host_available > 0 ? request.host_available : HostMemoryAvailable();
  absl::StatusOr<Plan> plan = MakePlan(target, draft.get(), options);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        Cat("VRAM budget: ", plan.status().message(), " (`specgen plan` shows the placement)"));
  }
  RunPlan run;
  run.expert_cache_slots = plan->expert_cache_slots;
  run.streamed_dense_layers = plan->streamed_dense_layers;
  run.dense_ring_layers = plan->dense_ring_layers;
  run.streamed_dense_bytes = plan->streamed_dense;
  run.prefill_chunk = plan->prefill_chunk;
  if (plan->expert_cache_slots >= 0) {
    for (const PassPrediction& p : plan->passes) run.expected_passes.push_back({p.n, p.distinct_experts, p.missed_experts});
    run.expert_bytes = target.largest_expert();
    run.hidden = target.spec.hidden;
    run.top_k = target.spec.n_experts_used;
    run.n_experts = target.spec.n_experts;
  }
  return run;
}

absl::StatusOr<int64_t> PlanExpertCacheSlots(const OffloadRequest& request) {
  ASSIGN_OR_RETURN(const RunPlan run, PlanRun(request));
  return run.expert_cache_slots;
}

}  // namespace specgen::moe
