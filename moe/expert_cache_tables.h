// The VRAM the expert cache takes beside its slots, as moe/cuda/streamed_experts.cc lays it out: one
// block of tables (per (layer, expert) its slot, per slot its owner and last-use stamp, the last
// decision's two fetch lists, the counters), one block of expert addresses per layer (gate, up and
// down pointers an expert, then its resident biases' pointers where the model has them), and one slot
// that stages experts for host-routed passes. The planner
// (planner.h) counts exactly these bytes and the allocation is made from them, so the two agree.
// Plain host code: the sizes of the device structs they mirror are checked where those are known
// (static_asserts in streamed_experts.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace specgen::moe {

// kernels::kExpertCacheMaxExperts: the length of each fetch list.
inline constexpr int64_t kExpertCacheFetchEntries = 1024;
// sizeof(kernels::ExpertCacheState) rounded up to 16.
inline constexpr size_t kExpertCacheStateBytes = 48;
// DeviceArena::kAlignment: every arena allocation is rounded up to it.
inline constexpr size_t kArenaAlignment = 256;
// One expert's three device pointers in its layer's address tables.
inline constexpr size_t kExpertAddressBytes = 3 * 8;
// And one pointer for each of its bias roles (gate, up, down: gpt-oss has all three), after them.
inline constexpr size_t kExpertBiasAddressBytes = 8;

inline constexpr size_t Align16(size_t b) { return (b + 15) / 16 * 16; }
inline constexpr size_t ArenaBytes(size_t b) { return (b + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

// The tables block of a cache of `slots` slots over `layers` streamed layers of up to `experts`
// experts each: offsets of its parts and its size (each part 16-byte aligned).
struct ExpertCacheTableLayout {
  size_t slot_of = 0, owner = 0, stamp = 0, fetch_expert = 0, fetch_slot = 0, state = 0;
  size_t bytes = 0;
};
inline ExpertCacheTableLayout ExpertCacheTables(int64_t layers, int64_t experts, int64_t slots) {
  ExpertCacheTableLayout t;
  t.owner = t.slot_of + Align16(static_cast<size_t>(layers * experts) * sizeof(int32_t));
  t.stamp = t.owner + Align16(static_cast<size_t>(slots) * sizeof(int32_t));
  t.fetch_expert = t.stamp + Align16(static_cast<size_t>(slots) * sizeof(uint32_t));
  t.fetch_slot = t.fetch_expert + Align16(kExpertCacheFetchEntries * sizeof(int32_t));
  t.state = t.fetch_slot + Align16(kExpertCacheFetchEntries * sizeof(int32_t));
  t.bytes = t.state + kExpertCacheStateBytes;
  return t;
}

// A streamed layer's address tables: an expert's matrices, then its `bias_roles` biases.
inline size_t ExpertAddressTableBytes(int64_t experts, int bias_roles) {
  return (kExpertAddressBytes + kExpertBiasAddressBytes * static_cast<size_t>(bias_roles)) *
         static_cast<size_t>(experts);
}

// Every arena byte of the cache but its slots: the tables block, the layers' address tables and the
// staging slot (allocated at the first host-routed pass; every prompt longer than 16 positions has one).
inline size_t ExpertCacheOverheadBytes(int64_t layers, int64_t experts, int64_t slots, size_t slot_bytes,
                                       int bias_roles = 0) {
  return ArenaBytes(ExpertCacheTables(layers, experts, slots).bytes) +
         static_cast<size_t>(layers) * ArenaBytes(ExpertAddressTableBytes(experts, bias_roles)) +
         ArenaBytes(slot_bytes);
}

}  // namespace specgen::moe
