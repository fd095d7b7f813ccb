// The CUDA backend's ExpertSet: device tables of one MoE layer's expert addresses (and of their biases,
// where the experts have them), which the routed experts' kernels read (kernels/routed_experts.cuh). A
// resident set's tables are written once; a streamed set (moe/cuda/streamed_experts.h) carries a fetch
// that, run on the device after the router, brings the routed experts into VRAM cache slots and points
// the matrices' tables at them (biases stay resident: their tables never change).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/device_arena.h"
#include "kernels/routed_experts.cuh"

namespace specgen {

// What a streamed layer runs between its router and its experts.
class DeviceExpertFetch {
 public:
  virtual ~DeviceExpertFetch() = default;
  // Whether the union of `n_ids` routed ids always fits the cache (else the host routes the batch).
  virtual bool Takes(int64_t n_ids) const = 0;
  // Queues the cache decision and the fetch for the device ids[0 .. n_ids); no host wait.
  virtual absl::Status Fetch(const int32_t* ids, int n_ids, cudaStream_t stream) const = 0;
};

class CudaExpertSet : public ExpertSet {
 public:
  // `block` (the address tables, from `arena`) is given back when the set dies; `fetch` (may be null:
  // resident) must outlive it.
  CudaExpertSet(const kernels::ExpertTables& tables, DeviceArena* arena, void* block,
                const DeviceExpertFetch* fetch = nullptr)
      : tables_(tables), arena_(arena), block_(block), fetch_(fetch) {}
  ~CudaExpertSet() override { arena_->Free(block_); }
  CudaExpertSet(const CudaExpertSet&) = delete;
  CudaExpertSet& operator=(const CudaExpertSet&) = delete;

  const kernels::ExpertTables& tables() const { return tables_; }
  const DeviceExpertFetch* fetch() const { return fetch_; }

 private:
  kernels::ExpertTables tables_;
  DeviceArena* arena_;
  void* block_;
  const DeviceExpertFetch* fetch_;
};

}  // namespace specgen
