// ModelSpec from GGUF metadata (architectures llama, qwen3, qwen3moe; `llama` with experts is
// Mixtral), keys per docs/formats.md §1.4. Tensor presence fills what metadata does not
// say: a missing `output.weight` means tied embeddings, a layer without `ffn_gate_inp` is dense.
#pragma once

#include "absl/status/statusor.h"
#include "engine/io/gguf.h"
#include "engine/model/model_spec.h"

namespace specgen {

absl::StatusOr<ModelSpec> ModelSpecFromGguf(const GgufFile& file);

}  // namespace specgen
