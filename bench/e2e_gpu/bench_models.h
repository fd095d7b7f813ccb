// What the end-to-end GPU benchmarks share: the HBM figure their floors divide by, where the
// repository's files are, and the synthetic draft model most of them measure.
#pragma once

#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/model/model_spec.h"
#include "engine/model/transformer.h"

namespace specgen::e2e {

constexpr double kHbmBytesPerSecond = 4.2e12;  // HBM's device-to-device copy rate (docs/design.md §2)

// The repository's root: $SPECGEN_SOURCE_DIR, else the working directory when it holds models/, else
// the source directory the build was configured from.
std::filesystem::path SourceDir();

// synth:qwen3-0.6b in bf16 (or the synth model `name`), resident on a fresh CudaBackend (an arena of
// its weights + 2 GiB) with a 2048-slot cache: the model every draft-decode benchmark here measures.
// `narrow`: the same 28 layers and kernels with every matrix shrunk (2 query heads, 1 kv head, FFN
// 256, vocabulary 4096; 0.9 MB a layer), so that a token's time is what the chain of kernels costs by
// itself, whatever the weight bytes.
struct QwenDraft {
  ModelSpec spec;
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Transformer> lm;
};
absl::StatusOr<std::unique_ptr<QwenDraft>> MakeQwenDraft(bool narrow, const std::string& name = "qwen3-0.6b");
// The same, or null with the benchmark marked skipped (no device, or a failure).
std::unique_ptr<QwenDraft> QwenDraftOrSkip(benchmark::State& state, bool narrow = false,
                                           const std::string& name = "qwen3-0.6b");

}  // namespace specgen::e2e
