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

// TransformerOptions::expert_cache_slots for the target: -1 when every expert fits beside everything
// else, else the slots the planner leaves room for. Errors (the budget below the pair's minimum, too
// little host RAM for the streamed part) state the sizes, before any weight is read.
absl::StatusOr<int64_t> PlanExpertCacheSlots(const OffloadRequest& request);

}  // namespace specgen::offload
