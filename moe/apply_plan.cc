#include "moe/apply_plan.h"

#include <memory>

#include "engine/core/status_macros.h"
#include "moe/host/streamed_host_path.h"
#include "moe/planner.h"
#if defined(SPECGEN_WITH_CUDA)
#include "moe/cuda/cuda_streaming.h"
#endif

namespace specgen::moe {

absl::StatusOr<RunPlan> PlanFor(const RunRequest& request, size_t vram_budget) {
  if (vram_budget == 0) return RunPlan{};
  OffloadRequest o;
  o.target = request.target;
  o.draft = request.draft_max > 0 ? request.draft : std::string();
  o.draft_max = o.draft.empty() ? 0 : request.draft_max;
  o.context = request.context;
  o.kv_element_bytes = static_cast<int>(Info(request.kv_type).block_bytes);
  o.vram_budget = vram_budget;
  o.host_available = request.host_available;
  ASSIGN_OR_RETURN(RunPlan plan, PlanRun(o));
  if (plan.expert_cache_slots >= 0) {
    plan.host_path = request.host_path;
    plan.host_decision = DecideHostPath(plan);
  }
  return plan;
}

moe_host::StreamedHostDecision DecideHostPath(const RunPlan& plan) {
  moe_host::StreamedDecisionInput in;
  in.passes = plan.expected_passes;
  in.expert_bytes = plan.expert_bytes;
  in.hidden = plan.hidden;
  in.top_k = plan.top_k;
  in.n_experts = plan.n_experts;
  in.cache_slots = plan.expert_cache_slots;
  in.default_link_bytes_per_second = kPcieBytesPerSecond;
  return moe_host::DecideStreamedHostPath(plan.host_path, in);
}

void ApplyRunPlan(const RunPlan& plan, CudaBackend* cuda, TransformerOptions* options) {
  options->expert_cache_slots = plan.expert_cache_slots;
  if (plan.prefill_chunk > 0) options->prefill_chunk = plan.prefill_chunk;
  options->streamed_dense_layers = plan.streamed_dense_layers;
  if (!plan.streamed_dense_layers.empty()) options->dense_ring_layers = plan.dense_ring_layers;
  options->streaming = nullptr;
  options->host_experts = nullptr;
#if defined(SPECGEN_WITH_CUDA)
  if (cuda != nullptr && plan.streams()) options->streaming = std::make_shared<CudaWeightStreaming>(cuda);
  if (options->streaming != nullptr && plan.expert_cache_slots >= 0 && plan.host_decision.any()) {
    moe_host::StreamedHostPath::Options ho;
    ho.mode = plan.host_path.mode;
    ho.calibration = plan.host_path.calibration;
    ho.takes = plan.host_decision.takes;
    ho.link_bytes_per_second = kPcieBytesPerSecond;
    options->host_experts = std::make_shared<moe_host::StreamedHostPath>(std::move(ho));
  }
#else
  (void)cuda;  // a CPU build has no CudaBackend to stream through
#endif
}

TransformerOptions TargetOptions(const RunRequest& request, int64_t context, const RunPlan& plan, CudaBackend* cuda) {
  TransformerOptions options;
  options.max_context = context;
  options.kv_type = request.kv_type;
  ApplyRunPlan(plan, cuda, &options);
  return options;
}

TransformerOptions DraftOptions(const RunRequest& request, int64_t context) {
  TransformerOptions options;
  options.max_context = context;
  options.kv_type = request.kv_type;
  return options;
}

}  // namespace specgen::moe
