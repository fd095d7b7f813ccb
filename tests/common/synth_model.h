// A synthetic model for the GPU tests: a preset's layer shape cut to `layers` dense layers, with its
// vocabulary set to `vocab` (0: the preset's), random weights of `dtype` (bf16 unless asked; seed 1). Null,
// with the failure recorded, if the preset or the weights cannot be made.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/io/synth.h"
#include "gtest/gtest.h"

namespace specgen::testing {

inline std::shared_ptr<const LoadedModel> SynthModel(const char* preset, int64_t layers, int64_t vocab,
                                                     DType dtype = DType::kBF16) {
  auto spec = SynthSpec(preset);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  spec->n_layers = layers;
  spec->layer_is_moe.assign(layers, false);
  if (vocab > 0) spec->vocab_size = vocab;
  auto w = SynthWeights(*spec, dtype, 1);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  return std::shared_ptr<const LoadedModel>(std::move(w).value());
}

}  // namespace specgen::testing
