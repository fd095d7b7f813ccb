#include "moe/slot_table_model.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace specgen {

SlotTableModel::SlotTableModel(int64_t layers, int64_t experts, int64_t slots, std::vector<int64_t> expert_bytes)
    : layers_(layers),
      experts_(experts),
      slots_(slots),
      expert_bytes_(std::move(expert_bytes)),
      slot_of_(layers * experts, -1),
      owner_(slots, -1),
      stamp_(slots, 0) {}

absl::StatusOr<SlotTableModel::Access> SlotTableModel::Touch(int64_t layer, std::span<const int32_t> ids) {
  if (layer < 0 || layer >= layers_) return InvalidArgument("slot table: layer ", layer, " of ", layers_);
  Access a;
  for (int32_t e : ids) {
    if (e < 0 || e >= experts_) return InvalidArgument("slot table: expert ", e, " of ", experts_);
    a.experts.push_back(e);
  }
  std::sort(a.experts.begin(), a.experts.end());
  a.experts.erase(std::unique(a.experts.begin(), a.experts.end()), a.experts.end());
  if (static_cast<int64_t>(a.experts.size()) > slots_) {
    return InvalidArgument("slot table: a union of ", a.experts.size(), " experts for ", slots_, " slots");
  }
  const uint32_t now = ++clock_;
  std::vector<int32_t> missing;
  for (int32_t e : a.experts) {
    const int32_t s = slot_of_[layer * experts_ + e];
    if (s >= 0) {
      stamp_[s] = now;
      ++a.hits;
    } else {
      missing.push_back(e);
    }
  }
  std::vector<int32_t> order(slots_);
  for (int64_t s = 0; s < slots_; ++s) order[s] = static_cast<int32_t>(s);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return stamp_[x] < stamp_[y]; });
  std::vector<int32_t> victims(order.begin(), order.begin() + missing.size());
  std::sort(victims.begin(), victims.end());
  for (size_t i = 0; i < missing.size(); ++i) {
    const int32_t s = victims[i], e = missing[i];
    if (owner_[s] >= 0) {
      slot_of_[owner_[s]] = -1;
      ++a.evictions;
    }
    owner_[s] = static_cast<int32_t>(layer * experts_ + e);
    slot_of_[layer * experts_ + e] = s;
    stamp_[s] = now;
    a.fetches.emplace_back(e, s);
  }
  counters_.hits += a.hits;
  counters_.misses += static_cast<int64_t>(missing.size());
  counters_.evictions += a.evictions;
  counters_.bytes += static_cast<int64_t>(missing.size()) * expert_bytes_[layer];
  return a;
}

}  // namespace specgen
