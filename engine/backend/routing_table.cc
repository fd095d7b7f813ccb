#include "engine/backend/routing_table.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status RoutingTable::CheckShape(const RoutingTableShape& s) {
  if (s.positions < 1 || s.moe_layers < 1 || s.n_experts < 1 || s.top_k < 1 || s.top_k > s.n_experts ||
      s.positions > (int64_t{1} << 31) / (int64_t{s.moe_layers} * s.top_k)) {
    return InvalidArgument("routing table: ", s.positions, " positions of ", s.moe_layers, " MoE layers, top-",
                           s.top_k, " of ", s.n_experts,
                           " experts: need each >= 1, k <= experts and fewer than 2^31 ids in all");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const RoutingTable>> RoutingTable::Create(const RoutingTableShape& s,
                                                                        std::vector<int32_t> ids) {
  RETURN_IF_ERROR(CheckShape(s));
  const size_t k = static_cast<size_t>(s.top_k);
  if (ids.size() != static_cast<size_t>(s.positions) * s.moe_layers * k) {
    return InvalidArgument("routing table: ", ids.size(), " ids for ", s.positions, " positions of ", s.moe_layers,
                           " MoE layers, top-", s.top_k);
  }
  // The kernels index expert tables by these ids: one out of range would read past them.
  std::vector<int32_t> row(k);
  for (size_t r = 0; r < ids.size() / k; ++r) {
    std::copy_n(ids.begin() + r * k, k, row.begin());
    std::sort(row.begin(), row.end());
    if (row.front() < 0 || row.back() >= s.n_experts || std::adjacent_find(row.begin(), row.end()) != row.end()) {
      return InvalidArgument("routing table: row ", r, " (position ", r / s.moe_layers, ", MoE layer ",
                             r % s.moe_layers, ") is not ", s.top_k, " distinct ids in [0, ", s.n_experts, ")");
    }
  }
  return std::shared_ptr<const RoutingTable>(new RoutingTable(s, std::move(ids)));
}

std::span<const int32_t> RoutingTable::Row(int64_t position, int layer) const {
  const int64_t p = position % shape_.positions;
  return std::span<const int32_t>(ids_).subspan(
      static_cast<size_t>((p * shape_.moe_layers + layer) * shape_.top_k), static_cast<size_t>(shape_.top_k));
}

absl::Status RoutingTable::Rewrite(int layer, std::span<const int32_t> positions, std::span<int32_t> ids) const {
  if (layer < 0 || layer >= shape_.moe_layers) {
    return InvalidArgument("routing table: MoE layer ", layer, " outside [0, ", shape_.moe_layers, ")");
  }
  if (ids.size() != positions.size() * static_cast<size_t>(shape_.top_k)) {
    return InvalidArgument("routing table: ", ids.size(), " routed ids for ", positions.size(),
                           " positions of top-", shape_.top_k);
  }
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0) return InvalidArgument("routing table: negative position ", positions[i], " at row ", i);
    const std::span<const int32_t> row = Row(positions[i], layer);
    std::copy(row.begin(), row.end(), ids.begin() + i * shape_.top_k);
  }
  return absl::OkStatus();
}

}  // namespace specgen
