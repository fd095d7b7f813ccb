// The one host model of the VRAM expert cache: a pool of slots shared by every MoE layer, with the
// slot tables the device keeps (kernels/expert_cache.cuh decides the same on the device, slot for slot:
// tests/backend_cuda/streamed_experts_test.cc) and the replacement policy. An access by one MoE layer's
// routing takes the union of the routed experts (ascending), keeps the hits (stamped first, so no miss
// of this union evicts them), and gives each miss, in ascending expert id, one of the `misses` victim
// slots of smallest (policy key, stamp, slot index), taken in ascending slot index (an unused slot's
// stamp is 0). The policy key is 0 under LRU, and under LFU with aging the owner's use count, unused
// slots first (counts halve every aging period of accesses and survive eviction). The planner's speed prediction and the
// cache benchmarks run traces through it; the streamed experts must agree with it under LRU.
#pragma once

#include <cstdint>
#include <span>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen::moe {

enum class CachePolicy {
  kLru,       // evict the least recently used (the device's policy)
  kLfuAging,  // evict the least frequently used; counts halve every aging period (ties: LRU)
};
std::string_view CachePolicyName(CachePolicy p);  // "lru", "lfu_aging"

// The distinct expert ids (sorted) that n tokens' top-k choices route to: `routing` holds n·k ids, row
// i the k choices of token i. Ids outside [0, n_experts) are an error naming the row.
absl::StatusOr<std::vector<int>> PassUnion(std::span<const int> routing, int k, int n_experts);

struct CacheCounters {
  int64_t hits = 0;
  int64_t misses = 0;  // each one fetch of one expert
  int64_t evictions = 0;
  int64_t bytes = 0;  // fetched
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
  bool operator==(const CacheCounters&) const = default;
};

class ExpertCacheModel {
 public:
  // `slots` shared by `layers` MoE layers of `experts` each; `expert_bytes[l]`: the bytes a fetch of
  // layer l's expert copies (empty: no byte count). `aging_period`: accesses between halvings of the
  // kLfuAging counts (0: never).
  ExpertCacheModel(CachePolicy policy, int64_t layers, int64_t experts, int64_t slots,
                   std::vector<int64_t> expert_bytes = {}, int64_t aging_period = 0);

  struct Access {
    std::vector<int32_t> experts;                      // the union, ascending
    std::vector<std::pair<int32_t, int32_t>> fetches;  // (expert, slot) for each miss, ascending expert
    int64_t hits = 0, evictions = 0;
  };
  // One layer's routing ids (any count, repeats allowed). InvalidArgument for a bad layer or id,
  // FailedPrecondition when the union needs more slots than there are; the tables are then unchanged.
  absl::StatusOr<Access> Touch(int64_t layer, std::span<const int32_t> ids);

  // Sets the clock before the first access (tests start it near a byte boundary of the stamps).
  void StartClockAt(uint32_t clock) { clock_ = clock; }

  bool Cached(int64_t layer, int64_t expert) const { return slot_of(layer, expert) >= 0; }
  int32_t slot_of(int64_t layer, int64_t expert) const { return slot_of_[layer * experts_ + expert]; }
  int32_t owner(int64_t slot) const { return owner_[slot]; }  // layer * experts + expert, or -1
  uint32_t stamp(int64_t slot) const { return stamp_[slot]; }
  uint32_t clock() const { return clock_; }
  int64_t cached_count() const { return cached_; }
  const CacheCounters& counters() const { return counters_; }

 private:
  using Key = std::tuple<int64_t, uint32_t, int32_t>;  // (policy key, stamp, slot): victims first
  Key KeyOf(int32_t slot) const;

  CachePolicy policy_;
  int64_t layers_, experts_, slots_;
  std::vector<int64_t> expert_bytes_;
  int64_t aging_period_;
  std::vector<int32_t> slot_of_, owner_;
  std::vector<uint32_t> stamp_;
  std::vector<int64_t> uses_;  // kLfuAging: per (layer, expert), halved every aging period
  std::set<Key> order_;        // every slot but those an access in progress has hit
  uint32_t clock_ = 0;
  int64_t accesses_ = 0, cached_ = 0;
  CacheCounters counters_;
};

}  // namespace specgen::moe
