// Where each streamed layer's weights sit in the pinned host arena and in a VRAM ring buffer
// (docs/design.md §12, the dense-layer ring). A streamed layer is one contiguous run of host memory,
// so its copy into a ring buffer is ONE cudaMemcpyAsync; inside it each weight starts on a kAlignment
// boundary at the same offset on the host and in the buffer, so a weight's view into the buffer has a
// fixed address for the model's lifetime (CUDA graphs hold addresses). Streamed layer i lives in
// buffer i mod ring. Plain host code: the CPU build tests it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen {

struct LayerRingLayout {
  // The kernels read 16-byte vectors and cuBLAS likes 256 (as the device arena aligns resident weights).
  static constexpr size_t kAlignment = 256;
  struct Layer {
    size_t base = 0;              // offset of the layer in the host arena (a multiple of kAlignment)
    size_t bytes = 0;             // bytes one copy moves: from the first weight's start to the last one's end
    std::vector<size_t> offsets;  // each weight's offset from base (the first is 0)
  };
  std::vector<Layer> layers;
  size_t host_bytes = 0;    // the arena: every layer, each padded to kAlignment
  size_t buffer_bytes = 0;  // one ring buffer: the largest layer's bytes
  int ring = 0;             // buffers in the ring: min(requested, layers)

  int BufferOf(size_t layer) const { return static_cast<int>(layer % static_cast<size_t>(ring)); }
  // Bytes one pass copies: every layer once.
  size_t PassBytes() const;
};

// The layout of `layers` in order, weight_bytes[i][t] being layer i's weight t in its device form, with
// a ring of `ring_layers` buffers (at most one per layer). InvalidArgument for no layers, a layer
// without weights, a zero-byte weight or ring_layers < 1, naming which.
absl::StatusOr<LayerRingLayout> MakeLayerRingLayout(std::span<const std::vector<size_t>> weight_bytes,
                                                    int ring_layers);

}  // namespace specgen
