// How many expert-cache slots a run's target gets on the GPU under its budget: the planner
// (planner.h) asked with the model paths, for the CLI and the benchmark runner alike.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace specgen::offload {

struct OffloadRequest {
  std::string target, draft;  // model paths; draft empty: plain decoding
  int draft_max = 0;          // the verification pass's positions are up to draft_max + 1
  int64_t context = 0;        // positions both KV caches hold
  int kv_element_bytes = 4;   // bytes of one K/V element on the device
  size_t vram_budget = 0;     // the CUDA backend's arena
};

// What the target's TransformerOptions take from the plan.
struct TargetPlacement {
  int64_t expert_cache_slots = -1;  // -1: every expert fits beside everything else
  int64_t prefill_chunk = 0;        // Plan::prefill_chunk (0 for a model without experts: the default)
};

// The target's placement under the request's budget. Errors (the budget below the pair's minimum,
// too little host RAM for the streamed part) state the sizes, before any weight is read.
absl::StatusOr<TargetPlacement> PlanTarget(const OffloadRequest& request);
// PlanTarget's expert_cache_slots.
absl::StatusOr<int64_t> PlanExpertCacheSlots(const OffloadRequest& request);

}  // namespace specgen::offload
