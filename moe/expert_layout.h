// Where every streamed expert sits in the pinned host arena, and how big a VRAM cache slot is
// (docs/design.md §12). Expert-major: one expert's gate, up and down lie together, so fetching an
// expert is one contiguous copy of `stride` bytes, and a slot holds any layer's expert at the same
// offsets it has on the host. Each matrix starts on a kAlignment boundary (the kernels read 16-byte
// vectors; cuBLAS likes 256).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace specgen {

// One MoE layer: how many experts, and the bytes of one expert's three matrices in their device form.
struct ExpertLayerSize {
  int64_t experts = 0;
  size_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;
};

struct ExpertLayout {
  static constexpr size_t kAlignment = 256;
  struct Layer {
    int64_t experts = 0;
    size_t base = 0;    // offset of expert 0 in the arena
    size_t stride = 0;  // bytes from one expert to the next (a multiple of kAlignment)
    size_t gate = 0, up = 0, down = 0;  // offsets within an expert (gate is 0)
    size_t gate_bytes = 0, up_bytes = 0, down_bytes = 0;
  };
  std::vector<Layer> layers;
  size_t total_bytes = 0;  // the arena's size
  size_t slot_bytes = 0;   // the largest stride: one slot fits any layer's expert

  size_t ExpertOffset(size_t layer, int64_t expert) const {
    return layers[layer].base + static_cast<size_t>(expert) * layers[layer].stride;
  }
};

// The layout of `layers` in order. An empty layer (no experts or a zero-byte matrix) is an error naming it.
absl::StatusOr<ExpertLayout> MakeExpertLayout(std::span<const ExpertLayerSize> layers);

}  // namespace specgen
