// RoutingTable: a fixed expert choice per (absolute position, MoE layer), which a backend can put in
// place of its router's top-k ids (Backend::PrepareRoutingOverride). The router still runs and its
// top-k weights are kept in rank order; only the ids are the table's, the row at position p read at
// p mod the table's length, so a pass redone at the same positions routes the same way. Only the
// offload benchmarks make one (their routing regimes, bench/routing/routing_trace.h); generate and
// chat never do.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specgen {

struct RoutingTableShape {
  int64_t positions = 4096;  // the table's length; later positions wrap around
  int moe_layers = 0;
  int n_experts = 0;
  int top_k = 0;
};

class RoutingTable {
 public:
  // InvalidArgument when a size is below 1, k exceeds the experts, the ids number other than
  // positions * moe_layers * top_k (2^31 at most), or a row holds an id outside [0, n_experts) or
  // one id twice.
  static absl::Status CheckShape(const RoutingTableShape& shape);
  static absl::StatusOr<std::shared_ptr<const RoutingTable>> Create(const RoutingTableShape& shape,
                                                                    std::vector<int32_t> ids);

  const RoutingTableShape& shape() const { return shape_; }
  int64_t positions() const { return shape_.positions; }
  int moe_layers() const { return shape_.moe_layers; }
  int n_experts() const { return shape_.n_experts; }
  int top_k() const { return shape_.top_k; }
  // Every id, [positions, moe_layers, top_k] row-major.
  std::span<const int32_t> ids() const { return ids_; }
  // The k ids of MoE layer `layer` at absolute position `position` (>= 0), read at position mod
  // positions().
  std::span<const int32_t> Row(int64_t position, int layer) const;
  // ids [positions.size(), top_k] (a pass's router output, row i at positions[i]) replaced by the
  // table's rows of MoE layer `layer`. InvalidArgument when the layer, a position or the sizes do not fit.
  absl::Status Rewrite(int layer, std::span<const int32_t> positions, std::span<int32_t> ids) const;

 private:
  RoutingTable(const RoutingTableShape& shape, std::vector<int32_t> ids) : shape_(shape), ids_(std::move(ids)) {}

  RoutingTableShape shape_;
  std::vector<int32_t> ids_;
};

}  // namespace specgen
