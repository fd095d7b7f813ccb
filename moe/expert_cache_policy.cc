#include "moe/expert_cache_policy.h"

#include <algorithm>

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

ExpertCachePolicy::ExpertCachePolicy(CachePolicy policy, int64_t slots, int n_layers, int n_experts,
                                     int64_t aging_period)
    : policy_(policy),
      slots_(std::max<int64_t>(slots, 0)),
      n_layers_(std::max(n_layers, 0)),
      n_experts_(std::max(n_experts, 0)),
      aging_period_(aging_period),
      entries_(static_cast<size_t>(n_layers_) * static_cast<size_t>(n_experts_)) {}

ExpertCachePolicy::Key ExpertCachePolicy::KeyOf(int layer, int expert) const {
  const Entry& e = At(layer, expert);
  return {policy_ == CachePolicy::kLfuAging ? e.count : 0, e.last_use, layer, expert};
}

bool ExpertCachePolicy::Cached(int layer, int expert) const {
  if (layer < 0 || layer >= n_layers_ || expert < 0 || expert >= n_experts_) return false;
  return At(layer, expert).cached;
}

void ExpertCachePolicy::Age() {
  for (Entry& e : entries_) e.count /= 2;
  std::set<Key> rebuilt;
  for (const Key& k : order_) rebuilt.insert(KeyOf(std::get<2>(k), std::get<3>(k)));
  order_ = std::move(rebuilt);
}

absl::Status ExpertCachePolicy::Access(int layer, std::span<const int> union_ids) {
  if (layer < 0 || layer >= n_layers_) {
    return InvalidArgument("expert cache: layer ", layer, " outside [0, ", n_layers_, ")");
  }
  std::vector<char> in_union(static_cast<size_t>(n_experts_), 0);
  for (int e : union_ids) {
    if (e < 0 || e >= n_experts_) {
      return InvalidArgument("expert cache: layer ", layer, ": expert ", e, " outside [0, ", n_experts_, ")");
    }
    if (in_union[e]) return InvalidArgument("expert cache: layer ", layer, ": expert ", e, " twice in a union");
    in_union[e] = 1;
  }
  if (static_cast<int64_t>(union_ids.size()) > slots_) {
    return absl::FailedPreconditionError(Cat("expert cache: layer ", layer, " routes to ", union_ids.size(),
                                             " experts in one pass, more than the ", slots_, " slots"));
  }
  if (policy_ == CachePolicy::kLfuAging && aging_period_ > 0 && clock_ > 0 && clock_ % aging_period_ == 0) {
    Age();
  }
  const int64_t now = clock_++;
  // The union's cached experts leave the eviction order first, so no miss of this union evicts them.
  std::vector<int> pinned;
  for (int e : union_ids) {
    if (!At(layer, e).cached) continue;
    order_.erase(KeyOf(layer, e));
    pinned.push_back(e);
  }
  const int64_t in_use = static_cast<int64_t>(order_.size() + pinned.size());
  int64_t free_slots = slots_ - in_use;
  for (int e : union_ids) {
    Entry& entry = At(layer, e);
    if (entry.cached) {
      ++counters_.hits;
    } else {
      ++counters_.misses;
      if (free_slots > 0) {
        --free_slots;
      } else {
        // order_ is non-empty: the union fits the slots and its members are out of order_.
        const Key victim = *order_.begin();
        order_.erase(order_.begin());
        At(std::get<2>(victim), std::get<3>(victim)).cached = false;
        ++counters_.evictions;
      }
      entry.cached = true;
      pinned.push_back(e);
    }
    entry.last_use = now;
    ++entry.count;
  }
  for (int e : pinned) order_.insert(KeyOf(layer, e));
  return absl::OkStatus();
}

}  // namespace specgen::moe
