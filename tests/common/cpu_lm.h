// Test helper shared by the CPU model and speculative tests: load a model (HF directory, GGUF file or
// synth: spec) as a Transformer on a given backend. A load failure is a test failure that names the
// path, and returns null so the caller's ASSERT stops the test instead of dereferencing an error.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"

namespace specgen::testing {

inline std::unique_ptr<Transformer> LoadCpuLm(const std::string& path, Backend* backend,
                                              int64_t max_context, DType kv_type = DType::kF32) {
  auto loaded = LoadModel(path);
  EXPECT_TRUE(loaded.ok()) << path << ": " << loaded.status();
  if (!loaded.ok()) return nullptr;
  std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
  TransformerOptions options;
  options.max_context = max_context;
  options.kv_type = kv_type;
  auto lm = Transformer::Create(model, backend, options);
  EXPECT_TRUE(lm.ok()) << path << ": " << lm.status();
  return lm.ok() ? std::move(lm).value() : nullptr;
}

}  // namespace specgen::testing
