// The Transformer's part of the host expert path (TransformerOptions::host_experts, docs/design.md
// §12.1), kept out of transformer.cc: binding the path to the streamed experts, and a streamed layer's
// pass through engine/model/split_routed_experts.h.
#include "engine/core/status_macros.h"
#include "engine/model/split_routed_experts.h"
#include "engine/model/transformer.h"

namespace specgen {

void Transformer::BindHostExperts(const TransformerOptions& options, size_t streamed_layers) {
  if (options.host_experts == nullptr || streamed_ == nullptr || streamed_layers == 0) return;
  if (general_moe_) {
    // The host computes plain softmax-routed SwiGLU experts (moe/host/host_expert.h), and the split
    // runs from MoeFfnBlock's plain branch: issue 45's layers (MoeFfnGeneral) never reach it.
    host_experts_note_ = Cat("--moe-host: the host expert path does not take ", model_->source, "'s ",
                             ArchName(model_->spec.arch), " experts (biases, clamped or sigmoid-routed experts, "
                             "shared experts), so every missed expert crosses the link");
    return;
  }
  const absl::Status bound = options.host_experts->Bind(*streamed_, streamed_layers, model_->spec.n_experts);
  if (bound.ok()) {
    host_experts_ = options.host_experts;
  } else {
    // Not an error: the model is exact without it, only slower; the caller prints the note.
    host_experts_note_ = Cat("--moe-host: the host CPU cannot compute ", model_->source, "'s experts (",
                             bound.message(), "), so every missed expert crosses the link");
  }
}

absl::Status Transformer::SplitStreamedExperts(size_t streamed_layer, const Buffer& x, const Buffer& router_logits,
                                               const HostRoutingScratch& scratch, Buffer* out) {
  const ModelSpec& spec = model_->spec;
  const int64_t pairs = HostExpertPath::kMaxPositions * spec.n_experts_used;
  if (pairs_z_ == nullptr) {
    ASSIGN_OR_RETURN(pairs_z_, backend_->NewBuffer(pairs, spec.hidden));
    ASSIGN_OR_RETURN(pairs_y_, backend_->NewBuffer(pairs, spec.hidden));
  }
  ++host_routed_layer_passes_;
  const SplitRoutingScratch s{scratch, pairs_z_.get(), pairs_y_.get()};
  return RunSplitRoutedExperts(*backend_, x, router_logits, spec.n_experts_used, spec.router_norm, spec.n_experts,
                               streamed_layer, *streamed_, *host_experts_, s, out);
}

}  // namespace specgen
