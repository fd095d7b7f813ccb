// The VRAM expert cache driven by the GPU (docs/design.md §12): after an MoE layer's router has written
// its top-k ids on the device, one launch pair looks the layer's expert union up in device-side slot
// tables, picks least-recently-used victims for the misses, copies each missing expert once from mapped
// pinned host memory into its slot (a gather kernel on a few multiprocessors), and points the layer's
// expert address tables (ExpertTables, kernels/routed_experts.cuh) at the slots, so that the routed
// experts' kernels then run unchanged. No host wait and fixed grids: a pass that streams experts can
// be captured in a CUDA graph. The decision is the one moe/slot_table_model.h describes, slot for slot.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace specgen::kernels {

// The most experts a layer may have here (one thread of the decision block each).
inline constexpr int kExpertCacheMaxExperts = 1024;

// Running totals, in device memory; `fetches` is the last decision's miss count (the gather's work).
struct ExpertCacheState {
  unsigned long long hits = 0, misses = 0, evictions = 0, bytes = 0;
  uint32_t clock = 0;  // decisions so far; a slot's stamp is the clock of its last use
  int32_t fetches = 0;
};

// The cache shared by every streamed layer: tables (device) and the slots' memory.
struct ExpertCacheTables {
  int32_t* slot_of = nullptr;     // [layers * experts_per_layer]: slot or -1 (layer-major)
  int32_t* owner = nullptr;       // [slots]: layer * experts + expert, or -1
  uint32_t* stamp = nullptr;      // [slots]: clock of the last use, 0 for never
  int32_t* fetch_expert = nullptr;  // [kExpertCacheMaxExperts]: the last decision's misses (expert ids)
  int32_t* fetch_slot = nullptr;    // [kExpertCacheMaxExperts]: and their slots
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

}  // namespace specgen::kernels
