// What a backend keeps for Backend::PrepareRoutingOverride and OverrideNextRouting (the routing regimes
// of the offload benchmarks, docs/design.md §12): the prepared trace, and the one routing call the
// override is armed for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/status_macros.h"
#include "engine/offload/routing_trace.h"

namespace specgen {

class RoutingOverrideState {
 public:
  struct Site {
    const offload::RoutingTrace* trace = nullptr;
    int layer = 0;
    std::span<const int32_t> positions;
  };

  void Prepare(std::shared_ptr<const offload::RoutingTrace> trace) {
    trace_ = std::move(trace);
    armed_.reset();
  }
  const offload::RoutingTrace* trace() const { return trace_.get(); }

  // Arms the next routing call; `backend` names the backend in errors.
  absl::Status Arm(std::string_view backend, int layer, std::span<const int32_t> positions) {
    if (trace_ == nullptr) {
      return absl::FailedPreconditionError(Cat(backend, " OverrideNextRouting: no routing trace prepared"));
    }
    if (layer < 0 || layer >= trace_->moe_layers()) {
      return InvalidArgument(backend, " OverrideNextRouting: MoE layer ", layer, " outside the trace's [0, ",
                             trace_->moe_layers(), ")");
    }
    armed_ = Site{trace_.get(), layer, positions};
    return absl::OkStatus();
  }

  // The armed site, disarmed; nullopt when none. A routing call of `rows` rows over `experts` experts
  // and top-`k` must match the site's positions and the trace's experts and k.
  absl::StatusOr<std::optional<Site>> Take(std::string_view backend, int64_t rows, int64_t experts, int64_t k) {
    std::optional<Site> site;
    std::swap(site, armed_);
    if (!site) return site;
    if (static_cast<int64_t>(site->positions.size()) != rows || k != site->trace->top_k()) {
      return InvalidArgument(backend, " routing override: ", rows, " rows of top-", k, " routed, the override has ",
                             site->positions.size(), " positions of top-", site->trace->top_k());
    }
    if (site->trace->n_experts() != experts) {
      return InvalidArgument(backend, " routing override: a trace of ", site->trace->n_experts(),
                             " experts for a router of ", experts);
    }
    return site;
  }

 private:
  std::shared_ptr<const offload::RoutingTrace> trace_;
  std::optional<Site> armed_;
};

}  // namespace specgen
