#include "moe/layer_ring_layout.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace specgen {
namespace {

size_t AlignUp(size_t b) {
  constexpr size_t a = LayerRingLayout::kAlignment;
  return (b + a - 1) / a * a;
}

}  // namespace

size_t LayerRingLayout::PassBytes() const {
  size_t sum = 0;
  for (const Layer& l : layers) sum += l.bytes;
  return sum;
}

absl::StatusOr<LayerRingLayout> MakeLayerRingLayout(std::span<const std::vector<size_t>> weight_bytes,
                                                    int ring_layers) {
  if (weight_bytes.empty()) return InvalidArgument("streamed layers: no layers");
  if (ring_layers < 1) return InvalidArgument("streamed layers: a ring of ", ring_layers, " buffers (at least 1)");
  LayerRingLayout out;
  out.ring = static_cast<int>(std::min<size_t>(static_cast<size_t>(ring_layers), weight_bytes.size()));
  size_t base = 0;
  for (size_t i = 0; i < weight_bytes.size(); ++i) {
    const std::vector<size_t>& w = weight_bytes[i];
    if (w.empty()) return InvalidArgument("streamed layer ", i, ": no weights");
    LayerRingLayout::Layer l;
    l.base = base;
    size_t at = 0;
    for (size_t t = 0; t < w.size(); ++t) {
      if (w[t] == 0) return InvalidArgument("streamed layer ", i, ": weight ", t, " has 0 bytes");
      at = AlignUp(at);
      l.offsets.push_back(at);
      at += w[t];
    }
    l.bytes = at;
    out.buffer_bytes = std::max(out.buffer_bytes, l.bytes);
    base += AlignUp(l.bytes);
    out.layers.push_back(std::move(l));
  }
  out.host_bytes = base;
  return out;
}

}  // namespace specgen
