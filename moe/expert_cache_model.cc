#include "moe/expert_cache_model.h"

#include <algorithm>
#include <limits>

#include "engine/core/status_macros.h"

namespace specgen::moe {

std::string_view CachePolicyName(CachePolicy p) {
  switch (p) {
    case CachePolicy::kLru: return "lru";
    case CachePolicy::kLfuAging: return "lfu_aging";
  }
  return "?";
}

absl::StatusOr<std::vector<int>> PassUnion(std::span<const int> routing, int k, int n_experts) {
  if (k <= 0 || routing.size() % static_cast<size_t>(k) != 0) {
    return InvalidArgument("expert routing: ", routing.size(), " ids are not rows of k = ", k);
  }
  std::vector<char> seen(static_cast<size_t>(std::max(n_experts, 0)), 0);
  std::vector<int> out;
  for (size_t i = 0; i < routing.size(); ++i) {
    const int e = routing[i];
    if (e < 0 || e >= n_experts) {
      return InvalidArgument("expert routing: token ", i / k, " chooses expert ", e, ", outside [0, ",
                             n_experts, ")");
    }
    if (!seen[e]) out.push_back(e);
    seen[e] = 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

ExpertCacheModel::ExpertCacheModel(CachePolicy policy, int64_t layers, int64_t experts, int64_t slots,
                                   std::vector<int64_t> expert_bytes, int64_t aging_period)
    : policy_(policy),
      layers_(std::max<int64_t>(layers, 0)),
      experts_(std::max<int64_t>(experts, 0)),
      slots_(std::max<int64_t>(slots, 0)),
      expert_bytes_(std::move(expert_bytes)),
      aging_period_(aging_period),
      slot_of_(layers_ * experts_, -1),
      owner_(slots_, -1),
      stamp_(slots_, 0),
      uses_(policy == CachePolicy::kLfuAging ? layers_ * experts_ : 0, 0) {
  for (int64_t s = 0; s < slots_; ++s) order_.insert(KeyOf(static_cast<int32_t>(s)));
}

// Under LRU the order is (stamp, index) alone, as the device's radix select has it (an unused slot's
// stamp is 0); under LFU the owner's uses come first, unused slots before every used one.
ExpertCacheModel::Key ExpertCacheModel::KeyOf(int32_t slot) const {
  int64_t k = 0;
  if (policy_ == CachePolicy::kLfuAging) k = owner_[slot] < 0 ? -1 : uses_[owner_[slot]];
  return {k, stamp_[slot], slot};
}

absl::StatusOr<ExpertCacheModel::Access> ExpertCacheModel::Touch(int64_t layer, std::span<const int32_t> ids) {
  if (layer < 0 || layer >= layers_) return InvalidArgument("expert cache: layer ", layer, " outside [0, ", layers_, ")");
  Access a;
  for (int32_t e : ids) {
    if (e < 0 || e >= experts_) {
      return InvalidArgument("expert cache: layer ", layer, ": expert ", e, " outside [0, ", experts_, ")");
    }
    a.experts.push_back(e);
  }
  std::sort(a.experts.begin(), a.experts.end());
  a.experts.erase(std::unique(a.experts.begin(), a.experts.end()), a.experts.end());
  if (static_cast<int64_t>(a.experts.size()) > slots_) {
    return absl::FailedPreconditionError(Cat("expert cache: layer ", layer, " routes to ", a.experts.size(),
                                             " experts in one pass, more than the ", slots_, " slots"));
  }
  if (policy_ == CachePolicy::kLfuAging && aging_period_ > 0 && accesses_ > 0 && accesses_ % aging_period_ == 0) {
    for (int64_t& u : uses_) u /= 2;
    order_.clear();
    for (int64_t s = 0; s < slots_; ++s) order_.insert(KeyOf(static_cast<int32_t>(s)));
  }
  ++accesses_;
  const uint32_t now = ++clock_;
  std::vector<int32_t> missing;
  for (int32_t e : a.experts) {
    const int32_t s = slot_of_[layer * experts_ + e];
    if (s >= 0) {
      order_.erase(KeyOf(s));  // out of the victims' reach until the access ends
      stamp_[s] = now;
      ++a.hits;
    } else {
      missing.push_back(e);
    }
  }
  // The victims: the first `missing` slots of order_, from which this union's hits have left.
  std::vector<int32_t> victims;
  for (size_t i = 0; i < missing.size(); ++i) {
    victims.push_back(std::get<2>(*order_.begin()));
    order_.erase(order_.begin());
  }
  std::sort(victims.begin(), victims.end());
  for (size_t i = 0; i < missing.size(); ++i) {
    const int32_t s = victims[i], e = missing[i];
    if (owner_[s] >= 0) {
      slot_of_[owner_[s]] = -1;
      ++a.evictions;
    } else {
      ++cached_;
    }
    owner_[s] = static_cast<int32_t>(layer * experts_ + e);
    slot_of_[layer * experts_ + e] = s;
    stamp_[s] = now;
    a.fetches.emplace_back(e, s);
  }
  if (!uses_.empty()) {
    for (int32_t e : a.experts) ++uses_[layer * experts_ + e];
  }
  for (int32_t e : a.experts) order_.insert(KeyOf(slot_of_[layer * experts_ + e]));
  counters_.hits += a.hits;
  counters_.misses += static_cast<int64_t>(missing.size());
  counters_.evictions += a.evictions;
  if (!expert_bytes_.empty()) counters_.bytes += static_cast<int64_t>(missing.size()) * expert_bytes_[layer];
  return a;
}

}  // namespace specgen::moe
