// What a backend keeps for Backend::PrepareRoutingOverride and OverrideNextRouting (the routing regimes
// of the offload benchmarks, docs/design.md §12): the prepared table, and the one routing call the
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
#include "engine/backend/routing_table.h"

namespace specgen {

class RoutingOverrideState {
 public:
  struct Site {
    const RoutingTable* table = nullptr;
    int layer = 0;
    std::span<const int32_t> positions;
  };

  void Prepare(std::shared_ptr<const RoutingTable> table) {
    table_ = std::move(table);
    armed_.reset();
  }
  const RoutingTable* table() const { return table_.get(); }

  // Arms the next routing call; `backend` names the backend in errors.
  absl::Status Arm(std::string_view backend, int layer, std::span<const int32_t> positions) {
    if (table_ == nullptr) {
      return absl::FailedPreconditionError(Cat(backend, " OverrideNextRouting: no routing table prepared"));
    }
    if (layer < 0 || layer >= table_->moe_layers()) {
      return InvalidArgument(backend, " OverrideNextRouting: MoE layer ", layer, " outside the table's [0, ",
                             table_->moe_layers(), ")");
    }
    armed_ = Site{table_.get(), layer, positions};
    return absl::OkStatus();
  }

  // The armed site, disarmed; nullopt when none. A routing call of `rows` rows over `experts` experts
  // and top-`k` must match the site's positions and the table's experts and k.
  absl::StatusOr<std::optional<Site>> Take(std::string_view backend, int64_t rows, int64_t experts, int64_t k) {
    std::optional<Site> site;
    std::swap(site, armed_);
    if (!site) return site;
    if (static_cast<int64_t>(site->positions.size()) != rows || k != site->table->top_k()) {
      return InvalidArgument(backend, " routing override: ", rows, " rows of top-", k, " routed, the override has ",
                             site->positions.size(), " positions of top-", site->table->top_k());
    }
    if (site->table->n_experts() != experts) {
      return InvalidArgument(backend, " routing override: a table of ", site->table->n_experts(),
                             " experts for a router of ", experts);
    }
    return site;
  }

 private:
  std::shared_ptr<const RoutingTable> table_;
  std::optional<Site> armed_;
};

}  // namespace specgen
