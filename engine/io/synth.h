// Synthetic models: the exact shapes of published checkpoints (and two tiny ones for tests), with
// random weights generated in host memory. `synth:NAME` is a model path; `inspect` and `plan` need
// only SynthSpec, so even qwen3-235b-a22b costs nothing until SynthWeights is called. Generation is
// counter-based (value = f(seed, tensor index, element index)), so it runs on many threads and gives
// the same bytes whatever the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/quant_mix.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen {

// Preset names with a one-line description each, in display order.
struct SynthPresetInfo {
  std::string name;
  std::string description;
};
std::vector<SynthPresetInfo> SynthPresets();

// The ModelSpec of a preset, or NotFound listing the presets.
absl::StatusOr<ModelSpec> SynthSpec(std::string_view name);

// Random weights for `spec`, each tensor stored in the dtype ChooseTensorType gives under `type`
// (a plain type or a llama.cpp mix such as q4_k_m; norms and routers stay f32). `threads` <= 0 uses
// every hardware thread. `progress`, if set, is called with the bytes generated so far and their
// total (from the generating threads, one at a time). Fails with ResourceExhausted, before
// allocating, when the weights would not fit in physical memory.
absl::StatusOr<std::unique_ptr<LoadedModel>> SynthWeights(
    const ModelSpec& spec, const ExportType& type, uint64_t seed, int threads = 0,
    const std::function<void(size_t done, size_t total)>& progress = {});
// The same with every matrix in `dtype` (rows its block does not divide in f16).
absl::StatusOr<std::unique_ptr<LoadedModel>> SynthWeights(const ModelSpec& spec, DType dtype,
                                                          uint64_t seed, int threads = 0);

// The dtype a synthetic tensor is stored in: ChooseTensorType's, except gpt-oss's expert matrices,
// which are MXFP4 under every quantized type, as the published checkpoints ship them (float types keep
// floats).
DType SynthTensorType(const ExportType& type, const ModelSpec& spec, const WeightKey& key, int64_t row_len);

// Bytes SynthWeights(spec, type or dtype, ...) would allocate for the tensors themselves.
absl::StatusOr<size_t> SynthBytes(const ModelSpec& spec, const ExportType& type);
absl::StatusOr<size_t> SynthBytes(const ModelSpec& spec, DType dtype);

// The plain ExportType of `dtype` (every matrix in it), as SynthWeights(spec, dtype) uses.
ExportType PureExportType(DType dtype);

// The random value of element `index` of tensor number `tensor` (ExpectedTensors order), uniform in
// [-1, 1): exposed for tests of determinism.
float SynthUniform(uint64_t seed, uint64_t tensor, uint64_t index);

}  // namespace specgen
