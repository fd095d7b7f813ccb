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
// through one VRAM buffer (Stage).
//
// Prefetch (docs/design.md §12): after layer L's attention the next streamed layer's routing is
// predicted from L's residual stream (its ffn norm on the main stream, into buffers of the prefetch's
// own; its router and top-k on a side stream), and once layer L's decision and gather are queued the
// side stream, forked from the main one there, runs kernels::LaunchExpertCachePrefetch, overlapping
// layer L's experts and layer L+1's attention. The next decision (whatever its layer) first joins the
// side stream back, so decisions never run concurrently and every fork is joined within the pass: the
// pattern is capturable in a CUDA graph. Two sets of prediction buffers alternate, since a prediction's
// norm may be queued before the side stream has read the previous one.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_expert_set.h"
#include "engine/backend/cuda/host_arena.h"
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
  absl::Status Prefetch(size_t next, const Buffer& h, const Weight& ffn_norm, const Weight& router, int64_t k,
                        RouterNorm norm, float eps) override;

  const ExpertLayout& layout() const { return layout_; }
  // The device tables (for tests that compare them with moe/slot_table_model.h).
  const kernels::ExpertCacheTables& cache() const { return cache_; }

 private:
  // One layer's fetch (DeviceExpertFetch) and its set.
  class LayerFetch : public DeviceExpertFetch {
   public:
    LayerFetch(CudaStreamedExperts* owner, size_t index, const kernels::ExpertCacheLayer& layer)
        : owner_(owner), index_(index), layer_(layer) {}
    bool Takes(int64_t n_ids) const override;
    absl::Status Fetch(const int32_t* ids, int n_ids, cudaStream_t stream) const override;
    const kernels::ExpertCacheLayer& layer() const { return layer_; }

   private:
    CudaStreamedExperts* owner_;
    size_t index_;
    kernels::ExpertCacheLayer layer_;
  };
  // The side stream's resources (ExpertStreamingOptions::prefetch), created once.
  struct Prediction {
    float* x = nullptr;       // [16, hidden]: the normed residual stream
    float* logits = nullptr;  // [16, experts]
    float* weights = nullptr;  // [16, kRouterMaxTopK]
    int32_t* ids = nullptr;    // [16, kRouterMaxTopK]
    cudaEvent_t normed = nullptr;  // recorded on the main stream after the norm
  };
  struct PrefetchPath {
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    Prediction sets[2];
    int next_set = 0;
    // A prediction queued (its ids in sets[pending_set]) whose prefetch is not yet, for streamed layer
    // pending_layer; and whether a prefetch is queued on the side stream and not yet joined.
    bool pending = false, outstanding = false;
    size_t pending_layer = 0;
    int pending_set = 0, pending_ids = 0;
  };
  // The decision of streamed layer `index` with the prefetch around it (LayerFetch::Fetch).
  absl::Status Decide(size_t index, const int32_t* ids, int n_ids, cudaStream_t stream);
  // Queues the pending prediction's prefetch on the side stream, forked from `stream` here.
  absl::Status LaunchPendingPrefetch(cudaStream_t stream);
  // Forgets the pending prediction, joining its kernels into `stream`.
  absl::Status DropPendingPrefetch(cudaStream_t stream);
  // The main stream waits for the side stream's prefetch, if one is outstanding.
  absl::Status JoinPrefetch(cudaStream_t stream);
  struct Layer {
    kernels::ElemType type = kernels::ElemType::kBF16;       // gate and up
    kernels::ElemType down_type = kernels::ElemType::kBF16;  // down (its own under llama.cpp's _M mixes)
    DType source = DType::kBF16, down_source = DType::kBF16;
    int64_t hidden = 0, ffn = 0;
    std::unique_ptr<LayerFetch> fetch;
    std::unique_ptr<CudaExpertSet> set;
    std::unique_ptr<Weight> staged_gate, staged_up, staged_down;  // views of the staging buffer
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
  void* prediction_block_ = nullptr;  // the prediction buffers (arena), with prefetch on
  std::unique_ptr<PrefetchPath> prefetch_;  // null with prefetch off
  int64_t hidden_ = 0;                // the streamed layers' hidden size
  int64_t staged_ = 0, staged_bytes_ = 0;
};

}  // namespace specgen
