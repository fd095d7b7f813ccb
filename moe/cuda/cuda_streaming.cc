#include "moe/cuda/cuda_streaming.h"

#include "engine/core/status_macros.h"
#include "moe/cuda/streamed_experts.h"
#include "moe/cuda/streamed_layers.h"

namespace specgen {

absl::StatusOr<std::unique_ptr<StreamedExperts>> CudaWeightStreaming::PrepareExperts(
    std::span<const ExpertViews> layers, const ExpertStreamingOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaStreamedExperts> s, CudaStreamedExperts::Create(backend_, layers, options));
  return std::unique_ptr<StreamedExperts>(std::move(s));
}

absl::StatusOr<std::unique_ptr<StreamedLayers>> CudaWeightStreaming::PrepareLayers(
    std::span<const LayerViews> layers, const LayerStreamingOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaStreamedLayers> s, CudaStreamedLayers::Create(backend_, layers, options));
  return std::unique_ptr<StreamedLayers>(std::move(s));
}

}  // namespace specgen
