// CudaStreamedExperts: the CUDA backend's StreamedExperts (docs/design.md §12). Every streamed layer's
// experts lie in ONE pinned HostArena in the expert-major layout of moe/expert_layout.h, each in the
// backend's device form (engine/backend/device_form.h), so a fetched expert is the bytes a resident
// upload would hold. A VRAM cache of N slots is shared by every layer; its tables live on the device.
//
// A pass of at most 16 positions whose union fits the slots is routed on the device: after the router,
// kernels::LaunchExpertCacheFetch looks the union up, picks LRU victims, copies the misses from mapped
// host memory and points the layer's address tables at the slots; the routed experts' kernels then run
// unchanged. No host wait, so such a pass can be replayed from a CUDA graph. Every other batch (prefill,
// or a union that might exceed the slots) is routed on the host, which stages each routed expert
// through one VRAM buffer (Stage). Expert biases (gpt-oss) never stream: the caller's resident weights
// (ExpertViews), which the layer's address tables and Stage's refs point at.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/weight_streaming.h"
#include "engine/backend/cuda/cuda_expert_set.h"
#include "moe/cuda/host_arena.h"
#include "kernels/expert_cache.cuh"
#include "moe/expert_layout.h"

namespace specgen {

class CudaStreamedExperts : public StreamedExperts {
 public:
  // Blocks of the decision's gather kernel: enough to fill PCIe from mapped memory (docs/design.md §2).
  static constexpr int kGatherBlocks = 32;

  static absl::StatusOr<std::unique_ptr<CudaStreamedExperts>> Create(CudaBackend* backend,
                                                                     std::span<const ExpertViews> layers,
                                                                     const ExpertStreamingOptions& options);
  ~CudaStreamedExperts() override;

  const ExpertSet& layer(size_t i) const override { return *layers_[i].set; }
  absl::StatusOr<ExpertRefs> Stage(size_t i, int expert) override;
  absl::StatusOr<ExpertStreamStats> Stats() override;
  absl::Status EmptyCache() override;
  // The expert's matrices in the pinned arena (streamed_experts_host_view.cc): packed types only.
  absl::StatusOr<ExpertHostView> HostView(size_t i, int expert) const override;

  const ExpertLayout& layout() const { return layout_; }
  // The device tables (for tests that compare them with moe/expert_cache_model.h).
  const kernels::ExpertCacheTables& cache() const { return cache_; }

 private:
  // One layer's fetch (DeviceExpertFetch) and its set.
  class LayerFetch : public DeviceExpertFetch {
   public:
    LayerFetch(const CudaStreamedExperts* owner, const kernels::ExpertCacheLayer& layer)
        : owner_(owner), layer_(layer) {}
    bool Takes(int64_t n_ids) const override;
    absl::Status Fetch(const int32_t* ids, int n_ids, cudaStream_t stream) const override;

   private:
    const CudaStreamedExperts* owner_;
    kernels::ExpertCacheLayer layer_;
  };
  struct Layer {
    kernels::ElemType type = kernels::ElemType::kBF16;       // gate and up
    kernels::ElemType down_type = kernels::ElemType::kBF16;  // down (its own under llama.cpp's _M mixes)
    DType source = DType::kBF16, down_source = DType::kBF16;
    int64_t hidden = 0, ffn = 0;
    std::unique_ptr<LayerFetch> fetch;
    std::unique_ptr<CudaExpertSet> set;
    std::unique_ptr<Weight> staged_gate, staged_up, staged_down;  // views of the staging buffer
    std::vector<const Weight*> gate_bias, up_bias, down_bias;     // resident (ExpertViews), or empty
  };

  explicit CudaStreamedExperts(CudaBackend* backend) : backend_(backend) {}

  CudaBackend* backend_;
  ExpertLayout layout_;
  std::unique_ptr<HostArena> host_;
  std::vector<Layer> layers_;
  kernels::ExpertCacheTables cache_;
  void* tables_block_ = nullptr;  // slot_of, owner, stamp, fetch lists, state (arena)
  void* slots_block_ = nullptr;   // the slots (arena)
  void* staging_ = nullptr;       // one slot for the host-routed path (arena, on first use)
  int64_t staged_ = 0, staged_bytes_ = 0;
};

}  // namespace specgen
