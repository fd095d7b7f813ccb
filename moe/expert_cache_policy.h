// A reference model of the VRAM expert cache's replacement policy, on the host: a pool of slots shared
// by every MoE layer, fed one layer's expert union of one verification pass at a time. Routed experts
// that are cached hit; each miss takes a free slot or evicts a victim, never one the current union
// uses. It measures policies on traces (hit rates, bytes) and is the model the GPU's slot tables are
// tested against.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen::moe {

enum class CachePolicy {
  kLru,        // evict the least recently used
  kLfuAging,   // evict the least frequently used; counts halve every aging period (ties: LRU)
};
std::string_view CachePolicyName(CachePolicy p);  // "lru", "lfu_aging"

// The distinct expert ids (sorted) that n tokens' top-k choices route to: `routing` holds n·k ids, row
// i the k choices of token i. Ids outside [0, n_experts) are an error naming the row.
absl::StatusOr<std::vector<int>> PassUnion(std::span<const int> routing, int k, int n_experts);

struct CacheCounters {
  int64_t hits = 0;
  int64_t misses = 0;     // each one fetch of one expert
  int64_t evictions = 0;
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

class ExpertCachePolicy {
 public:
  // `slots` shared by `n_layers` MoE layers of `n_experts` each. `aging_period`: accesses (one layer's
  // union) between halvings of the kLfuAging counts.
  ExpertCachePolicy(CachePolicy policy, int64_t slots, int n_layers, int n_experts, int64_t aging_period = 0);

  // One layer's union (distinct ids, any order). Counts a hit per cached id and a miss per other id,
  // which is loaded. FailedPrecondition when the union needs more slots than can be freed (the slots
  // are fewer than the union); InvalidArgument for a bad layer, id or a repeated id.
  absl::Status Access(int layer, std::span<const int> union_ids);

  bool Cached(int layer, int expert) const;
  int64_t cached_count() const { return static_cast<int64_t>(order_.size()); }
  const CacheCounters& counters() const { return counters_; }

 private:
  struct Entry {
    bool cached = false;
    int64_t last_use = -1;
    int64_t count = 0;   // kLfuAging: accesses, halved every aging period (kept after eviction)
  };
  // Eviction order: smallest first. (priority, last_use, layer, expert).
  using Key = std::tuple<int64_t, int64_t, int, int>;
  Key KeyOf(int layer, int expert) const;
  Entry& At(int layer, int expert) { return entries_[static_cast<size_t>(layer) * n_experts_ + expert]; }
  const Entry& At(int layer, int expert) const { return entries_[static_cast<size_t>(layer) * n_experts_ + expert]; }
  void Age();

  CachePolicy policy_;
  int64_t slots_;
  int n_layers_;
  int n_experts_;
  int64_t aging_period_;
  int64_t clock_ = 0;
  std::vector<Entry> entries_;
  std::set<Key> order_;  // the cached experts, victim first
  CacheCounters counters_;
};

}  // namespace specgen::moe
