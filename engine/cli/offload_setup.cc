#include "engine/cli/offload_setup.h"

#include <memory>

#include "engine/cli/resource_check.h"
#include "engine/core/status_macros.h"
#include "engine/offload/planner.h"

namespace specgen::cli {

absl::StatusOr<int64_t> PlanExpertCacheSlots(const OffloadRequest& request) {
  ASSIGN_OR_RETURN(const offload::ModelBytes target, offload::ReadModelBytes(request.target));
  if (target.n_moe_layers() == 0) return int64_t{-1};
  std::unique_ptr<offload::ModelBytes> draft;
  if (!request.draft.empty()) {
    ASSIGN_OR_RETURN(offload::ModelBytes d, offload::ReadModelBytes(request.draft));
    draft = std::make_unique<offload::ModelBytes>(std::move(d));
  }
  offload::PlanOptions options;
  options.context = request.context;
  options.draft_max = request.draft.empty() ? 0 : request.draft_max;
  options.kv_element_bytes = request.kv_element_bytes;
  options.vram_budget = request.vram_budget;
  options.host_available = HostMemoryAvailable();
  absl::StatusOr<offload::Plan> plan = offload::MakePlan(target, draft.get(), options);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        Cat("--vram-budget: ", plan.status().message(), " (`specgen plan` shows the placement)"));
  }
  return plan->expert_cache_slots;
}

}  // namespace specgen::cli
