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
      stamp_(slots, 0),
      prefetched_(slots, 0) {}

absl::StatusOr<std::vector<int32_t>> SlotTableModel::Union(int64_t layer, std::span<const int32_t> ids) const {
  if (layer < 0 || layer >= layers_) return InvalidArgument("slot table: layer ", layer, " of ", layers_);
  std::vector<int32_t> u;
  for (int32_t e : ids) {
    if (e < 0 || e >= experts_) return InvalidArgument("slot table: expert ", e, " of ", experts_);
    u.push_back(e);
  }
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  return u;
}

std::vector<int32_t> SlotTableModel::LeastRecent(size_t count) const {
  std::vector<int32_t> order(slots_);
  for (int64_t s = 0; s < slots_; ++s) order[s] = static_cast<int32_t>(s);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return stamp_[x] < stamp_[y]; });
  std::vector<int32_t> victims(order.begin(), order.begin() + count);
  std::sort(victims.begin(), victims.end());
  return victims;
}

void SlotTableModel::Place(int64_t layer, std::span<const int32_t> missing, std::span<const int32_t> victims,
                           uint32_t now, Access* a) {
  for (size_t i = 0; i < missing.size(); ++i) {
    const int32_t s = victims[i], e = missing[i];
    if (owner_[s] >= 0) {
      slot_of_[owner_[s]] = -1;
      ++a->evictions;
    }
    counters_.prefetch_wasted += prefetched_[s];
    prefetched_[s] = 0;
    owner_[s] = static_cast<int32_t>(layer * experts_ + e);
    slot_of_[layer * experts_ + e] = s;
    stamp_[s] = now;
    a->fetches.emplace_back(e, s);
  }
  counters_.evictions += a->evictions;
  counters_.bytes += static_cast<int64_t>(missing.size()) * expert_bytes_[layer];
}

absl::StatusOr<SlotTableModel::Access> SlotTableModel::Touch(int64_t layer, std::span<const int32_t> ids) {
  Access a;
  ASSIGN_OR_RETURN(a.experts, Union(layer, ids));
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
      counters_.prefetch_useful += prefetched_[s];
      prefetched_[s] = 0;
    } else {
      missing.push_back(e);
    }
  }
  Place(layer, missing, LeastRecent(missing.size()), now, &a);
  counters_.hits += a.hits;
  counters_.misses += static_cast<int64_t>(missing.size());
  return a;
}

absl::StatusOr<SlotTableModel::Access> SlotTableModel::Prefetch(int64_t layer, std::span<const int32_t> ids) {
  Access a;
  ASSIGN_OR_RETURN(a.experts, Union(layer, ids));
  const uint32_t now = clock_;
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
  const size_t older = static_cast<size_t>(std::count_if(stamp_.begin(), stamp_.end(), [&](uint32_t st) { return st < now; }));
  missing.resize(std::min(missing.size(), older));
  Place(layer, missing, LeastRecent(missing.size()), now, &a);
  for (const auto& [e, s] : a.fetches) prefetched_[s] = expert_bytes_[layer];
  counters_.prefetches += static_cast<int64_t>(missing.size());
  counters_.prefetch_bytes += static_cast<int64_t>(missing.size()) * expert_bytes_[layer];
  return a;
}

}  // namespace specgen
