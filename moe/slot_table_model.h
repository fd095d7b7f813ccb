// The host model of the VRAM expert cache's slot tables (kernels/expert_cache.cuh decides the same on
// the device): per (layer, expert) the slot holding it or -1, per slot its owner and last-use stamp.
// An access by one MoE layer's routing takes the union of the routed experts, keeps the hits, and
// gives each miss (ascending expert id) one of the least recently used slots: the `misses` slots of
// smallest (stamp, slot index), taken in ascending slot index. Hits are stamped before victims are
// chosen, so a slot the current union uses is never evicted. The device kernel must agree with this
// model slot for slot (tests/backend_cuda/streamed_experts_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen {

struct SlotCounters {
  int64_t hits = 0, misses = 0, evictions = 0;
  int64_t bytes = 0;  // fetched
  bool operator==(const SlotCounters&) const = default;
};

class SlotTableModel {
 public:
  // `expert_bytes[l]`: the bytes a fetch of layer l's expert copies.
  SlotTableModel(int64_t layers, int64_t experts, int64_t slots, std::vector<int64_t> expert_bytes);

  struct Access {
    std::vector<int32_t> experts;                  // the union, ascending
    std::vector<std::pair<int32_t, int32_t>> fetches;  // (expert, slot) for each miss, ascending expert
    int64_t hits = 0, evictions = 0;
  };
  // One layer's routing ids (any count, each in [0, experts)). The union must fit in the slots
  // (InvalidArgument otherwise, the tables unchanged).
  absl::StatusOr<Access> Touch(int64_t layer, std::span<const int32_t> ids);

  // Sets the clock before the first access (tests start it near a byte boundary of the stamps).
  void StartClockAt(uint32_t clock) { clock_ = clock; }

  int32_t slot_of(int64_t layer, int64_t expert) const { return slot_of_[layer * experts_ + expert]; }
  int32_t owner(int64_t slot) const { return owner_[slot]; }  // layer * experts + expert, or -1
  uint32_t stamp(int64_t slot) const { return stamp_[slot]; }
  uint32_t clock() const { return clock_; }
  const SlotCounters& counters() const { return counters_; }

 private:
  int64_t layers_, experts_, slots_;
  std::vector<int64_t> expert_bytes_;
  std::vector<int32_t> slot_of_, owner_;
  std::vector<uint32_t> stamp_;
  uint32_t clock_ = 0;
  SlotCounters counters_;
};

}  // namespace specgen
