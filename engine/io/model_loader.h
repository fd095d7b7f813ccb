// One entry point from a model path to a validated LoadedModel: a GGUF file, a Hugging Face
// directory (config.json + single or sharded safetensors), or `synth:PRESET[:TYPE[:SEED]]` (random
// weights generated in memory; TYPE defaults to f32, SEED to 0). File-backed weights are views into
// the mappings, which the WeightSet keeps alive; nothing is copied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen {

enum class ModelSourceKind { kGguf, kHfDir, kSynth };

// Which kind of source `path` names (by the synth: prefix, a directory, or else a file).
ModelSourceKind SourceKind(const std::string& path);

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadModel(const std::string& path_or_synth);

// The parts of a `synth:PRESET[:TYPE[:SEED]]` path (TYPE defaults to f32, SEED to 0).
struct SynthPath {
  std::string preset;
  DType dtype = DType::kF32;
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

}  // namespace specgen
