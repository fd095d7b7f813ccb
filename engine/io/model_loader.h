// One entry point from a model path to a validated LoadedModel: a GGUF file, a Hugging Face
// directory (config.json + single or sharded safetensors), or `synth:PRESET[:TYPE[:SEED]]` (random
// weights generated in memory; TYPE defaults to f32, SEED to 0). File-backed weights are views into
// the mappings, which the WeightSet keeps alive; nothing is copied. TYPE is a dtype (every matrix
// in it) or a llama.cpp mix of quant_mix.h (synth:qwen3-30b-a3b:q4_k_m).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/quant_mix.h"
#include "engine/io/synth.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen {

enum class ModelSourceKind { kGguf, kHfDir, kSynth };

// Which kind of source `path` names (by the synth: prefix, a directory, or else a file).
ModelSourceKind SourceKind(const std::string& path);

// `progress` (done, total bytes) follows the work loading does itself: generating synthetic weights.
// File-backed models are mapped, not read, here: their bytes are read where they are used (the
// upload, Transformer::Create), which reports its own progress.
absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(
    const std::string& path_or_synth, const std::function<void(size_t done, size_t total)>& progress = {});

// The parts of a `synth:PRESET[:TYPE[:SEED]]` path (TYPE defaults to f32, SEED to 0).
struct SynthPath {
  std::string preset;
  ExportType type = PureExportType(DType::kF32);  // a plain type or a llama.cpp mix (quant_mix.h)
  uint64_t seed = 0;
};
absl::StatusOr<SynthPath> ParseSynthPath(std::string_view path);

// The spec alone, reading only metadata (synth presets generate nothing).
absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path_or_synth);

// Name of the tensor a Hugging Face checkpoint stores for `key` (per-expert spelling; the loader also
// accepts transformers-5 fused experts). Exposed for tests and error messages.
std::string HfTensorName(const ModelSpec& spec, const WeightKey& key);
// GGUF name of the tensor that holds `key` (for experts, the stacked *_exps tensor).
std::string GgufTensorName(const WeightKey& key);
// The same as `spec`'s architecture names it in llama.cpp (glm4moe/gpt-oss: post_attention_norm).
std::string GgufTensorName(const ModelSpec& spec, const WeightKey& key);

}  // namespace specgen
