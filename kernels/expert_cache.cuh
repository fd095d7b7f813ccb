// The VRAM expert cache driven by the GPU (docs/design.md §12): after an MoE layer's router has written
// its top-k ids on the device, one launch pair looks the layer's expert union up in device-side slot
// tables, picks least-recently-used victims for the misses, copies each missing expert once from mapped
// pinned host memory into its slot (a gather kernel on a few multiprocessors), and points the layer's
// expert address tables (ExpertTables, kernels/routed_experts.cuh) at the slots, so that the routed
// experts' kernels then run unchanged. No host wait and fixed grids: a pass that streams experts can
// be captured in a CUDA graph. The decision is the one moe/slot_table_model.h describes, slot for slot.
//
// A prefetch (LaunchExpertCachePrefetch) brings a layer's predicted experts in ahead of its decision,
// on a side stream while the layer before computes: it takes only slots last used before the latest
// decision (never that decision's union, which the main stream is still reading), keeps its own fetch
// list, and marks what it brought so that the decisions can count those bytes as useful (hit before
// being evicted) or wasted (evicted unused).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace specgen::kernels {

// The most experts a layer may have here (one thread of the decision block each).
inline constexpr int kExpertCacheMaxExperts = 1024;

// Running totals, in device memory; `fetches` is the last decision's miss count (the gather's work).
// `evictions` and `bytes` count the prefetches' too (bytes: every host-to-device byte of the cache).
struct ExpertCacheState {
  unsigned long long hits = 0, misses = 0, evictions = 0, bytes = 0;
  // Experts and bytes prefetched; of those bytes, the ones a decision then hit (useful) and the ones
  // evicted, or emptied, before any decision used them (wasted). The rest are still marked.
  unsigned long long prefetches = 0, prefetch_bytes = 0, prefetch_useful = 0, prefetch_wasted = 0;
  uint32_t clock = 0;  // decisions so far; a slot's stamp is the clock of its last use
  int32_t fetches = 0;
  int32_t prefetch_fetches = 0;  // the last prefetch's fetch count (its gather's work)
};

// The cache shared by every streamed layer: tables (device) and the slots' memory.
struct ExpertCacheTables {
  int32_t* slot_of = nullptr;     // [layers * experts_per_layer]: slot or -1 (layer-major)
  int32_t* owner = nullptr;       // [slots]: layer * experts + expert, or -1
  uint32_t* stamp = nullptr;      // [slots]: clock of the last use, 0 for never
  int32_t* fetch_expert = nullptr;  // [kExpertCacheMaxExperts]: the last decision's misses (expert ids)
  int32_t* fetch_slot = nullptr;    // [kExpertCacheMaxExperts]: and their slots
  int32_t* prefetch_expert = nullptr;  // [kExpertCacheMaxExperts]: the last prefetch's fetches (expert ids)
  int32_t* prefetch_slot = nullptr;    // [kExpertCacheMaxExperts]: and their slots
  unsigned long long* prefetched = nullptr;  // [slots]: bytes a prefetch brought that no decision used yet, or 0
  ExpertCacheState* state = nullptr;
  char* slots = nullptr;          // slot s at slots + s * slot_bytes
  size_t slot_bytes = 0;          // a multiple of 16
  int n_slots = 0;
  int experts_per_layer = 0;      // the key stride of slot_of / owner
};

// One streamed layer: where its experts lie in host memory and the address tables to point.
struct ExpertCacheLayer {
  int layer = 0;        // index into slot_of
  int experts = 0;      // <= experts_per_layer
  const char* host = nullptr;  // device address (mapped pinned host memory) of the layer's expert 0
  size_t stride = 0;    // bytes per expert in host memory and copied per fetch, a multiple of 16
  size_t gate = 0, up = 0, down = 0;  // offsets of the three matrices within an expert
  const void** gate_table = nullptr;  // [experts] each, device: what ExpertTables.gate/up/down point at
  const void** up_table = nullptr;
  const void** down_table = nullptr;
};

// The decision and the fetch for the routing ids[0 .. n_ids) (device int32, each in [0, experts)), whose
// union must not exceed the slots (the caller's check: n_ids <= n_slots, or experts <= n_slots).
// Afterwards the layer's tables hold, for every expert of the union, its slot's matrices; entries of
// experts outside the union are left as they were. `gather_blocks` blocks copy the misses.
cudaError_t LaunchExpertCacheFetch(const ExpertCacheTables& cache, const ExpertCacheLayer& layer,
                                   const int32_t* ids, int n_ids, int gather_blocks, cudaStream_t stream);

// A prefetch of the predicted routing ids[0 .. n_ids) (device int32, each in [0, experts)) of `layer`
// before its decision. With C the state's clock (the latest decision's; not advanced): the union's
// cached experts are stamped C (so they are not taken below; the decision stamps what it uses anyway);
// its missing experts, in ascending id, take the slots of smallest (stamp, index) among those stamped
// before C, as many as there are such slots (fewer misses are prefetched when they run out), each
// stamped C and marked with the bytes it brought. Victims that were marked count as wasted. The
// address tables are left alone (the layer's decision points them). The caller orders it after the
// latest decision and before the next one; it fetches through its own list and writes only slots no
// kernel after the latest decision reads, so it may run beside that decision's gather and experts.
cudaError_t LaunchExpertCachePrefetch(const ExpertCacheTables& cache, const ExpertCacheLayer& layer,
                                      const int32_t* ids, int n_ids, int gather_blocks, cudaStream_t stream);

// Adds the bytes of every prefetched slot not yet used to the wasted count and clears the marks (before
// the cache is emptied).
cudaError_t LaunchExpertCacheForgetPrefetches(const ExpertCacheTables& cache, cudaStream_t stream);

}  // namespace specgen::kernels
