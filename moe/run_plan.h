// What a run's target streams on the GPU under its budget: the planner (planner.h) asked with the model
// paths, for the CLI and the benchmark runner alike. The answer is what TransformerOptions takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "moe/host/host_path.h"
#include "moe/host/streamed_decision.h"

namespace specgen::moe {

struct OffloadRequest {
  std::string target, draft;  // model paths; draft empty: plain decoding
  int draft_max = 0;          // the verification pass's positions are up to draft_max + 1
  int64_t context = 0;        // positions both KV caches hold
  int kv_element_bytes = 4;   // bytes of one K/V element on the device
  size_t vram_budget = 0;     // the CUDA backend's arena
  size_t host_available = 0;  // host RAM the plan may pin; 0: this machine's MemAvailable now
};

// The plan's part a run acts on (TransformerOptions' fields of the same names).
struct RunPlan {
  // -1 when every expert fits beside everything else (or the target has none), else the slots the
  // planner leaves room for.
  int64_t expert_cache_slots = -1;
  // Dense layers whose FFN streams through a ring of dense_ring_layers VRAM layer buffers (empty when
  // every dense layer is resident), and the bytes they stream per pass.
  std::vector<int> streamed_dense_layers;
  int dense_ring_layers = 0;
  size_t streamed_dense_bytes = 0;
  // Plan::prefill_chunk: positions a prompt chunk takes (0 for a model without experts: the default).
  int64_t prefill_chunk = 0;
  // Where missed experts are computed (--moe-host, docs/design.md §12.1): off unless experts stream.
  moe_host::HostPath host_path;
  // What the streamed passes' host path is decided from (PlanRun fills them where experts stream):
  // the expected distinct and missed experts a layer per pass size n = 1..16, and the experts' shape.
  std::vector<moe_host::PassMisses> expected_passes;
  size_t expert_bytes = 0;  // the largest expert's gate + up + down
  int64_t hidden = 0, top_k = 0, n_experts = 0;
  // Which pass sizes take the host-routed split path (PlanFor, from host_path and the fields above);
  // ApplyRunPlan hands it to the target's HostExpertPath.
  moe_host::StreamedHostDecision host_decision;

  bool streams() const { return expert_cache_slots >= 0 || !streamed_dense_layers.empty(); }
};

// The plan for the request. Errors (the budget below the pair's minimum, too little host RAM for the
// streamed part) state the sizes, before any weight is read.
absl::StatusOr<RunPlan> PlanRun(const OffloadRequest& request);

// PlanRun's expert_cache_slots.
absl::StatusOr<int64_t> PlanExpertCacheSlots(const OffloadRequest& request);

}  // namespace specgen::moe
