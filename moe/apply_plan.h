// The one place a run's models meet the offload plan (run_plan.h): the CLI (generate, chat), the
// benchmark runner (specgen_bench) and the benchmarks all plan here and set their TransformerOptions
// here, so all of them place a model the same way: the same KV cache type, expert slots, prompt chunk
// and streamed dense layers under the same budget.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/model/transformer.h"
#include "moe/run_plan.h"

namespace specgen {
class CudaBackend;
}  // namespace specgen

namespace specgen::moe {

// The KV cache's element type of a run that names none: the CLI's --cache-type default (f16,
// docs/design.md §6.9) and the benchmark runner's.
inline constexpr DType kDefaultKvType = DType::kF16;
inline constexpr const char* kDefaultKvTypeName = "f16";

// What a run places: its models, the verification pass's positions and the KV caches.
struct RunRequest {
  std::string target, draft;  // model paths; draft empty: plain decoding
  int draft_max = 0;          // the verification pass's positions are up to draft_max + 1
  int64_t context = 0;        // positions both KV caches hold
  DType kv_type = kDefaultKvType;
  size_t host_available = 0;  // host RAM the plan may pin; 0: this machine's MemAvailable now
  moe_host::HostPath host_path;  // --moe-host resolved (ResolveHostPath); the plan keeps it where experts stream
};

// The plan of `request` on a CUDA backend with `vram_budget` bytes of arena (PlanRun, from the
// models' headers); a budget of 0 (the CPU's, MadeBackend::vram_budget) plans nothing: every weight
// is host memory already and nothing streams.
absl::StatusOr<RunPlan> PlanFor(const RunRequest& request, size_t vram_budget);

// The decision of which streamed passes take the host path (moe/host/streamed_decision.h) for a plan
// with plan.host_path set: what PlanFor stores in plan.host_decision.
moe_host::StreamedHostDecision DecideHostPath(const RunPlan& plan);

// The TransformerOptions fields a plan sets: expert_cache_slots, prefill_chunk, streamed_dense_layers,
// dense_ring_layers, and the streaming they go through (the CUDA backend's, when `cuda` is given and
// the plan streams; without it every weight is uploaded); where experts stream through it and
// plan.host_decision takes any pass, host_experts (moe/host/streamed_host_path.h).
void ApplyRunPlan(const RunPlan& plan, CudaBackend* cuda, TransformerOptions* options);

// The target's options: `context` positions, the request's KV type, then ApplyRunPlan.
TransformerOptions TargetOptions(const RunRequest& request, int64_t context, const RunPlan& plan, CudaBackend* cuda);
// The draft's: `context` positions and the request's KV type; a draft never streams.
TransformerOptions DraftOptions(const RunRequest& request, int64_t context);

}  // namespace specgen::moe
