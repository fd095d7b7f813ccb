// CudaStreamedExperts::HostView: a streamed expert's matrices where the host CPU reads them, for the
// host expert path (engine/model/host_experts.h). The arena keeps each matrix in its device form
// (engine/backend/device_form.h), which for the packed types is the stored GGUF rows byte for byte:
// exactly what moe/host's packed product reads. A type the device keeps otherwise (bf16, or a
// dequantized quant) has no such view: the host path has no kernel for it, so it is refused by name.
#include "engine/backend/device_form.h"
#include "engine/core/packed_product.h"
#include "engine/core/status_macros.h"
#include "moe/cuda/streamed_experts.h"

namespace specgen {

absl::StatusOr<ExpertHostView> CudaStreamedExperts::HostView(size_t i, int expert) const {
  if (i >= layers_.size() || expert < 0 || expert >= layout_.layers[i].experts) {
    return InvalidArgument("streamed experts: no expert ", expert, " in streamed layer ", i);
  }
  const Layer& l = layers_[i];
  for (const DType t : {l.source, l.down_source}) {
    if (!PackedDeviceType(t).has_value() || !packed_product::Covers(t)) {
      return absl::UnimplementedError(Cat("streamed layer ", i, "'s experts are ", Name(t),
                                          "; the host computes q8_0, q4_0, q4_k, q5_k, q6_k and mxfp4 experts only"));
    }
  }
  const ExpertLayout::Layer& ll = layout_.layers[i];
  const uint8_t* base = reinterpret_cast<const uint8_t*>(host_->host()) + layout_.ExpertOffset(i, expert);
  ExpertHostView v;
  v.type = l.source;
  v.down_type = l.down_source;
  v.hidden = l.hidden;
  v.ffn = l.ffn;
  v.gate = base + ll.gate;
  v.up = base + ll.up;
  v.down = base + ll.down;
  return v;
}

}  // namespace specgen
