// CudaWeightStreaming: the CUDA backend's WeightStreaming (engine/model/weight_streaming.h): experts
// through the device-decided VRAM expert cache (streamed_experts.h), dense layers through the layer
// ring (streamed_layers.h), each from one pinned HostArena. Made by moe::ApplyRunPlan for a plan that
// streams; `backend` must outlive it and everything it prepares.
#pragma once

#include <memory>
#include <span>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/weight_streaming.h"

namespace specgen {

class CudaWeightStreaming : public WeightStreaming {
 public:
  explicit CudaWeightStreaming(CudaBackend* backend) : backend_(backend) {}
  absl::StatusOr<std::unique_ptr<StreamedExperts>> PrepareExperts(std::span<const ExpertViews> layers,
                                                                  const ExpertStreamingOptions& options) override;
  absl::StatusOr<std::unique_ptr<StreamedLayers>> PrepareLayers(std::span<const LayerViews> layers,
                                                                const LayerStreamingOptions& options) override;

 private:
  CudaBackend* backend_;
};

}  // namespace specgen
