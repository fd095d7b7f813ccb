#include "moe/expert_layout.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace specgen {
namespace {
size_t Align(size_t b) { return (b + ExpertLayout::kAlignment - 1) / ExpertLayout::kAlignment * ExpertLayout::kAlignment; }
}  // namespace

absl::StatusOr<ExpertLayout> MakeExpertLayout(std::span<const ExpertLayerSize> layers) {
  ExpertLayout out;
  size_t at = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const ExpertLayerSize& s = layers[i];
    if (s.experts <= 0 || s.gate_bytes == 0 || s.up_bytes == 0 || s.down_bytes == 0) {
      return InvalidArgument("expert layout: streamed layer ", i, " has ", s.experts, " experts of ", s.gate_bytes,
                             " + ", s.up_bytes, " + ", s.down_bytes, " bytes");
    }
    ExpertLayout::Layer l;
    l.experts = s.experts;
    l.base = at;
    l.gate = 0;
    l.up = Align(s.gate_bytes);
    l.down = l.up + Align(s.up_bytes);
    l.stride = l.down + Align(s.down_bytes);
    l.gate_bytes = s.gate_bytes;
    l.up_bytes = s.up_bytes;
    l.down_bytes = s.down_bytes;
    at += l.stride * static_cast<size_t>(s.experts);
    out.slot_bytes = std::max(out.slot_bytes, l.stride);
    out.layers.push_back(l);
  }
  out.total_bytes = at;
  return out;
}

}  // namespace specgen
